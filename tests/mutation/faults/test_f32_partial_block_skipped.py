"""F32 (f32_partial_block_skipped.py): the last partial block skipped, or the key-block loop bound one
block short.

Its idioms: block counts, block loops and the causal block-skip bound of tiled kernels."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("grid = (triton.cdiv(N, BLOCK_M), Z * H)", "F32", {"grid = (N // BLOCK_M, Z * H)"}),
        ("n_blocks = tl.cdiv(end_n, BLOCK_N)", "F32", {"n_blocks = end_n // BLOCK_N"}),
        ("num_blocks = (hi + BLOCK_N - 1) // BLOCK_N", "F32", {"num_blocks = hi // BLOCK_N"}),
        (
            "for start_n in range(lo, hi, BLOCK_N): pass",
            "F32",
            {"for start_n in range(lo, hi // BLOCK_N * BLOCK_N, BLOCK_N): pass"},
        ),
        ("for block in range(0, n_blocks): pass", "F32", {"for block in range(0, n_blocks - 1): pass"}),
        (
            "hi = tl.minimum((start_m + 1) * BLOCK_M, seq_len)",
            "F32",
            {"hi = tl.minimum(start_m * BLOCK_M, seq_len)"},
        ),
        (
            "hi = min(start_m + BLOCK_M, n_ctx) if CAUSAL else n_ctx",
            "F32",
            {"hi = min(start_m, n_ctx) if CAUSAL else n_ctx"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("for i in range(0, n, 2): pass", "F32"),  # a stride, not a block
        ("offs_n = tl.minimum(start_n + BLOCK_N, n)", "F32"),  # not a loop's bound
        ("for start_n in range(lo, hi * BLOCK_N, BLOCK_N): pass", "F32"),  # already whole blocks
        ("x = (i + 1) * stride", "F32"),
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
