"""F30 (f30_exp2_without_log2e.py): exp2 without log2(e): the factor dropped while exp2 stays, or exp
for exp2.

Its idioms: the softmax scale folded with log2(e) in every spelling, and the base-2 exponentials."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("qk_scale = sm_scale * 1.44269504", "F30", {"qk_scale = sm_scale"}),
        ("qk_scale = sm_scale * LOG2E", "F30", {"qk_scale = sm_scale"}),
        ("qk_scale = softmax_scale * RCP_LN2", "F30", {"qk_scale = softmax_scale"}),
        ("qk_scale = sm_scale * (1 / math.log(2))", "F30", {"qk_scale = sm_scale"}),
        ("qk *= LOG2E", "F30", {"pass"}),
        ("p = tl.math.exp2(qk - m_ij[:, None])", "F30", {"p = tl.math.exp(qk - m_ij[:, None])"}),
        ("p = torch.exp2(s - m)", "F30", {"p = torch.exp(s - m)"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("slopes = torch.exp2(-8.0 * exponents / num_heads)", "F30"),  # ALiBi's slopes, no softmax
        ("y = x * 1.5", "F30"),
        ("p = torch.exp(s - m)", "F30"),  # base e throughout
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_a_division_by_something_else_is_no_log2e():
    assert mutate(body("y = x * (1.0 / d)", "z = x * (1.0 / LN2)"), "F30") == [
        body("y = x * (1.0 / d)", "z = x")
    ]
