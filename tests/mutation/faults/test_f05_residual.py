"""F5 (f05_residual.py): residual branch dropped, or added to the normalised input.

Its idioms: the residual sum written as an assignment."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("h = residual + h", "F5", {"h = h"}),
        ("t = x + t", "F5", {"t = t"}),
        # litgpt: the residual added last in the returned sum
        (
            "return self.mlp(x_normed) + x",
            "F5",
            {"return self.mlp(x_normed)", "return self.mlp(x_normed) + self.norm(x)"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("h = x + x", "F5"),
        ("return self.proj(y) + bias", "F5"),  # a bias, no residual
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
