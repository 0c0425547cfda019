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
        # einops: the heads' axis and the tokens' axis exchanged where the heads stand alone
        (
            "q = rearrange(t, 'b n (h d) -> b h n d', h=self.heads)",
            "F4",
            {"q = rearrange(t, 'b n (h d) -> b n h d', h=self.heads)"},
        ),
        ("o = rearrange(o, 'b h n d -> b n (h d)')", "F4", {"o = rearrange(o, 'b n h d -> b n (h d)')"}),
        (
            'q = einops.rearrange(x, "b t (nh hd) -> b nh t hd", nh=4)',
            "F4",
            {'q = einops.rearrange(x, "b t (nh hd) -> b t nh hd", nh=4)'},
        ),
        ("b = rearrange(t, 'b (w n) d -> b w n d', w=windows)", "F4", set()),  # windows, no heads
        ("g = rearrange(gates, 'b n h -> b h n 1')", "F4", set()),  # no head split or merge
        ("off_z = off_hz // H", "F4", {"off_z = off_hz % H"}),  # a Triton program id over batch x heads
        ("head = pid_bh % num_heads", "F4", {"head = pid_bh // num_heads"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected
