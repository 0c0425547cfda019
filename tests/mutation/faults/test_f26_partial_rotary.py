"""F26 (f26_partial_rotary.py): partial rotary rotating the wrong features (the share dropped: all of d; or
the two slices swapped).

Its idioms: partial rotary's share dropped (GPT-NeoX's rotary_ndims, the rope init's dim), or its."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        # rotated and passed slices exchanged (apply_rotary_pos_emb's q_rot, q_pass)
        (
            "self.rotary_ndims = int(self.head_size * partial_rotary_factor)",
            "F26",
            {"self.rotary_ndims = int(self.head_size)"},
        ),
        (
            "dim = int(head_dim * config.rope_parameters['partial_rotary_factor'])",
            "F26",
            {"dim = int(head_dim)"},
        ),
        ("rotated = d if rotary_dim is None else rotary_dim", "F26", {"rotated = d"}),
        (
            "q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]",
            "F26",
            {
                "q_rot, q_pass = q[..., rotary_dim:], q[..., rotary_dim:]",
                "q_rot, q_pass = q[..., :rotary_dim], q[..., :rotary_dim]",
            },
        ),
        (
            "q_embed = torch.cat([q_embed, q_pass], dim=-1)",
            "F26",
            {"q_embed = torch.cat([q_pass, q_embed], dim=-1)"},
        ),
        (  # litgpt: the rotated width named rope_n_elem
            "q_roped = apply_rope(q[..., :rope_n_elem], cos, sin)",
            "F26",
            {"q_roped = apply_rope(q[..., rope_n_elem:], cos, sin)"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("half = head_dim // 2", "F26"),  # RoPE's own halves, not a partial share
        ("y = x[..., :half]", "F26"),
        ("y = torch.cat([a, b], dim=-1)", "F26"),  # nothing passed through by name
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
