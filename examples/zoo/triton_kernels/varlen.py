"""A packed-sequence (varlen) attention forward in Triton, in the style of FlashAttention's varlen API.

The batch is unpadded into one stream of tokens, (total, H, d), and the sequences in it are described by
``cu_seqlens``, the cumulative lengths a packing collator returns: sequence i is tokens
``cu_seqlens[i]:cu_seqlens[i + 1]`` of the stream.  ``seqlens_from_documents`` builds them from the
document ids of each row (a document starts at the token after an id changes); the queries of a row
are its last Tq tokens, so each document contributes the queries that fall in it, bottom-right aligned
within the document (a decode step's queries are the last tokens of their document).

``_varlen_kernel`` runs one program per (query block, query head, sequence): it reads the sequence's
bounds from ``cu_seqlens_q`` / ``cu_seqlens_k``, returns at once when its query block lies past the
sequence's end, and walks the sequence's key blocks with an online softmax in base 2 (the softmax scale
and log2(e) folded into one float32 constant), causally within the document unless ``causal=False``,
with an optional sliding window and one sink logit per query head joining the sum at the end.  GQA:
query head h reads KV head h // (Hq / Hkv).  fp16 inputs are scored by ``tl.dot`` with a float32
accumulator and P stays in float32 for P·V, so the output is rounded once.  Head sizes are padded to a
power of two (at least 16) and masked.

It declares "documents": the kit hands it ``document_ids`` (B, Tk) on every call.  The bounds come
from the data (Python ints, as a varlen launcher reads them), so it cannot run on the meta device.

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


@triton.jit
def _varlen_kernel(
    Q, K, V, Sinks, Out, cu_seqlens_q, cu_seqlens_k,
    stride_qt, stride_qh, stride_qd,
    stride_kt, stride_kh, stride_kd,
    stride_vt, stride_vh, stride_vd,
    stride_ot, stride_oh, stride_od,
    head_dim, value_dim, group, qk_scale, window,
    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SINKS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_h = tl.program_id(1)
    seq = tl.program_id(2)
    off_kvh = off_h // group

    q_start = tl.load(cu_seqlens_q + seq)
    seqlen_q = tl.load(cu_seqlens_q + seq + 1) - q_start
    k_start = tl.load(cu_seqlens_k + seq)
    seqlen_k = tl.load(cu_seqlens_k + seq + 1) - k_start
    if start_m * BLOCK_M >= seqlen_q:
        return

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    pos_m = offs_m + (seqlen_k - seqlen_q)  # bottom-right within the sequence

    q_ptrs = Q + (q_start + offs_m[:, None]) * stride_qt + off_h * stride_qh + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < seqlen_q) & (offs_d[None, :] < head_dim), other=0.0)
    k_base = K + k_start * stride_kt + off_kvh * stride_kh
    v_base = V + k_start * stride_vt + off_kvh * stride_vh

    lo = 0
    hi = seqlen_k
    if IS_CAUSAL:
        hi = tl.minimum(seqlen_k, tl.minimum(start_m * BLOCK_M + BLOCK_M, seqlen_q) + seqlen_k - seqlen_q)
        if HAS_WINDOW:
            first_pos = start_m * BLOCK_M + seqlen_k - seqlen_q
            lo = tl.maximum(0, (first_pos - window + 1) // BLOCK_N * BLOCK_N)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(
            k_base + cols[None, :] * stride_kt + offs_d[:, None] * stride_kd,
            mask=(cols[None, :] < seqlen_k) & (offs_d[:, None] < head_dim),
            other=0.0,
        )
        qk = tl.dot(q, k, input_precision="ieee") * qk_scale
        keep = cols[None, :] < seqlen_k
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
            mask=(cols[:, None] < seqlen_k) & (offs_dv[None, :] < value_dim),
            other=0.0,
        )
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        m_i = m_new

    if HAS_SINKS:
        m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
        sink = tl.load(Sinks + off_h) * 1.4426950408889634  # a natural-log logit, to base 2
        l_i += tl.exp2(sink - m_safe)
    denom = tl.where(l_i > 0.0, l_i, 1.0)
    out = tl.where(l_i[:, None] > 0.0, acc / denom[:, None], 0.0)
    o_ptrs = Out + (q_start + offs_m[:, None]) * stride_ot + off_h * stride_oh + offs_dv[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=(offs_m[:, None] < seqlen_q) & (offs_dv[None, :] < value_dim))


def seqlens_from_documents(document_ids: torch.Tensor, n_q: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """document_ids (B, Tk) -> (cu_seqlens_q, cu_seqlens_k, max_seqlen_q): every row's documents, row after
    row, as sequences of the packed key stream (B * Tk tokens) and of the packed query stream (the last
    ``n_q`` tokens of each row, B * n_q tokens)."""
    n_k = document_ids.shape[1]
    lengths_q, lengths_k = [], []
    for ids in document_ids:
        starts = torch.nonzero(ids[1:] != ids[:-1]).flatten() + 1  # the token after a document's last
        starts = torch.cat([starts.new_zeros(1), starts])
        ends = torch.cat([starts[1:], starts.new_tensor([n_k])])
        lengths_k.append(ends - starts)
        lengths_q.append((ends - starts.clamp(min=n_k - n_q)).clamp(min=0))
    lengths_q, lengths_k = torch.cat(lengths_q), torch.cat(lengths_k)
    cu_seqlens_q = torch.nn.functional.pad(lengths_q.cumsum(0), (1, 0)).to(torch.int32)
    cu_seqlens_k = torch.nn.functional.pad(lengths_k.cumsum(0), (1, 0)).to(torch.int32)
    return cu_seqlens_q, cu_seqlens_k, int(lengths_q.max())


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, *, softmax_scale=None, causal=True,
                     window=None, sinks=None):
    """q (total_q, Hq, d), k (total_k, Hkv, d), v (total_k, Hkv, dv), packed -> (total_q, Hq, dv)."""
    n_heads, head_dim = q.shape[1], q.shape[2]
    value_dim = v.shape[-1]
    sm_scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    out = torch.empty(q.shape[0], n_heads, value_dim, dtype=q.dtype, device=q.device)
    sink_logits = out if sinks is None else sinks.to(device=q.device, dtype=torch.float32).contiguous()
    n_seqs = cu_seqlens_q.shape[0] - 1
    grid = (triton.cdiv(max_seqlen_q, BLOCK_M), n_heads, n_seqs)
    _varlen_kernel[grid](
        q, k, v, sink_logits, out, cu_seqlens_q, cu_seqlens_k,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        head_dim, value_dim, n_heads // k.shape[1], sm_scale * LOG2E, window or 0,
        IS_CAUSAL=causal, HAS_WINDOW=causal and window is not None, HAS_SINKS=sinks is not None,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_DV=max(16, triton.next_power_of_2(value_dim)),
    )
    return out


def attention(
    q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False, document_ids=None
):
    """q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv), document_ids (B, Tk) -> (B, Hq, Tq, dv)."""
    if return_weights:
        raise NotImplementedError("the kernel does not materialise the attention weights")
    if window is not None:
        if not isinstance(window, int) or isinstance(window, bool):
            raise TypeError(f"window must be an int, got {type(window).__name__}")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
    batch, n_heads, n_q, _ = q.shape
    n_kv, n_k = k.shape[1], k.shape[2]
    if n_heads % n_kv:
        raise ValueError(f"{n_heads} query heads cannot share {n_kv} KV heads")
    if n_q > n_k:
        raise ValueError(f"{n_q} queries over {n_k} keys: the queries are the last tokens of the keys' rows")
    if document_ids is None:
        document_ids = torch.zeros(batch, n_k, dtype=torch.int64, device=q.device)
    cu_seqlens_q, cu_seqlens_k, max_seqlen_q = seqlens_from_documents(document_ids, n_q)
    out = varlen_attention(
        q.transpose(1, 2).reshape(batch * n_q, n_heads, -1),
        k.transpose(1, 2).reshape(batch * n_k, n_kv, -1),
        v.transpose(1, 2).reshape(batch * n_k, n_kv, -1),
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        softmax_scale=scale,
        causal=causal,
        window=window,
        sinks=sinks,
    )
    return out.reshape(batch, n_q, n_heads, -1).transpose(1, 2)


attention.capabilities = {
    "documents", "window", "sinks", "non_causal", "gqa", "decode", "value_dim", "scale", "float16"
}
attention.blocks = (BLOCK_N, BLOCK_M)
