"""Fused attention forward as a Triton kernel: one program per (query block, batch x head), an
online softmax in base 2 over the key blocks, causal and sliding-window block skipping (the blocks a
diagonal or a window edge cuts through are masked, the others are read whole or skipped), grouped
KV heads and a learned sink logit per head."""

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _fwd_block_loop(
    acc, l_i, m_i, q,
    k_base, v_base, stride_kn, stride_vn,
    start_m, qk_scale, seq_len,
    offs_m, offs_n, offs_d,
    lo, hi,
    BLOCK_N: tl.constexpr,
    MASK_DIAGONAL: tl.constexpr,
    WINDOW: tl.constexpr,
):
    for start_n in range(lo, hi, BLOCK_N):  # expect: F32
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=cols[None, :] < seq_len, other=0.0)
        qk = tl.dot(q, k)
        # the last key block may run past the sequence: its padding gets no weight
        qk = tl.where(cols[None, :] < seq_len, qk, float("-inf"))  # expect: F1
        if MASK_DIAGONAL:  # expect: F25
            qk = tl.where(offs_m[:, None] >= cols[None, :], qk, float("-inf"))  # expect: F1 F2
        if WINDOW > 0:
            in_window = offs_m[:, None] - cols[None, :] < WINDOW  # expect: F2 F16
            qk = tl.where(in_window, qk, float("-inf"))  # expect: F1
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # expect: F3 F14
        # a row that has seen no key yet keeps m = -inf; subtract 0 instead so exp2 gives 0, not NaN
        m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.math.exp2(qk * qk_scale - m_safe[:, None])  # expect: F3 F30
        alpha = tl.math.exp2(m_i - m_safe)  # expect: F29 F30
        l_i = l_i * alpha + tl.sum(p, 1)  # expect: F14 F29
        acc = acc * alpha[:, None]  # expect: F29
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < seq_len, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(
    Q, K, V, Sinks, Out, sm_scale,
    stride_qz, stride_qh, stride_qm,
    stride_kz, stride_kh, stride_kn,
    stride_vz, stride_vh, stride_vn,
    stride_oz, stride_oh, stride_om,
    H, seq_len,
    GROUP_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    HAS_SINKS: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H  # expect: F4
    off_h = off_hz % H  # expect: F4
    off_kvh = off_h // GROUP_SIZE  # expect: F15
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_kvh * stride_kh
    v_base = V + off_z * stride_vz + off_kvh * stride_vh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # expect: F28
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E  # expect: F3 F30
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=offs_m[:, None] < seq_len, other=0.0)

    if IS_CAUSAL:  # expect: F25
        # whole blocks left of the diagonal unmasked, then the blocks the diagonal cuts through masked
        lo = 0
        if WINDOW > 0:
            lo = tl.maximum(0, start_m * BLOCK_M - WINDOW + 1) // BLOCK_N * BLOCK_N  # expect: F16
        mid = start_m * BLOCK_M  # expect: F32
        hi = tl.minimum((start_m + 1) * BLOCK_M, seq_len)  # expect: F32
    else:
        lo, mid, hi = 0, 0, seq_len  # expect: F32
    acc, l_i, m_i = _fwd_block_loop(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, start_m, qk_scale, seq_len,
        offs_m, offs_n, offs_d, lo, mid, BLOCK_N, False, WINDOW,
    )
    acc, l_i, m_i = _fwd_block_loop(  # expect: F19 F25
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, start_m, qk_scale, seq_len,
        offs_m, offs_n, offs_d, mid, hi, BLOCK_N, IS_CAUSAL, WINDOW,
    )

    if HAS_SINKS:
        # the sink takes probability mass in the denominator and brings no value
        sink = tl.load(Sinks + off_h).to(tl.float32)
        l_i = l_i + tl.math.exp2(sink * LOG2E - m_i)  # expect: F10 F30
    acc = acc / l_i[:, None]
    o_base = Out + off_z * stride_oz + off_h * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], acc.to(Out.type.element_ty), mask=offs_m[:, None] < seq_len)


def attention(q, k, v, causal=True, window=0, sinks=None, sm_scale=None):
    # q: (Z, H, N, D) contiguous in D; k, v: (Z, H_KV, N, D)
    Z, H, N, D = q.shape
    H_KV = k.shape[1]
    if H % H_KV != 0:
        raise ValueError(f"{H} query heads cannot share {H_KV} KV heads")
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)  # expect: F3
    o = torch.empty_like(q)
    BLOCK_M, BLOCK_N = 64, 32
    grid = (triton.cdiv(N, BLOCK_M), Z * H)  # expect: F32
    _attn_fwd[grid](  # expect: F3 F10 F19 F25
        q, k, v, sinks, o, sm_scale,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        H, N,
        GROUP_SIZE=H // H_KV,
        HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        IS_CAUSAL=causal,
        WINDOW=window,
        HAS_SINKS=sinks is not None,
    )
    return o
