"""F27 (f27_qk_norm.py): q/k norm not applied, or applied after RoPE instead of before it.

Its idioms: a per-head q/k norm dropped (Qwen3's, inside the view and transpose chain)."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "query_states = self.q_norm(self.q_proj(x).view(shape)).transpose(1, 2)",
            "F27",
            {"query_states = self.q_proj(x).view(shape).transpose(1, 2)"},
        ),
        (
            "q, k = self.q_norm(q), self.k_norm(k)",
            "F27",
            {"q, k = q, self.k_norm(k)", "q, k = self.q_norm(q), k"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("h = self.norm(x)", "F27"),  # a pre-norm of the whole width, not a head's q or k
        ("v = self.v_norm(v)", "F27"),
        ("qkv = self.qkv_norm(x)", "F27"),
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_qk_norm_moved_after_the_rotation():
    """F27's other half: the normalisation of q and k, one statement (or an if around it), moved
    after the RoPE statements that follow it; a norm inside a projection chain stays put."""
    made = mutate(
        """
        def forward(self, q, k, offset):
            if self.q_norm is not None:
                q, k = self.q_norm(q), self.k_norm(k)
            q = apply_rope(q, offset=offset)
            k = apply_rope(k, offset=offset)
            return q, k
        """,
        "F27",
    )
    moved = [m for m in made if m.index("apply_rope(k") < m.index("if self.q_norm")]
    assert len(moved) == 1 and len(made) == 3  # moved, and each norm dropped
    chained = mutate(
        """
        def forward(self, x, cos, sin):
            q = self.q_norm(self.q_proj(x))
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            return q
        """,
        "F27",
    )
    assert len(chained) == 1  # dropped only: the statement reads x, so moving it would break the code
