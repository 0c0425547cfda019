"""F3 (f03_scale_missing.py): missing 1/sqrt(d_k) scale (default scale 1, or the * scale dropped).

Its idioms: the scale in all its forms."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "w = torch.matmul(q, k.transpose(2, 3)) * scaling",
            "F3",
            {"w = torch.matmul(q, k.transpose(2, 3))"},
        ),
        ("w = q @ k.transpose(-2, -1) / math.sqrt(d)", "F3", {"w = q @ k.transpose(-2, -1)"}),
        ("w = q @ k.transpose(-2, -1) * (1.0 / d ** 0.5)", "F3", {"w = q @ k.transpose(-2, -1) * 1.0"}),
        ("self.scaling = self.head_dim**-0.5", "F3", {"self.scaling = 1.0"}),
        ("scores *= sm_scale", "F3", {"pass"}),
        ("o = attn(q, k, v, scale=self.scaling)", "F3", {"o = attn(q, k, v, scale=1.0)"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("y = x * self.scale_out", "F3"),  # not a softmax scale name
        # a rotary term's scale is xPos's (local-attention's apply_rotary_pos_emb), not the softmax's
        ("q = (q * freqs.cos() * scale) + (rotate_half(q) * freqs.sin() * scale)", "F3"),
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
