"""flash-ref: a flash-style reference kernel, written the way tiled attention kernels are.

Queries are taken a block at a time.  For each query block the kernel walks the key blocks (a grid
of ``block_k`` keys from key 0) that some query of the block may see, skips the others, and keeps,
per query, a running maximum m of the logits seen so far, a running sum ("total") of exp(logit - m)
and an accumulator of exp(logit - m) * v; whenever m grows, the sum and the accumulator are rescaled
by exp(m_old - m_new).  Only the blocks that a causal diagonal or a window edge cuts through are
masked; the others are wholly visible.  A sink starts the running statistics (m = sink, sum 1), as a
key whose value is zero.  Query head h reads KV head h // r by index.  Nothing returns the weights.

Like real kernels, it changes path with the problem size, and declares where:

- long sequences (Tk >= ``long_from``) use key blocks of ``long_block_k``;
- decode (Tq < ``decode_below`` queries over Tk >= ``split_from`` keys) splits the visible keys
  into ``splits`` parts, runs each part from empty statistics, and combines the parts' (m, total,
  accumulator) at the end, the sink once (flash-decoding).

``blocks`` and ``switches`` tell the properties (kit/properties/test_kernels.py) where these boundaries
are, so that their cases land on them.  fp16/bf16 are scored and accumulated in float32 and rounded
once; float64 stays float64.

The backward is written by hand, as training kernels write it (an autograd.Function): the forward
saves each row's log-sum-exp L (its sink included), and the backward walks the same blocks, recomputes
P = exp(S - L) block by block, and with D = rowsum(dO * O) forms dV += P^T dO, dS = P * (dO V^T - D),
dQ += dS K * scale, dK += dS^T Q * scale; each KV head sums the gradients of the query heads it serves,
and a sink's gradient is -sum P_sink D over its head's rows.
"""

from __future__ import annotations

import math

import torch

from attnspec.protocol.targets import Target


