"""Variable-length (packed) attention forward in Triton: the sequences of a batch are concatenated
along the tokens, cu_seqlens_q / cu_seqlens_k hold their cumulative lengths, and each program takes
one query block of one sequence and one head.  Queries are aligned to the end of their keys (a
chunk of new queries over a longer cache), so the causal bound is shifted by Tk - Tq."""

import torch
import triton
import triton.language as tl

RCP_LN2 = 1.4426950408889634


@triton.jit
def _varlen_fwd(
    Q, K, V, Out, cu_seqlens_q, cu_seqlens_k,
    softmax_scale,
    stride_qt, stride_qh,
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_ot, stride_oh,
    nheads, nheads_k,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_hb = tl.program_id(1)
    off_b = off_hb // nheads  # expect: F4
    off_h = off_hb % nheads  # expect: F4
    off_h_k = off_h // (nheads // nheads_k)  # expect: F15

    q_start = tl.load(cu_seqlens_q + off_b)
    q_len = tl.load(cu_seqlens_q + off_b + 1) - q_start
    k_start = tl.load(cu_seqlens_k + off_b)  # expect: F24
    k_len = tl.load(cu_seqlens_k + off_b + 1) - k_start  # expect: F24
    if start_m * BLOCK_M >= q_len:
        return

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + (q_start + offs_m[:, None]) * stride_qt + off_h * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < q_len, other=0.0)

    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")  # expect: F28
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = softmax_scale * RCP_LN2  # expect: F3 F30

    shift = k_len - q_len
    if CAUSAL:  # expect: F25
        end_n = tl.minimum((start_m + 1) * BLOCK_M + shift, k_len)  # expect: F32
    else:
        end_n = k_len  # expect: F32
    n_blocks = tl.cdiv(end_n, BLOCK_N)  # expect: F32
    for block in range(0, n_blocks):  # expect: F32
        start_n = block * BLOCK_N
        offs_k = start_n + offs_n
        k_ptrs = K + (k_start + offs_k[None, :]) * stride_kt + off_h_k * stride_kh + offs_d[:, None]
        k = tl.load(k_ptrs, mask=offs_k[None, :] < k_len, other=0.0)
        qk = tl.dot(q, k) * qk_scale  # expect: F3
        qk = tl.where(offs_k[None, :] < k_len, qk, float("-inf"))  # expect: F1
        if CAUSAL:  # expect: F25
            qk = tl.where(offs_m[:, None] + shift >= offs_k[None, :], qk, float("-inf"))  # expect: F1 F2
        m_ij = tl.maximum(m_i, tl.max(qk, 1))  # expect: F14
        p = tl.exp2(qk - m_ij[:, None])  # expect: F30
        alpha = tl.exp2(m_i - m_ij)  # expect: F29 F30
        acc = acc * alpha[:, None]  # expect: F29
        v_ptrs = V + (k_start + offs_k[:, None]) * stride_vt + off_h_k * stride_vh + offs_d[None, :]
        v = tl.load(v_ptrs, mask=offs_k[:, None] < k_len, other=0.0)
        acc += tl.dot(p.to(v.dtype), v)
        l_i = l_i * alpha + tl.sum(p, 1)  # expect: F14 F29
        m_i = m_ij

    acc = acc / l_i[:, None]
    o_ptrs = Out + (q_start + offs_m[:, None]) * stride_ot + off_h * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < q_len)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal=True, softmax_scale=None):
    # q: (total_q, H, D); k, v: (total_k, H_KV, D); cu_seqlens_*: (batch + 1,) int32
    _, nheads, head_dim = q.shape
    nheads_k = k.shape[1]
    batch = cu_seqlens_q.numel() - 1
    if softmax_scale is None:
        softmax_scale = head_dim ** -0.5  # expect: F3
    out = torch.empty_like(q)
    BLOCK_M = 64
    grid = (triton.cdiv(max_seqlen_q, BLOCK_M), batch * nheads)  # expect: F32
    _varlen_fwd[grid](  # expect: F3 F19 F25
        q, k, v, out, cu_seqlens_q, cu_seqlens_k,
        softmax_scale,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        nheads, nheads_k,
        CAUSAL=causal, HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=32,
    )
    return out
