"""F4 (f04_head_axes.py): head and sequence axes confused in the head split or merge.

Its idioms: head split and merge."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import changed


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("q = self.q_proj(x).view(shape).transpose(1, 2)", "F4", {"q = self.q_proj(x).view(shape)"}),
        ("o = o.transpose(1, 2).contiguous()", "F4", {"o = o.contiguous()"}),
        (
            "q = q.view(B, T, self.n_head, C // self.n_head)",
            "F4",
            {"q = q.view(B, self.n_head, T, C // self.n_head)"},
        ),
        (
            "k = k.view(-1, self.num_key_value_heads, self.head_dim)",
            "F4",
            {"k = k.view(self.num_key_value_heads, -1, self.head_dim)"},
        ),
        ("o = o.permute(0, 2, 1, 3)", "F4", {"o = o"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected
