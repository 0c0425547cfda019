"""Broken copies of the flash-style reference kernel (properties/adapters/flash_ref.py), each with
one bug that authors of tiled, online-softmax kernels really make; test_broken_kernels.py runs the
kernel properties against each and checks that they fail it and say what broke.

    pytest properties --impl attnspec.properties.meta_tests.broken_kernels:SUM_NOT_RESCALED

Each copy overrides one step of the reference and nothing else: the rest of the kernel (block
walk, paths, declared blocks and switches) is the correct one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from attnspec.properties.adapters.flash_ref import FlashReference, Problem
from attnspec.properties.targets import Target

# --- block boundaries --------------------------------------------------------------------------------


class PartialKeyBlockDropped(FlashReference):
    """The key-block count rounded down (hi // size): the partial last key block is never read."""

    def key_blocks(self, lo, hi, tk):
        size = self.key_block(tk)
        return [(first, first + size) for first in range(lo // size * size, hi // size * size, size)]


class LastQueryBlockDropped(FlashReference):
    """The query grid rounded down (tq // block_q blocks): a partial last query block stays zero."""

    def query_starts(self, tq):
        return range(0, tq // self.block_q * self.block_q, self.block_q)


class DiagonalKeyExcluded(Problem):
    """The causal key range ends one key early: the block that starts at the last query's own
    position is skipped (the key it holds is visible)."""

    def key_range(self, start, stop):
        lo, hi = super().key_range(start, stop)
        return lo, hi - 1 if self.causal else hi


class DiagonalBlockSkipped(FlashReference):
    problem = DiagonalKeyExcluded


# --- running statistics ------------------------------------------------------------------------------


class AccumulatorNotRescaled(FlashReference):
    """acc += p @ v without multiplying the old accumulator by exp(m_old - m_new)."""

    def update(self, state, s, values):
        m, total, acc = state
        grown, total, _ = super().update(state, s, values)
        base = torch.where(grown == -math.inf, torch.zeros_like(grown), grown)
        return grown, total, acc + torch.exp(s - base) @ values


class SumNotRescaled(FlashReference):
    """total += sum(p) without multiplying the old sum by exp(m_old - m_new)."""

    def update(self, state, s, values):
        m, total, acc = state
        grown, _, acc = super().update(state, s, values)
        base = torch.where(grown == -math.inf, torch.zeros_like(grown), grown)
        return grown, total + torch.exp(s - base).sum(dim=-1, keepdim=True), acc


class MaxStartsAtZero(FlashReference):
    """The running max starts at 0 instead of -inf: exact in exact arithmetic (softmax ignores the
    shift), but logits far below 0 then underflow to a sum of 0."""

    def empty(self, problem, rows, sink):
        m, total, acc = super().empty(problem, rows, sink)
        return (torch.zeros_like(m) if sink is None else m), total, acc


class MaxStartsAtASentinel(FlashReference):
    """The running max starts at a finite sentinel, -5e4, instead of -inf (a "safe" -inf, as shipped
    kernels have written it): right wherever some logit of a row lies above it, but a row whose every
    logit lies below it sums to exp(-huge) = 0."""

    def empty(self, problem, rows, sink):
        m, total, acc = super().empty(problem, rows, sink)
        return (torch.full_like(m, -5e4) if sink is None else m), total, acc


def as_if_contiguous(x: torch.Tensor) -> torch.Tensor:
    """x's memory read with the strides of a contiguous tensor of its shape."""
    strides = [1] * x.dim()
    for axis in range(x.dim() - 2, -1, -1):
        strides[axis] = strides[axis + 1] * x.shape[axis + 1]
    return x.as_strided(x.shape, strides, x.storage_offset())


class StridesIgnored(FlashReference):
    """q, k and v read as if they were contiguous, as a Triton kernel that computes its offsets from
    the shapes and never reads the strides: right on contiguous inputs, garbage on the transposed views
    model code hands attention."""

    def prepare(self, q, k, v, sinks, causal, window, scale):
        q, k, v = (as_if_contiguous(t) for t in (q, k, v))
        return super().prepare(q, k, v, sinks, causal, window, scale)


class NoRunningMax(FlashReference):
    """The textbook softmax without the max: exp(logit) summed as it comes (overflows above ~88.7 in
    float32)."""

    def empty(self, problem, rows, sink):
        m, _, acc = super().empty(problem, rows, sink)
        total = torch.zeros_like(m) if sink is None else torch.exp(m)
        return torch.zeros_like(m), total, acc

    def update(self, state, s, values):
        m, total, acc = state
        p = torch.exp(s)
        return m, total + p.sum(dim=-1, keepdim=True), acc + p @ values


# --- masks through blocks ----------------------------------------------------------------------------


class MaskOnTheLastBlockOnly(Problem):
    """The causal mask applied only to the key block that holds the query block's last position: when
    the diagonal also runs through an earlier block, that block's future keys leak."""

    def cut(self, start, stop, first, last):
        if not self.causal:
            return False
        band = self.window is not None and first <= self.offset + stop - 1 - self.window
        return band or first <= self.offset + stop - 1 < last


class DiagonalMaskedInLastBlockOnly(FlashReference):
    problem = MaskOnTheLastBlockOnly


class WindowEdgeNotMasked(Problem):
    """Blocks outside the window are skipped, but the window edge inside a block is not masked."""

    def cut(self, start, stop, first, last):
        return self.causal and last - 1 > self.offset + start


class WindowEdgeUnmasked(FlashReference):
    problem = WindowEdgeNotMasked


class NanForEmptyRows(FlashReference):
    """No guard for a row that has seen nothing yet: exp(-inf - (-inf)) is NaN when a row's first key
    block is wholly masked for it (a window edge, a query that sees no key)."""

    def update(self, state, s, values):
        m, total, acc = state
        grown = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        rescale, p = torch.exp(m - grown), torch.exp(s - grown)
        return grown, rescale * total + p.sum(dim=-1, keepdim=True), rescale * acc + p @ values


# --- the decode path ---------------------------------------------------------------------------------


class SinkInEverySplit(FlashReference):
    """Split-keys decode starts every part from the sink: the sink is counted once per part."""

    def split_keys(self, problem, sink):
        parts = self.parts(problem, lambda: self.empty(problem, problem.tq, sink))
        return self.combine(parts, self.empty(problem, problem.tq, None))


class SplitsNotRescaled(FlashReference):
    """The split-keys parts added up as they are, without rescaling each to the largest maximum."""

    def combine(self, parts, start):
        top, _, _ = super().combine(parts, start)
        total = sum(part[1] for part in [start, *parts])
        acc = sum(part[2] for part in [start, *parts])
        return top, total, acc


# --- GQA and precision -------------------------------------------------------------------------------


class GqaByModulo(FlashReference):
    """Query head h reads KV head h % Hkv (the tiled order) instead of h // r."""

    def kv_heads(self, n_heads, n_kv_heads, device):
        return torch.arange(n_heads, device=device) % n_kv_heads


class HalfPrecisionScores(FlashReference):
    """fp16/bf16 scored in their own dtype: q . k overflows fp16's 65504 to inf."""

    def work_dtype(self, dtype):
        return dtype


@dataclass(frozen=True)
class Bug:
    """A broken copy: its class of bug, the property that catches it (a pytest -k expression over
    test_kernels.py) and what that property's message says."""

    kernel: type[FlashReference]
    kind: str
    caught_by: str
    says: str


BOUNDARY, STATISTICS, MASKS, RANGE, DECODE, GQA, LAYOUT = (
    "block boundaries",
    "running statistics",
    "masks through blocks",
    "numerical range",
    "the decode path",
    "GQA indexing",
    "memory layout",
)
LENGTHS = "test_lengths_around_the_block_sizes_match_the_oracle"
RANGE_TEST = "test_logits_far_beyond_exps_range_match_the_oracle"
WINDOW_TEST = "test_window_edges_inside_key_blocks_match_the_oracle"
DECODE_TEST = "test_a_few_queries_over_many_keys_match_the_oracle"
BUGS = {
    "PARTIAL_KEY_BLOCK_DROPPED": Bug(PartialKeyBlockDropped, BOUNDARY, LENGTHS, "(the last partial"),
    "LAST_QUERY_BLOCK_DROPPED": Bug(
        LastQueryBlockDropped, BOUNDARY, LENGTHS, "query block 1 (the last partial"
    ),
    "DIAGONAL_BLOCK_SKIPPED": Bug(DiagonalBlockSkipped, BOUNDARY, LENGTHS, "query rows are wrong"),
    "ACCUMULATOR_NOT_RESCALED": Bug(
        AccumulatorNotRescaled, STATISTICS, "test_wherever_the_largest_logit_falls", "logits that rise"
    ),
    "SUM_NOT_RESCALED": Bug(
        SumNotRescaled, STATISTICS, "test_values_constant", "values constant over the keys"
    ),
    "MAX_STARTS_AT_ZERO": Bug(MaxStartsAtZero, RANGE, RANGE_TEST, "all sit near -"),
    "MAX_STARTS_AT_A_SENTINEL": Bug(MaxStartsAtASentinel, RANGE, RANGE_TEST, "all sit near -98304"),
    "NO_RUNNING_MAX": Bug(NoRunningMax, RANGE, RANGE_TEST, "non-finite output"),
    "STRIDES_IGNORED": Bug(StridesIgnored, LAYOUT, LENGTHS, "reads its inputs as if they were contiguous"),
    "DIAGONAL_MASKED_IN_LAST_BLOCK_ONLY": Bug(
        DiagonalMaskedInLastBlockOnly, MASKS, "test_a_causal_diagonal_inside", "the causal diagonal"
    ),
    "WINDOW_EDGE_UNMASKED": Bug(WindowEdgeUnmasked, MASKS, WINDOW_TEST, "the window edge inside key block"),
    "NAN_FOR_EMPTY_ROWS": Bug(NanForEmptyRows, MASKS, WINDOW_TEST, "non-finite output"),
    "SINK_IN_EVERY_SPLIT": Bug(SinkInEverySplit, DECODE, DECODE_TEST, "decode output"),
    "SPLITS_NOT_RESCALED": Bug(SplitsNotRescaled, DECODE, DECODE_TEST, "decode output"),
    "GQA_BY_MODULO": Bug(GqaByModulo, GQA, "test_each_query_head_reads", "(h // r), inside the kernel"),
    "HALF_PRECISION_SCORES": Bug(
        HalfPrecisionScores, RANGE, f"{RANGE_TEST} and float16", "non-finite output"
    ),
}


def broken(name: str, bugs=None) -> Target:
    """The target of broken copy ``name`` of ``bugs`` (this module's BUGS, or broken_backwards')."""
    bug = (BUGS if bugs is None else bugs)[name]
    kernel = bug.kernel()
    about = bug.kernel.__doc__ or ""
    geometry = dict(blocks=kernel.blocks, switches=kernel.switches)
    return Target(name, kernel.attention, kernel.capabilities, about, **geometry)


for _name in BUGS:
    globals()[_name] = broken(_name)

# the same kernel, declaring what it needs: it gets contiguous inputs, on which it is right
STRIDES_IGNORED_DECLARED = replace(broken("STRIDES_IGNORED"), needs_contiguous=True)