class FlashReference:
    """attention(q, k, v, *, causal, window, sinks, scale) by online softmax over key blocks."""

    problem: type[Problem]  # the mask geometry (set below, after Problem)
    capabilities = frozenset(
        "window sinks value_dim gqa decode blind non_causal scale float64 float16 grad".split()
    )

    def __init__(
        self,
        block_q: int = 16,
        block_k: int = 16,
        long_block_k: int = 32,
        long_from: int = 96,
        decode_below: int = 3,
        split_from: int = 48,
        splits: int = 3,
    ) -> None:
        self.block_q, self.block_k, self.long_block_k, self.long_from = (
            block_q,
            block_k,
            long_block_k,
            long_from,
        )
        self.decode_below, self.split_from, self.splits = decode_below, split_from, splits
        self.blocks = tuple(sorted({block_q, block_k, long_block_k}))
        self.switches = (decode_below, split_from, long_from)

    # --- the call ------------------------------------------------------------------------------

    def attention(self, q, k, v, *, causal=True, window=None, sinks=None, scale=None):
        n_heads, n_kv_heads = q.shape[1], k.shape[1]
        if n_heads % n_kv_heads:
            raise ValueError(f"{n_heads} query heads cannot be grouped over {n_kv_heads} KV heads")
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        return BlockedAttention.apply(self, q, k, v, sinks, causal, window, scale)

    def prepare(self, q, k, v, sinks, causal, window, scale) -> tuple[Problem, torch.Tensor | None]:
        """The problem in the working dtype, K and V gathered per query head, and the sink logits."""
        n_heads, n_kv_heads = q.shape[1], k.shape[1]
        work = self.work_dtype(q.dtype)
        heads = self.kv_heads(n_heads, n_kv_heads, q.device)
        q, k, v = q.to(work), k[:, heads].to(work), v[:, heads].to(work)
        sink = None if sinks is None else sinks.to(device=q.device, dtype=work).view(1, n_heads, 1, 1)
        return self.problem(q * scale, k, v, causal, window, k.shape[2] - q.shape[2], scale), sink

    def forward_pass(self, problem: Problem, sink) -> tuple[torch.Tensor, torch.Tensor]:
        """(the output (B, Hq, Tq, dv), each row's log-sum-exp (B, Hq, Tq, 1)) in the working dtype."""
        tq = problem.tq
        if tq < self.decode_below and problem.tk >= self.split_from:
            state = self.split_keys(problem, sink)
            return self.finish(state), self.log_sum_exp(state)
        batch, n_heads, _, dv = problem.v.shape
        out = problem.v.new_zeros(batch, n_heads, tq, dv)
        lse = problem.v.new_zeros(batch, n_heads, tq, 1)
        for start in self.query_starts(tq):
            stop = min(start + self.block_q, tq)
            state = self.query_block(problem, start, stop, sink)
            out[:, :, start:stop], lse[:, :, start:stop] = self.finish(state), self.log_sum_exp(state)
        return out, lse

    def work_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """fp16/bf16 are scored and accumulated in float32; float32 and float64 in themselves."""
        return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype

    def query_starts(self, tq: int) -> range:
        """The first query of each query block."""
        return range(0, tq, self.block_q)

    def kv_heads(self, n_heads: int, n_kv_heads: int, device) -> torch.Tensor:
        """The KV head each query head reads: h // r with r = Hq / Hkv."""
        return torch.arange(n_heads, device=device) // (n_heads // n_kv_heads)

    # --- one query block -----------------------------------------------------------------------

    def query_block(self, problem: Problem, start: int, stop: int, sink):
        """The running statistics (m, total, acc) of queries start .. stop-1 after every key they see."""
        lo, hi = problem.key_range(start, stop)
        state = self.empty(problem, stop - start, sink)
        for first, last in self.key_blocks(lo, hi, problem.tk):
            state = self.update(state, *self.scores(problem, start, stop, first, last))
        return state

    def key_block(self, tk: int) -> int:
        """The key block size: wider blocks for long sequences."""
        return self.long_block_k if tk >= self.long_from else self.block_k

    def key_blocks(self, lo: int, hi: int, tk: int) -> list[tuple[int, int]]:
        """The key blocks [first, last) of the grid that hold keys lo .. hi-1."""
        size = self.key_block(tk)
        return [(first, min(first + size, tk)) for first in range(lo // size * size, hi, size)]

    def scores(self, problem: Problem, start: int, stop: int, first: int, last: int):
        """(scaled logits of queries start.. over keys first.., masked where needed; the values)."""
        s = problem.q[:, :, start:stop] @ problem.k[:, :, first:last].transpose(-2, -1)
        if problem.cut(start, stop, first, last):
            s = s.masked_fill(~problem.allowed(start, stop, first, last), -math.inf)
        return s, problem.v[:, :, first:last]

    # --- the running statistics ----------------------------------------------------------------

    def empty(self, problem: Problem, rows: int, sink) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(m, total, acc) before any key: m = -inf, total = 0; with a sink, m = sink and total = 1 (0 for a
        sink of -inf, which is no sink)."""
        batch, n_heads, _, dv = problem.v.shape
        shape = (batch, n_heads, rows, 1)
        acc = problem.v.new_zeros(batch, n_heads, rows, dv)
        if sink is None:
            return problem.v.new_full(shape, -math.inf), problem.v.new_zeros(shape), acc
        m = sink.expand(shape).clone()
        return m, (m > -math.inf).to(acc.dtype), acc

    def update(self, state, s: torch.Tensor, values: torch.Tensor):
        """(m, total, acc) after one more key block of logits ``s`` and its ``values``."""
        m, total, acc = state
        grown = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        # A row that has seen no key and no sink yet keeps m = -inf: exp(-inf - (-inf)) would be NaN.
        base = torch.where(grown == -math.inf, torch.zeros_like(grown), grown)
        rescale = torch.exp(m - base)
        p = torch.exp(s - base)
        return grown, rescale * total + p.sum(dim=-1, keepdim=True), rescale * acc + p @ values

    def finish(self, state) -> torch.Tensor:
        """acc / total; 0 for a query that saw nothing (total = 0)."""
        _, total, acc = state
        return torch.where(
            total > 0, acc / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(acc)
        )

    def log_sum_exp(self, state) -> torch.Tensor:
        """L = m + log(total), the sink included.  A query that saw nothing keeps L = 0: its logits are
        all -inf, so the backward's P = exp(S - L) is 0 there with no guard."""
        m, total, _ = state
        seen = total > 0
        return torch.where(seen, m + torch.log(torch.where(seen, total, torch.ones_like(total))), 0.0)

    # --- the decode path -----------------------------------------------------------------------

    def split_keys(self, problem: Problem, sink):
        """Few queries over many keys: the visible keys in ``splits`` parts, each reduced on its own
        from empty statistics, then the parts combined (and the sink counted once)."""
        parts = self.parts(problem, lambda: self.empty(problem, problem.tq, None))
        return self.combine(parts, self.empty(problem, problem.tq, sink))

    def parts(self, problem: Problem, start) -> list:
        """The statistics of each part of the visible keys (whole key blocks), each from ``start()``."""
        lo, hi = problem.key_range(0, problem.tq)
        block = self.key_block(problem.tk)
        size = block * max(1, math.ceil((hi - lo) / (self.splits * block)))
        parts = []
        for part_lo in range(lo // block * block, hi, size):
            state = start()
            for first, last in self.key_blocks(max(lo, part_lo), min(hi, part_lo + size), problem.tk):
                state = self.update(state, *self.scores(problem, 0, problem.tq, first, last))
            parts.append(state)
        return parts

    def combine(self, parts, start):
        """The statistics of all parts together: every part rescaled to the largest maximum."""
        ms = torch.stack([start[0], *(m for m, _, _ in parts)])
        top = ms.amax(dim=0)  # finite: every decode query sees a key (its own position) in some part
        total = torch.zeros_like(start[1])
        acc = torch.zeros_like(start[2])
        for m, part_total, part_acc in [start, *parts]:
            factor = torch.exp(m - top)
            total = total + factor * part_total
            acc = acc + factor * part_acc
        return top, total, acc

    # --- the backward -----------------------------------------------------------------------------

    def backward_pass(self, problem: Problem, sink, out, lse, d_out):
        """(dq, dk, dv, dsinks) per query head, in the working dtype: query block by query block over
        the key blocks the forward visited, P recomputed from the saved log-sum-exp."""
        d_out = d_out.to(out.dtype)
        big_d = self.row_deltas(out, d_out)
        dq = torch.zeros_like(problem.q)
        dk, dv = torch.zeros_like(problem.k), torch.zeros_like(problem.v)
        for start in self.query_starts(problem.tq):
            stop = min(start + self.block_q, problem.tq)
            lo, hi = problem.key_range(start, stop)
            rows = slice(start, stop)
            for first, last in self.key_blocks(lo, hi, problem.tk):
                s, values = self.recomputed_scores(problem, start, stop, first, last)
                p = self.probabilities(s, lse[:, :, rows])
                dv[:, :, first:last] += p.transpose(-2, -1) @ d_out[:, :, rows]
                ds = p * (d_out[:, :, rows] @ values.transpose(-2, -1) - big_d[:, :, rows])
                dq[:, :, rows] += self.query_gradient(ds, problem.k[:, :, first:last], problem.scale)
                dk[:, :, first:last] += self.key_gradient(ds, problem.q[:, :, rows], problem.scale)
        return dq, dk, dv, self.sink_gradient(sink, lse, big_d)

    def recomputed_scores(self, problem: Problem, start: int, stop: int, first: int, last: int):
        """The forward's masked logits of one block, computed again (nothing of S is saved)."""
        return self.scores(problem, start, stop, first, last)

    def query_gradient(self, ds: torch.Tensor, keys: torch.Tensor, scale: float) -> torch.Tensor:
        """A key block's share of dQ: dS K * scale."""
        return ds @ keys * scale

    def key_gradient(self, ds: torch.Tensor, scaled_queries: torch.Tensor, scale: float) -> torch.Tensor:
        """A query block's share of dK: dS^T Q * scale (the problem's queries carry the scale already)."""
        return ds.transpose(-2, -1) @ scaled_queries

    def row_deltas(self, out: torch.Tensor, d_out: torch.Tensor) -> torch.Tensor:
        """D = rowsum(dO * O) over the value features: (B, Hq, Tq, 1)."""
        return (d_out * out).sum(dim=-1, keepdim=True)

    def probabilities(self, s: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
        """P = exp(S - L), the forward's weights (0 where masked)."""
        return torch.exp(s - lse)

    def sink_gradient(self, sink, lse: torch.Tensor, big_d: torch.Tensor) -> torch.Tensor | None:
        """d loss / d sink_h = -sum over the head's rows of P_sink D (P_sink = exp(sink - L))."""
        if sink is None:
            return None
        return -(self.probabilities(sink, lse) * big_d).sum(dim=(0, 2, 3))

    def fold_heads(self, grad: torch.Tensor, n_kv_heads: int) -> torch.Tensor:
        """A KV head's gradient: the sum over the query heads it serves (h // r reads head g)."""
        batch, n_heads, length, width = grad.shape
        return grad.view(batch, n_kv_heads, n_heads // n_kv_heads, length, width).sum(dim=2)


class BlockedAttention(torch.autograd.Function):
    """The kernel's forward (saving each row's log-sum-exp) and its hand-written backward."""

    @staticmethod
    def forward(ctx, kernel: FlashReference, q, k, v, sinks, causal, window, scale):
        problem, sink = kernel.prepare(q, k, v, sinks, causal, window, scale)
        out, lse = kernel.forward_pass(problem, sink)
        ctx.kernel, ctx.conventions = kernel, (causal, window, scale)
        ctx.save_for_backward(q, k, v, sinks, out, lse)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, sinks, out, lse = ctx.saved_tensors
        kernel = ctx.kernel
        problem, sink = kernel.prepare(q, k, v, sinks, *ctx.conventions)
        dq, dk, dv, dsinks = kernel.backward_pass(problem, sink, out, lse, d_out)
        dk, dv = kernel.fold_heads(dk, k.shape[1]), kernel.fold_heads(dv, k.shape[1])
        dsinks = None if dsinks is None else dsinks.to(sinks.dtype)
        return None, dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dsinks, None, None, None


class Problem:
    """The (scaled) queries, the keys and values per query head, and the mask's geometry: query i
    sits at position offset + i (offset = Tk - Tq, bottom-right) and sees keys p - W < j <= p."""

    def __init__(self, q, k, v, causal: bool, window: int | None, offset: int, scale: float = 1.0) -> None:
        self.q, self.k, self.v, self.scale = q, k, v, scale
        self.causal, self.window, self.offset = causal, window, offset
        self.tq, self.tk = q.shape[2], k.shape[2]

    def key_range(self, start: int, stop: int) -> tuple[int, int]:
        """Keys [lo, hi) that some query of start .. stop-1 may see (lo >= hi: none)."""
        if not self.causal:
            return 0, self.tk
        hi = min(self.offset + stop, self.tk)
        lo = 0 if self.window is None else max(0, self.offset + start - self.window + 1)
        return lo, hi

    def cut(self, start: int, stop: int, first: int, last: int) -> bool:
        """Whether some query of the block may not see some key of first .. last-1."""
        if not self.causal:
            return False
        diagonal = last - 1 > self.offset + start
        band = self.window is not None and first <= self.offset + stop - 1 - self.window
        return diagonal or band

    def allowed(self, start: int, stop: int, first: int, last: int) -> torch.Tensor:
        position = torch.arange(self.offset + start, self.offset + stop, device=self.q.device)[:, None]
        key = torch.arange(first, last, device=self.q.device)[None, :]
        seen = key <= position
        if self.window is not None:
            seen &= key > position - self.window
        return seen


FlashReference.problem = Problem

KERNEL = FlashReference()
TARGET = Target(
    "flash-ref",
    KERNEL.attention,
    KERNEL.capabilities,
    "a flash-style reference kernel: online softmax over key blocks, skipped blocks, split-KV decode",
    # what a conformance campaign mutates: the kernel, its backward included
    sources=("attnspec.adapters.flash_ref",),
    blocks=KERNEL.blocks,
    switches=KERNEL.switches,
)
