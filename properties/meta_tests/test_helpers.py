"""The helpers are tested too: an assertion helper that cannot fail would make every
property that uses it vacuous."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from properties.hypothesis_helpers import AttnCase, attn_cases
from properties.pytest_helpers import assert_exactly_equal, assert_exactly_zero, assert_golden
from properties.references import dependency_matrix


def test_exactly_equal_rejects_one_ulp():
    a = torch.tensor([1.0, 2.0])
    b = torch.nextafter(a, torch.tensor(3.0))
    assert_exactly_equal(a, a.clone(), "same")
    with pytest.raises(AssertionError, match="1 of 2|2 of 2"):
        assert_exactly_equal(a, b, "ulp")
    with pytest.raises(AssertionError, match="shape"):
        assert_exactly_equal(a, a[:1], "shape")


def test_exactly_zero_rejects_tiny_values():
    assert_exactly_zero(torch.zeros(3), "zeros")
    with pytest.raises(AssertionError, match="not exactly zero"):
        assert_exactly_zero(torch.tensor([0.0, 1e-30]), "tiny")


def test_golden_bound_scales_with_the_low_precision_oracle():
    golden = torch.linspace(-1, 1, 11, dtype=torch.float64)
    ref = (golden + 1e-3).float()
    assert_golden((golden + 3e-3).float(), golden, ref, "within 4x the oracle error")
    with pytest.raises(AssertionError, match="exceeds"):
        assert_golden((golden + 1e-2).float(), golden, ref, "beyond it")
    with pytest.raises(AssertionError, match="exceeds"):
        assert_golden(torch.full_like(golden, float("nan")).float(), golden, ref, "NaN")


def test_dependency_matrix_sees_exact_structure():
    x = torch.randn(1, 5, 3, dtype=torch.float64)
    assert torch.equal(dependency_matrix(lambda t: t * 2, x), torch.eye(5, dtype=torch.bool))
    lower = torch.ones(5, 5, dtype=torch.bool).tril()
    assert torch.equal(dependency_matrix(lambda t: t.cumsum(dim=1), x), lower)


def test_cases_are_reproducible_from_their_seed():
    case = AttnCase(2, 4, 2, 3, 5, 4, 6, 2, True, seed=7)
    for a, b in zip(case.make(), case.make(), strict=True):
        assert torch.equal(a, b)
    q, k, v, sinks = case.make(dtype=torch.float64)
    assert q.shape == (2, 4, 3, 4) and k.shape == (2, 2, 5, 4) and v.shape == (2, 2, 5, 6)
    assert sinks is not None and sinks.shape == (4,)


@given(attn_cases(distinct=True))
def test_distinct_cases_have_no_shape_coincidence(case):
    dims = [case.batch, case.n_heads, case.n_kv_heads, case.tq, case.tk, case.head_dim, case.dv]
    assert len(set(dims)) == len(dims)
    assert case.n_heads % case.n_kv_heads == 0


@given(attn_cases(self_attention=True))
def test_self_attention_cases_are_square(case):
    assert case.tq == case.tk
