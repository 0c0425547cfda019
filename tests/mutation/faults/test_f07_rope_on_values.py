"""F7 (f07_rope_on_values.py): RoPE applied to V as well as Q and K, or not applied at all."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("q = q * cos + rotate_half(q) * sin", "F7", {"q = q"}),
        ("k = (k * cos) + (self.rotate(k) * sin)", "F7", {"k = k"}),
        ("q = apply_rotary_pos_emb(q, freqs)", "F7", {"q = q"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("y = x * cos + x * sin", "F7"),  # no rotation
        ("w = a * cos_sim + b", "F7"),
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_rope_on_v_in_statement_form():
    rope = mutate(
        """
        def forward(self, x):
            q, k, v = self.split(x)
            value_states = v
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            return q, k, value_states
        """,
        "F7",
    )
    assert any(
        "value_states, _ = apply_rotary_pos_emb(value_states, value_states, cos, sin)" in m for m in rope
    )
    assert any("    pass\n" in m for m in rope)  # RoPE not applied at all
