"""A Triton attention kernel with a hand-written backward, in the FlashAttention-2 manner.

Forward: one program per (query block, batch·query head) runs the online softmax over the key blocks
its queries may see, stores the output and the row's log-sum-exp ``lse`` (natural log, in the working
dtype), and never materialises the weights.

Backward, three kernels, none of which sees the weights either:

* ``_bwd_delta``: one program per (query block, batch·query head), ``delta_i = dO_i . O_i`` (the row's
  ``sum_j P_ij dP_ij``, from the output the forward stored);
* ``_bwd_dkdv``: one program per (key block, batch·KV head), looping over the query heads of its GQA
  group and, for each, over the query blocks that may see its keys: ``P = exp(S - lse)`` recomputed from
  q, k and the saved lse, ``dV += P^T dO``, ``dS = P * (dO V^T - delta)``, ``dK += dS^T Q``; so a KV
  head's gradients are summed over its group in registers, without atomics;
* ``_bwd_dq``: one program per (query block, batch·query head), looping over the key blocks its queries
  may see: ``dQ += dS K``.

The sinks' gradient, ``-sum_i exp(sink - lse_i) delta_i`` over each head's rows, is a small reduction of
two (B·Hq, Tq) tensors and is done by PyTorch.

Conventions: causal masks bottom-right aligned (query i at position Tk-Tq+i; with Tq > Tk the first
queries see nothing, output 0 and get dQ = 0), a sliding window (position p sees p-W < j <= p), sinks
(one logit per query head, an extra softmax column), GQA (query head h reads KV head h // (Hq/Hkv)),
``causal=False``, values of another head size, an explicit scale.  Inputs are read through their
strides.  float32 and float16 are scored, normalised and differentiated in float32 (the weights stay
float32 up to the ``P @ V`` product; results rounded once to the input dtype); float64 in float64
throughout: the softmax scale is read from a one-element tensor of the working dtype, since a Python
float argument reaches a compiled kernel as float32.  Blocks of 16 queries and 16 keys; head sizes are
padded to a power of two, at least 16 (``tl.dot``'s smallest tile), and masked.

A target of the zoo.  Run on a GPU it is compiled; ``attnspec check`` on a CPU runs it through Triton's
interpreter, where gradcheck (GRAD-1), a few hundred calls an example, takes most of the check's time.
Its broken twins (twins.py) break the backward alone: delta not subtracted, dK without the scale, a GQA
group's gradients not summed, the sink left out of the saved lse's max, dQ's P recomputed unmasked.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

BLOCK_M = 16  # queries per block
BLOCK_N = 16  # keys per block


@triton.jit
def _attn_fwd(
    Q, K, V, Sinks, Scale, Out, Lse,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    n_heads, n_q, n_k, head_dim, value_dim, offset, window,
    GROUP: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SINKS: tl.constexpr,
    ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    off_bh = tl.program_id(1)
    off_b = (off_bh // n_heads).to(tl.int64)
    off_h = (off_bh % n_heads).to(tl.int64)
    sm_scale = tl.load(Scale)

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    pos = offs_m + offset  # the queries' positions among the keys
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :] * stride_qd,
                mask=(offs_m[:, None] < n_q) & (offs_d[None, :] < head_dim), other=0.0).to(ACC)

    # the keys this block of queries may see: [lo, hi), lo on the key-block grid
    lo = 0
    hi = n_k
    if CAUSAL:
        hi = tl.minimum(n_k, start_m + BLOCK_M + offset)
        if HAS_WINDOW:
            lo = tl.maximum(0, start_m + offset - window + 1) // BLOCK_N * BLOCK_N
    offs_n = lo + tl.arange(0, BLOCK_N)
    k_ptrs = K + off_b * stride_kb + (off_h // GROUP) * stride_kh + offs_n[:, None] * stride_kt + offs_d[None, :] * stride_kd
    v_ptrs = V + off_b * stride_vb + (off_h // GROUP) * stride_vh + offs_n[:, None] * stride_vt + offs_dv[None, :] * stride_vd

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=ACC)
    l_i = tl.zeros([BLOCK_M], dtype=ACC)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=ACC)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptrs, mask=(offs_n[:, None] < n_k) & (offs_d[None, :] < head_dim), other=0.0).to(ACC)
        v = tl.load(v_ptrs, mask=(offs_n[:, None] < n_k) & (offs_dv[None, :] < value_dim), other=0.0).to(ACC)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale
        visible = offs_n[None, :] < n_k
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= pos[:, None])
            if HAS_WINDOW:
                visible = visible & (offs_n[None, :] > pos[:, None] - window)
        qk = tl.where(visible, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing yet
        p = tl.exp(qk - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
        k_ptrs += BLOCK_N * stride_kt
        v_ptrs += BLOCK_N * stride_vt

    if HAS_SINKS:  # one more column, of logit `sink` and value 0
        sink = tl.load(Sinks + off_h).to(ACC)
        m_new = tl.maximum(m_i, sink)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.exp(sink - m_safe)
        acc = acc * alpha[:, None]
        m_i = m_new

    seen = l_i > 0
    l_safe = tl.where(seen, l_i, 1.0)
    out = tl.where(seen[:, None], acc / l_safe[:, None], 0.0)
    lse = tl.where(seen, m_i + tl.log(l_safe), float("-inf"))
    o_ptrs = Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_ot + offs_dv[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=(offs_m[:, None] < n_q) & (offs_dv[None, :] < value_dim))
    tl.store(Lse + off_bh * n_q + offs_m, lse, mask=offs_m < n_q)


@triton.jit
def _bwd_delta(
    Out, dOut, Delta,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_gb, stride_gh, stride_gt, stride_gd,
    n_heads, n_q, value_dim,
    ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    off_bh = tl.program_id(1)
    off_b = (off_bh // n_heads).to(tl.int64)
    off_h = (off_bh % n_heads).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask = (offs_m[:, None] < n_q) & (offs_dv[None, :] < value_dim)
    o = tl.load(Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_ot + offs_dv[None, :] * stride_od,
                mask=mask, other=0.0).to(ACC)
    do = tl.load(dOut + off_b * stride_gb + off_h * stride_gh + offs_m[:, None] * stride_gt + offs_dv[None, :] * stride_gd,
                 mask=mask, other=0.0).to(ACC)
    delta = tl.sum(o * do, 1)
    tl.store(Delta + off_bh * n_q + offs_m, delta, mask=offs_m < n_q)


@triton.jit
def _bwd_dkdv(
    Q, K, V, Scale, dOut, Lse, Delta, dK, dV,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_gb, stride_gh, stride_gt, stride_gd,
    stride_dkb, stride_dkh, stride_dkt, stride_dkd,
    stride_dvb, stride_dvh, stride_dvt, stride_dvd,
    n_heads, n_kv_heads, n_q, n_k, head_dim, value_dim, offset, window,
    GROUP: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
    ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    start_n = tl.program_id(0) * BLOCK_N
    off_bkv = tl.program_id(1)
    off_b = (off_bkv // n_kv_heads).to(tl.int64)
    off_hkv = (off_bkv % n_kv_heads).to(tl.int64)
    sm_scale = tl.load(Scale)

    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_mask = (offs_n[:, None] < n_k) & (offs_d[None, :] < head_dim)
    v_mask = (offs_n[:, None] < n_k) & (offs_dv[None, :] < value_dim)
    k = tl.load(K + off_b * stride_kb + off_hkv * stride_kh + offs_n[:, None] * stride_kt + offs_d[None, :] * stride_kd,
                mask=k_mask, other=0.0).to(ACC)
    v = tl.load(V + off_b * stride_vb + off_hkv * stride_vh + offs_n[:, None] * stride_vt + offs_dv[None, :] * stride_vd,
                mask=v_mask, other=0.0).to(ACC)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=ACC)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=ACC)

    # the queries that may see a key of this block: [lo, hi), lo on the query-block grid
    lo = 0
    hi = n_q
    if CAUSAL:
        lo = tl.maximum(0, start_n - offset) // BLOCK_M * BLOCK_M
        if HAS_WINDOW:
            hi = tl.minimum(n_q, start_n + BLOCK_N + window - 1 - offset)
    for g in range(GROUP):  # the query heads that read this KV head
        off_h = off_hkv * GROUP + g
        offs_m = lo + tl.arange(0, BLOCK_M)
        q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :] * stride_qd
        do_ptrs = dOut + off_b * stride_gb + off_h * stride_gh + offs_m[:, None] * stride_gt + offs_dv[None, :] * stride_gd
        lse_ptrs = Lse + (off_b * n_heads + off_h) * n_q + offs_m
        delta_ptrs = Delta + (off_b * n_heads + off_h) * n_q + offs_m
        for start_m in range(lo, hi, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            q = tl.load(q_ptrs, mask=(offs_m[:, None] < n_q) & (offs_d[None, :] < head_dim), other=0.0).to(ACC)
            do = tl.load(do_ptrs, mask=(offs_m[:, None] < n_q) & (offs_dv[None, :] < value_dim), other=0.0).to(ACC)
            lse = tl.load(lse_ptrs, mask=offs_m < n_q, other=0.0)
            delta = tl.load(delta_ptrs, mask=offs_m < n_q, other=0.0)
            # keys along rows, queries along columns: P^T and dS^T of this tile
            qkT = tl.dot(k, tl.trans(q), input_precision="ieee") * sm_scale
            pos = offs_m + offset
            visible = offs_m[None, :] < n_q
            if CAUSAL:
                visible = visible & (offs_n[:, None] <= pos[None, :])
                if HAS_WINDOW:
                    visible = visible & (offs_n[:, None] > pos[None, :] - window)
            lse = tl.where(lse == float("-inf"), 0.0, lse)  # a row that sees nothing: masked whole
            pT = tl.where(visible, tl.exp(qkT - lse[None, :]), 0.0)
            dv += tl.dot(pT, do, input_precision="ieee")
            dpT = tl.dot(v, tl.trans(do), input_precision="ieee")
            dsT = pT * (dpT - delta[None, :])
            dk += tl.dot(dsT, q, input_precision="ieee")
            q_ptrs += BLOCK_M * stride_qt
            do_ptrs += BLOCK_M * stride_gt
            lse_ptrs += BLOCK_M
            delta_ptrs += BLOCK_M

    dk = dk * sm_scale
    tl.store(dK + off_b * stride_dkb + off_hkv * stride_dkh + offs_n[:, None] * stride_dkt + offs_d[None, :] * stride_dkd,
             dk.to(dK.dtype.element_ty), mask=k_mask)
    tl.store(dV + off_b * stride_dvb + off_hkv * stride_dvh + offs_n[:, None] * stride_dvt + offs_dv[None, :] * stride_dvd,
             dv.to(dV.dtype.element_ty), mask=v_mask)


@triton.jit
def _bwd_dq(
    Q, K, V, Scale, dOut, Lse, Delta, dQ,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kt, stride_kd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_gb, stride_gh, stride_gt, stride_gd,
    stride_dqb, stride_dqh, stride_dqt, stride_dqd,
    n_heads, n_q, n_k, head_dim, value_dim, offset, window,
    GROUP: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
    ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    off_bh = tl.program_id(1)
    off_b = (off_bh // n_heads).to(tl.int64)
    off_h = (off_bh % n_heads).to(tl.int64)
    sm_scale = tl.load(Scale)

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    pos = offs_m + offset
    q_mask = (offs_m[:, None] < n_q) & (offs_d[None, :] < head_dim)
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :] * stride_qd,
                mask=q_mask, other=0.0).to(ACC)
    do = tl.load(dOut + off_b * stride_gb + off_h * stride_gh + offs_m[:, None] * stride_gt + offs_dv[None, :] * stride_gd,
                 mask=(offs_m[:, None] < n_q) & (offs_dv[None, :] < value_dim), other=0.0).to(ACC)
    lse = tl.load(Lse + off_bh * n_q + offs_m, mask=offs_m < n_q, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse)  # a row that sees nothing: masked whole
    delta = tl.load(Delta + off_bh * n_q + offs_m, mask=offs_m < n_q, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=ACC)

    # the keys this block of queries may see, as in the forward
    lo = 0
    hi = n_k
    if CAUSAL:
        hi = tl.minimum(n_k, start_m + BLOCK_M + offset)
        if HAS_WINDOW:
            lo = tl.maximum(0, start_m + offset - window + 1) // BLOCK_N * BLOCK_N
    offs_n = lo + tl.arange(0, BLOCK_N)
    k_ptrs = K + off_b * stride_kb + (off_h // GROUP) * stride_kh + offs_n[:, None] * stride_kt + offs_d[None, :] * stride_kd
    v_ptrs = V + off_b * stride_vb + (off_h // GROUP) * stride_vh + offs_n[:, None] * stride_vt + offs_dv[None, :] * stride_vd
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptrs, mask=(offs_n[:, None] < n_k) & (offs_d[None, :] < head_dim), other=0.0).to(ACC)
        v = tl.load(v_ptrs, mask=(offs_n[:, None] < n_k) & (offs_dv[None, :] < value_dim), other=0.0).to(ACC)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale
        visible = offs_n[None, :] < n_k
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= pos[:, None])
            if HAS_WINDOW:
                visible = visible & (offs_n[None, :] > pos[:, None] - window)
        p = tl.where(visible, tl.exp(qk - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds, k, input_precision="ieee")
        k_ptrs += BLOCK_N * stride_kt
        v_ptrs += BLOCK_N * stride_vt

    dq *= sm_scale
    tl.store(dQ + off_b * stride_dqb + off_h * stride_dqh + offs_m[:, None] * stride_dqt + offs_d[None, :] * stride_dqd,
             dq.to(dQ.dtype.element_ty), mask=q_mask)


_ACC = {torch.float64: tl.float64}


def _geometry(q, k, v):
    batch, n_heads, n_q, head_dim = q.shape
    n_kv_heads, n_k, value_dim = k.shape[1], k.shape[2], v.shape[-1]
    return dict(
        block_d=max(16, triton.next_power_of_2(head_dim)),
        block_dv=max(16, triton.next_power_of_2(value_dim)),
        batch=batch, n_heads=n_heads, n_kv_heads=n_kv_heads, n_q=n_q, n_k=n_k,
        head_dim=head_dim, value_dim=value_dim,
    )


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, scale, causal, window):
        g = _geometry(q, k, v)
        work = torch.float64 if q.dtype == torch.float64 else torch.float32
        acc = _ACC.get(q.dtype, tl.float32)
        scale_t = torch.full((1,), scale, dtype=work, device=q.device)
        sinks_w = None if sinks is None else sinks.detach().to(work).contiguous()
        out = torch.empty(g["batch"], g["n_heads"], g["n_q"], g["value_dim"], dtype=q.dtype, device=q.device)
        lse = torch.empty(g["batch"] * g["n_heads"], g["n_q"], dtype=work, device=q.device)
        offset = g["n_k"] - g["n_q"]
        group = g["n_heads"] // g["n_kv_heads"]
        grid = (triton.cdiv(g["n_q"], BLOCK_M), g["batch"] * g["n_heads"])
        _attn_fwd[grid](
            q, k, v, sinks_w if sinks_w is not None else scale_t, scale_t, out, lse,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(),
            g["n_heads"], g["n_q"], g["n_k"], g["head_dim"], g["value_dim"], offset, window or 0,
            GROUP=group, CAUSAL=causal, HAS_WINDOW=window is not None, HAS_SINKS=sinks is not None,
            ACC=acc, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=g["block_d"], BLOCK_DV=g["block_dv"],
        )
        ctx.save_for_backward(q, k, v, sinks_w, scale_t, out, lse)
        ctx.meta = (causal, window, None if sinks is None else sinks.dtype)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, sinks_w, scale_t, out, lse = ctx.saved_tensors
        causal, window, sink_dtype = ctx.meta
        g = _geometry(q, k, v)
        acc = _ACC.get(q.dtype, tl.float32)
        offset = g["n_k"] - g["n_q"]
        group = g["n_heads"] // g["n_kv_heads"]
        m_blocks = triton.cdiv(g["n_q"], BLOCK_M)

        delta = torch.empty_like(lse)
        _bwd_delta[(m_blocks, g["batch"] * g["n_heads"])](
            out, d_out, delta, *out.stride(), *d_out.stride(),
            g["n_heads"], g["n_q"], g["value_dim"],
            ACC=acc, BLOCK_M=BLOCK_M, BLOCK_DV=g["block_dv"],
        )

        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        meta = dict(
            GROUP=group, CAUSAL=causal, HAS_WINDOW=window is not None, ACC=acc,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=g["block_d"], BLOCK_DV=g["block_dv"],
        )
        _bwd_dkdv[(triton.cdiv(g["n_k"], BLOCK_N), g["batch"] * g["n_kv_heads"])](
            q, k, v, scale_t, d_out, lse, delta, dk, dv,
            *q.stride(), *k.stride(), *v.stride(), *d_out.stride(), *dk.stride(), *dv.stride(),
            g["n_heads"], g["n_kv_heads"], g["n_q"], g["n_k"], g["head_dim"], g["value_dim"], offset, window or 0,
            **meta,
        )
        _bwd_dq[(m_blocks, g["batch"] * g["n_heads"])](
            q, k, v, scale_t, d_out, lse, delta, dq,
            *q.stride(), *k.stride(), *v.stride(), *d_out.stride(), *dq.stride(),
            g["n_heads"], g["n_q"], g["n_k"], g["head_dim"], g["value_dim"], offset, window or 0,
            **meta,
        )

        d_sinks = None
        if sinks_w is not None:  # d sink_h = -sum over the head's rows of P_sink * delta
            rows = lse.view(g["batch"], g["n_heads"], g["n_q"])
            p_sink = torch.exp(sinks_w.view(1, -1, 1) - rows).nan_to_num(nan=0.0)  # no row sees -inf - -inf
            d_sinks = -(p_sink * delta.view_as(rows)).sum(dim=(0, 2)).to(sink_dtype)
        return dq, dk, dv, d_sinks, None, None, None


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> (B, Hq, Tq, dv)."""
    if return_weights:
        raise ValueError("this kernel never materialises the weights")
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int):
            raise TypeError(f"window must be an int, not {type(window).__name__}")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        if not causal:
            window = None
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads cannot share {k.shape[1]} KV heads")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _FlashAttention.apply(q, k, v, sinks, scale, causal, window)


attention.capabilities = {
    "window", "sinks", "value_dim", "gqa", "decode", "blind", "non_causal", "scale", "float64", "float16", "grad",
}
attention.blocks = (BLOCK_N, BLOCK_M)
