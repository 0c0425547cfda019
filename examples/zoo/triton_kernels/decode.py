"""Flash-decoding: a split-keys attention forward in Triton, as serving engines write it for decode.

A decode step has a few queries and a long KV cache: one program per (batch, head) would leave most of
a GPU idle, so the keys are cut into ``NUM_SPLITS`` ranges of whole key blocks and each
(query block, batch·head, split) program reduces its own range with an online softmax, writing the
un-normalised accumulator, the running max and the running sum of its range to float32 scratch
(``_split_kernel``).  A second kernel (``_combine_kernel``) merges the splits of each query: every
split's accumulator and sum are rescaled by ``exp2(m_split - m_max)`` before they are added, the sink
(one logit per query head) joins the sum once, after the merge, and the output is divided and rounded
to the input dtype once.  Problems that are not decode steps (``SPLIT_BELOW`` queries or more, or
fewer than ``SPLIT_FROM`` keys) run the same two kernels with one split: the combine then only
normalises.

Exponentials are base 2: the softmax scale and log2(e) are folded into one float32 constant
(``qk_scale``) and sinks are multiplied by log2(e) where they are read.  fp16 inputs are scored by
``tl.dot`` with a float32 accumulator; P stays in float32 for the P·V product, so the output is rounded
once.  Head sizes are padded to a power of two (at least 16, ``tl.dot``'s smallest tile) and masked, so
any head size runs.  Strides are passed for every input: transposed and sliced caches are read in place.

A target of the zoo (examples/zoo/__init__.py); its broken twins are in twins.py.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
BLOCK_M = 16  # queries per program
BLOCK_N = 16  # keys per inner step
SPLIT_BELOW = 4  # the decode path: fewer queries than this ...
SPLIT_FROM = 48  # ... over at least this many keys
NUM_SPLITS = 4


@triton.jit
def _split_kernel(
    Q, K, V, Acc, M, L,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    n_heads, n_q, n_k, head_dim, value_dim, group, qk_scale, window, keys_per_split,
    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    split = tl.program_id(2)
    n_splits = tl.num_programs(2)
    off_b = off_bh // n_heads
    off_h = off_bh % n_heads
    off_kvh = off_h // group

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    pos_m = offs_m + (n_k - n_q)  # bottom-right: query i sits at position n_k - n_q + i

    q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < n_q) & (offs_d[None, :] < head_dim), other=0.0)
    k_base = K + off_b * stride_kb + off_kvh * stride_kh
    v_base = V + off_b * stride_vb + off_kvh * stride_vh

    # this split's keys, cut down to those the query block may see
    lo = split * keys_per_split
    hi = tl.minimum(lo + keys_per_split, n_k)
    if IS_CAUSAL:
        last_pos = tl.minimum(start_m * BLOCK_M + BLOCK_M, n_q) - 1 + n_k - n_q
        hi = tl.minimum(hi, last_pos + 1)
        if HAS_WINDOW:
            first_pos = start_m * BLOCK_M + n_k - n_q
            lo = tl.maximum(lo, (first_pos - window + 1) // BLOCK_N * BLOCK_N)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(
            k_base + cols[None, :] * stride_kt + offs_d[:, None] * stride_kd,
            mask=(cols[None, :] < n_k) & (offs_d[:, None] < head_dim),
            other=0.0,
        )
        qk = tl.dot(q, k, input_precision="ieee") * qk_scale
        keep = cols[None, :] < n_k
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= pos_m[:, None])
            if HAS_WINDOW:
                keep = keep & (cols[None, :] > pos_m[:, None] - window)
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(qk - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + cols[:, None] * stride_vt + offs_dv[None, :] * stride_vd,
            mask=(cols[:, None] < n_k) & (offs_dv[None, :] < value_dim),
            other=0.0,
        )
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        m_i = m_new

    row = (off_bh * n_splits + split) * n_q + offs_m
    tl.store(M + row, m_i, mask=offs_m < n_q)
    tl.store(L + row, l_i, mask=offs_m < n_q)
    acc_ptrs = Acc + row[:, None] * value_dim + offs_dv[None, :]
    tl.store(acc_ptrs, acc, mask=(offs_m[:, None] < n_q) & (offs_dv[None, :] < value_dim))


@triton.jit
def _combine_kernel(
    Acc, M, L, Sinks, Out,
    stride_ob, stride_oh, stride_ot, stride_od,
    n_heads, n_q, value_dim, n_splits,
    HAS_SINKS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = off_bh // n_heads
    off_h = off_bh % n_heads
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_dv = tl.arange(0, BLOCK_DV)
    row_ok = offs_m < n_q
    tile_ok = row_ok[:, None] & (offs_dv[None, :] < value_dim)

    m_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    for split in range(0, n_splits):
        m_s = tl.load(M + (off_bh * n_splits + split) * n_q + offs_m, mask=row_ok, other=float("-inf"))
        m_max = tl.maximum(m_max, m_s)
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)  # a query that sees no key

    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    for split in range(0, n_splits):
        row = (off_bh * n_splits + split) * n_q + offs_m
        m_s = tl.load(M + row, mask=row_ok, other=float("-inf"))
        l_s = tl.load(L + row, mask=row_ok, other=0.0)
        acc_s = tl.load(Acc + row[:, None] * value_dim + offs_dv[None, :], mask=tile_ok, other=0.0)
        scale = tl.exp2(m_s - m_safe)
        l_i += scale * l_s
        acc += scale[:, None] * acc_s
    if HAS_SINKS:
        sink = tl.load(Sinks + off_h) * 1.4426950408889634  # a natural-log logit, to base 2
        l_i += tl.exp2(sink - m_safe)

    denom = tl.where(l_i > 0.0, l_i, 1.0)
    out = tl.where(l_i[:, None] > 0.0, acc / denom[:, None], 0.0)
    o_ptrs = Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_ot + offs_dv[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=tile_ok)


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """The launcher: q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> (B, Hq, Tq, dv)."""
    if return_weights:
        raise NotImplementedError("the kernel does not materialise the attention weights")
    if window is not None:
        if not isinstance(window, int) or isinstance(window, bool):
            raise TypeError(f"window must be an int, got {type(window).__name__}")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
    batch, n_heads, n_q, head_dim = q.shape
    n_kv, n_k, value_dim = k.shape[1], k.shape[2], v.shape[-1]
    if n_heads % n_kv:
        raise ValueError(f"{n_heads} query heads cannot share {n_kv} KV heads")
    sm_scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    qk_scale = sm_scale * LOG2E

    n_splits = NUM_SPLITS if n_q < SPLIT_BELOW and n_k >= SPLIT_FROM else 1
    keys_per_split = triton.cdiv(triton.cdiv(max(n_k, 1), BLOCK_N), n_splits) * BLOCK_N
    block_d = max(16, triton.next_power_of_2(head_dim))
    block_dv = max(16, triton.next_power_of_2(value_dim))

    out = torch.empty(batch, n_heads, n_q, value_dim, dtype=q.dtype, device=q.device)
    acc = torch.empty(batch * n_heads, n_splits, n_q, value_dim, dtype=torch.float32, device=q.device)
    m = torch.empty(batch * n_heads, n_splits, n_q, dtype=torch.float32, device=q.device)
    l_sum = torch.empty_like(m)
    sink_logits = m if sinks is None else sinks.to(device=q.device, dtype=torch.float32).contiguous()

    grid = (triton.cdiv(n_q, BLOCK_M), batch * n_heads, n_splits)
    _split_kernel[grid](
        q, k, v, acc, m, l_sum,
        *q.stride(), *k.stride(), *v.stride(),
        n_heads, n_q, n_k, head_dim, value_dim, n_heads // n_kv, qk_scale, window or 0, keys_per_split,
        IS_CAUSAL=causal, HAS_WINDOW=causal and window is not None,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=block_d, BLOCK_DV=block_dv,
    )
    _combine_kernel[(triton.cdiv(n_q, BLOCK_M), batch * n_heads)](
        acc, m, l_sum, sink_logits, out,
        *out.stride(),
        n_heads, n_q, value_dim, n_splits,
        HAS_SINKS=sinks is not None, BLOCK_M=BLOCK_M, BLOCK_DV=block_dv,
    )
    return out


attention.capabilities = {
    "window", "sinks", "value_dim", "gqa", "decode", "blind", "non_causal", "scale", "float16"
}
attention.blocks = (BLOCK_N, BLOCK_M)
attention.switches = (SPLIT_BELOW, SPLIT_FROM)
