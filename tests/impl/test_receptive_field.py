"""Receptive field of a stack of windowed layers (RF-1, RF-2), read off the exact Jacobian sparsity.

With window W (query i sees keys i-W < j <= i), L stacked windowed layers make output i depend
on inputs i-L(W-1) .. i: exactly L(W-1)+1 tokens. One full-attention layer (the alternating
schedule) makes output i depend on every input 0..i, and never on a later one.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnspec.impl import TransformerStack
from attnspec.kit.asserts import assert_exactly_equal
from attnspec.kit.references import dependency_matrix
from attnspec.kit.strategies import BlockCase, block_cases, randomize_

# Every property here runs on each attention path (explicit and tiled; see conftest.py), and
# only on impl/ itself (--impl impl).
pytestmark = pytest.mark.usefixtures("attention_path")


def _dependencies(case: BlockCase, device) -> torch.Tensor:
    """(T, T) boolean: output token i of the float64 stack has a non-zero derivative in input j.

    The Jacobian costs one backward pass per output feature, so each output token is first
    contracted with a random (seeded) direction: its row of the Jacobian is then a random
    combination of the rows of J_ij, which is zero exactly where J_ij is and non-zero with
    probability one where it is not.
    """
    stack = randomize_(TransformerStack(case.config()).to(device=device, dtype=torch.float64), case.seed + 1)
    gen = torch.Generator().manual_seed(case.seed + 2)
    direction = torch.randn(1, case.seq, case.d_model, generator=gen, dtype=torch.float64).to(device)
    x = case.input(device, torch.float64)
    return dependency_matrix(lambda t: (stack(t) * direction).sum(-1, keepdim=True), x).cpu()


def _band(seq: int, lowest_offset: int | None) -> torch.Tensor:
    """expected[i, j] = (i - lowest_offset <= j <= i), lowest_offset None = no lower limit."""
    i = torch.arange(seq).unsqueeze(1)
    j = torch.arange(seq).unsqueeze(0)
    allowed = j <= i
    if lowest_offset is not None:
        allowed = allowed & (j >= i - lowest_offset)
    return allowed


def _describe(dep: torch.Tensor) -> str:
    return "\n".join("".join("x" if v else "." for v in row) for row in dep.tolist())


@pytest.mark.req("RF-1")
@given(
    case=block_cases(max_seq=12),
    n_layers=st.integers(1, 3),
    window=st.integers(1, 4),
    seq=st.integers(1, 12),
)
def test_windowed_stack_sees_exactly_l_times_w_minus_1_plus_1_tokens(device, case, n_layers, window, seq):
    case = replace(case, n_layers=n_layers, window=window, window_layers="all", batch=1, seq=seq)
    dep = _dependencies(case, device)
    reach = n_layers * (window - 1)
    expected = _band(seq, reach)
    what = f"dependencies of a {n_layers}-layer stack, W={window} (band {reach}):\n{_describe(dep)}"
    assert_exactly_equal(dep, expected, what)


@pytest.mark.req("RF-2", "MASK-4")
@given(
    case=block_cases(max_seq=12),
    n_layers=st.integers(2, 3),
    window=st.integers(1, 4),
    seq=st.integers(1, 12),
)
def test_alternating_schedule_sees_the_whole_prefix(device, case, n_layers, window, seq):
    case = replace(case, n_layers=n_layers, window=window, window_layers="even", batch=1, seq=seq)
    dep = _dependencies(case, device)
    what = f"dependencies of a {n_layers}-layer alternating stack, W={window}:\n{_describe(dep)}"
    assert_exactly_equal(dep, _band(seq, None), what)
