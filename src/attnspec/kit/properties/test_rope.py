"""Rotary embeddings of any target (--impl with the "rope" capability): ROPE-1, -2, -3.

RoPE convention (CONVENTIONS.md): feature i is paired with feature i + d/2 and the pair at position p
is rotated by the angle p * base^(-2i/d); a target that declares ``rotary_pct`` rotates the first r =
int(d * rotary_pct) features so (d read as r) and passes the rest unchanged. The oracle in the tested
dtype builds its angle table in that dtype too, as transformers and gpt-oss do (float32); impl's own
forms (offset, 2-D input, device, errors) are in test_positions.py, held to exact angles.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnspec.kit.asserts import (
    assert_close,
    assert_equal_within_golden,
    assert_exactly_equal,
    assert_rope_golden,
)
from attnspec.kit.loading import current
from attnspec.kit.strategies import (
    full_precision,
    head_dims,
    precise_dtype,
    seeded_randn,
    seeds,
)
from attnspec.specs.oracle import rope_oracle

TARGET = current()
pytestmark = pytest.mark.needs("rope")

positions_st = st.integers(0, 2048)
# the bases models use and a small one (every angle large); a target fixed at one base declares it
bases = st.just(float(TARGET.rope_base)) if TARGET.rope_base else st.sampled_from([10000.0, 10.0, 500000.0])


def rotated(d: int) -> int:
    """How many of a head's d features the target rotates (all, or its rotary_pct of them)."""
    return TARGET.rotary_dim(d) or d


# even sizes among the target's declared head_dims, whose rotated part is whole pairs
rope_dims = head_dims.map(TARGET.head_size).filter(lambda d: rotated(d) >= 2 and rotated(d) % 2 == 0)
dtypes = st.sampled_from(full_precision())


BASE = float(TARGET.rope_base or 10000.0)  # where a property does not draw one


def rope_at(x: torch.Tensor, positions: list[int], base: float = BASE) -> torch.Tensor:
    return TARGET.rope(x, torch.tensor(positions, device=x.device), base)


def oracle(x: torch.Tensor, positions: list[int], base: float = BASE, **keywords) -> torch.Tensor:
    """The float64 oracle, over the features the target rotates."""
    return rope_oracle(x, positions, base, rotary_dim=TARGET.rotary_dim(x.shape[-1]), **keywords)


def lowp_rope(x: torch.Tensor, positions: list[int], base: float, dtype: torch.dtype) -> torch.Tensor:
    """The oracle in ``dtype``, its angle table included."""
    return oracle(x, positions, base, dtype=dtype, angles_in_dtype=True)


# --------------------------------------------------------------------------- ROPE-1


@pytest.mark.req("ROPE-1")
@given(d=rope_dims, t=st.integers(1, 6), base=bases, data=st.data(), seed=seeds)
def test_rope_scores_depend_only_on_relative_offset(device, d, t, base, data, seed):
    """<R_m q, R_n k> == <R_(m+s) q, R_(n+s) k> for arbitrary positions m, n and shift s."""
    pos_q = data.draw(st.lists(positions_st, min_size=t, max_size=t), label="pos_q")
    pos_k = data.draw(st.lists(positions_st, min_size=t, max_size=t), label="pos_k")
    s = data.draw(st.integers(-min(pos_q + pos_k), 2048), label="shift")
    dtype = precise_dtype()
    q = seeded_randn(seed, 2, t, d, device=device, dtype=dtype)
    k = seeded_randn(seed + 1, 2, t, d, device=device, dtype=dtype)
    shifted_q, shifted_k = [p + s for p in pos_q], [p + s for p in pos_k]

    def scores(rotate, q_at, k_at):  # rotate(x, positions, base)
        return rotate(q, q_at, base) @ rotate(k, k_at, base).transpose(-2, -1)

    def lowp(x, positions, base):
        return lowp_rope(x, positions, base, dtype)

    assert_equal_within_golden(
        scores(rope_at, shifted_q, shifted_k),
        scores(rope_at, pos_q, pos_k),
        scores(oracle, pos_q, pos_k),
        scores(lowp, shifted_q, shifted_k),
        scores(lowp, pos_q, pos_k),
        f"RoPE scores after shifting every position by {s}",
    )


# --------------------------------------------------------------------------- ROPE-2


@pytest.mark.req("ROPE-2")
@given(d=rope_dims, t=st.integers(1, 6), base=bases, data=st.data(), dtype=dtypes, seed=seeds)
def test_rope_preserves_every_half_split_pair_norm(device, d, t, base, data, dtype, seed):
    positions = data.draw(st.lists(positions_st, min_size=t, max_size=t), label="positions")
    x = seeded_randn(seed, 2, 3, t, d, device=device, dtype=dtype)
    y = rope_at(x, positions, base)
    r = rotated(d)
    half = r // 2
    pair_norm_x = torch.sqrt(x[..., :half] ** 2 + x[..., half:r] ** 2)
    pair_norm_y = torch.sqrt(y[..., :half] ** 2 + y[..., half:r] ** 2)
    assert_close(pair_norm_y, pair_norm_x, f"norm of each pair (x_i, x_(i+{half})) after RoPE")
    assert_exactly_equal(y[..., r:], x[..., r:], f"features {r}..{d - 1}, which partial rotary passes")
    assert_close(torch.linalg.vector_norm(y, dim=-1), torch.linalg.vector_norm(x, dim=-1), "vector norm")


@pytest.mark.req("ROPE-2")
@given(d=rope_dims, t=st.integers(1, 6), base=bases, dtype=dtypes, seed=seeds)
def test_rope_is_the_identity_at_position_zero(device, d, t, base, dtype, seed):
    x = seeded_randn(seed, 2, t, d, device=device, dtype=dtype)
    assert_exactly_equal(rope_at(x, [0] * t, base), x, "RoPE at position 0 (every token)")


# --------------------------------------------------------------------------- ROPE-3


@pytest.mark.req("ROPE-3")
@given(d=rope_dims, t=st.integers(1, 6), base=bases, data=st.data(), dtype=dtypes, seed=seeds)
def test_rope_matches_the_oracle_at_drawn_positions(device, d, t, base, data, dtype, seed):
    positions = data.draw(st.lists(positions_st, min_size=t, max_size=t), label="positions")
    x = seeded_randn(seed, 2, 2, t, d, device=device, dtype=dtype)
    out = rope_at(x, positions, base)
    assert out.dtype == dtype and out.device == x.device, f"RoPE of a {dtype} input gave {out.dtype}"
    golden, ref_lowp = oracle(x, positions, base), lowp_rope(x, positions, base, dtype)
    assert_rope_golden(out, golden, ref_lowp, f"RoPE at positions {positions}", x, positions, base)
