"""Attention backward in Triton, FlashAttention-2 style: a pre-pass computes delta = rowsum(dO * O),
one kernel walks the query blocks for each key block (dK, dV), another walks the key blocks for each
query block (dQ); P is recomputed from the log-sum-exp the forward saved (in base 2)."""

import torch
import triton
import triton.language as tl

LN2 = 0.6931471824645996
LOG2E = 1.4426950408889634


@triton.jit
def _bwd_delta(Out, DO, Delta, seq_len, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    off_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_hz = tl.program_id(1)
    offs_d = tl.arange(0, HEAD_DIM)
    row = off_hz * seq_len * HEAD_DIM + off_m[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(Out + row, mask=off_m[:, None] < seq_len, other=0.0)
    do = tl.load(DO + row, mask=off_m[:, None] < seq_len, other=0.0).to(tl.float32)
    delta = tl.sum(o * do, axis=1)
    tl.store(Delta + off_hz * seq_len + off_m, delta, mask=off_m < seq_len)


@triton.jit
def _bwd_dkdv(
    Q, K, V, DO, DK, DV, LSE, Delta, sm_scale,
    stride_z, stride_h, stride_t,
    H, seq_len,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    start_n = tl.program_id(0) * BLOCK_N
    bhid = tl.program_id(1)
    off_z = bhid // H  # expect: F4
    off_h = bhid % H  # expect: F4
    base = off_z * stride_z + off_h * stride_h
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_mask = offs_n[:, None] < seq_len
    k = tl.load(K + base + offs_n[:, None] * stride_t + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + base + offs_n[:, None] * stride_t + offs_d[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E  # expect: F3 F30

    # queries before this key block never see it
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0  # expect: F25 F32
    for start_m in range(lo, seq_len, BLOCK_M):  # expect: F32
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q_mask = offs_m[:, None] < seq_len
        q = tl.load(Q + base + offs_m[:, None] * stride_t + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + base + offs_m[:, None] * stride_t + offs_d[None, :], mask=q_mask, other=0.0)
        lse = tl.load(LSE + bhid * seq_len + offs_m, mask=offs_m < seq_len, other=0.0)
        delta = tl.load(Delta + bhid * seq_len + offs_m, mask=offs_m < seq_len, other=0.0)
        qkT = tl.dot(k, tl.trans(q)) * qk_scale  # expect: F3
        pT = tl.math.exp2(qkT - lse[None, :])  # expect: F30
        if CAUSAL:  # expect: F25
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)  # expect: F1 F2
        pT = tl.where(offs_m[None, :] < seq_len, pT, 0.0)  # expect: F1
        dv += tl.dot(pT.to(do.dtype), do)
        dpT = tl.dot(v, tl.trans(do)).to(tl.float32)
        dsT = pT * (dpT - delta[None, :])
        dk += tl.dot(dsT.to(q.dtype), q)
    dk = dk * sm_scale  # expect: F3
    tl.store(DK + base + offs_n[:, None] * stride_t + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + base + offs_n[:, None] * stride_t + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _bwd_dq(
    Q, K, V, DO, DQ, LSE, Delta, sm_scale,
    stride_z, stride_h, stride_t,
    H, seq_len,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    bhid = tl.program_id(1)
    off_z = bhid // H  # expect: F4
    off_h = bhid % H  # expect: F4
    base = off_z * stride_z + off_h * stride_h
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_mask = offs_m[:, None] < seq_len
    q = tl.load(Q + base + offs_m[:, None] * stride_t + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + base + offs_m[:, None] * stride_t + offs_d[None, :], mask=q_mask, other=0.0)
    lse = tl.load(LSE + bhid * seq_len + offs_m, mask=offs_m < seq_len, other=0.0)
    delta = tl.load(Delta + bhid * seq_len + offs_m, mask=offs_m < seq_len, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E  # expect: F3 F30

    hi = tl.minimum(start_m + BLOCK_M, seq_len) if CAUSAL else seq_len  # expect: F25 F32
    num_blocks = (hi + BLOCK_N - 1) // BLOCK_N  # expect: F32
    for block in range(num_blocks):  # expect: F32
        offs_n = block * BLOCK_N + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < seq_len
        k = tl.load(K + base + offs_n[:, None] * stride_t + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + base + offs_n[:, None] * stride_t + offs_d[None, :], mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * qk_scale  # expect: F3
        p = tl.math.exp2(qk - lse[:, None])  # expect: F30
        if CAUSAL:  # expect: F25
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)  # expect: F1 F2
        p = tl.where(offs_n[None, :] < seq_len, p, 0.0)  # expect: F1
        dp = tl.dot(do, tl.trans(v)).to(tl.float32)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    dq = dq * sm_scale  # expect: F3
    tl.store(DQ + base + offs_m[:, None] * stride_t + offs_d[None, :], dq.to(DQ.dtype.element_ty), mask=q_mask)


def attention_backward(q, k, v, o, do, lse, sm_scale, causal=True):
    # q, k, v, o, do: (Z, H, N, D) contiguous; lse: (Z, H, N) in base 2, as the forward saved it
    Z, H, N, D = q.shape
    delta = torch.empty_like(lse)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    BLOCK_M, BLOCK_N = 64, 64
    _bwd_delta[(triton.cdiv(N, BLOCK_M), Z * H)](o, do, delta, N, HEAD_DIM=D, BLOCK_M=BLOCK_M)  # expect: F32
    strides = (q.stride(0), q.stride(1), q.stride(2))
    _bwd_dkdv[(triton.cdiv(N, BLOCK_N), Z * H)](  # expect: F3 F19 F25 F32
        q, k, v, do, dk, dv, lse, delta, sm_scale, *strides, H, N,
        HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=causal,
    )
    _bwd_dq[(triton.cdiv(N, BLOCK_M), Z * H)](  # expect: F3 F19 F25 F32
        q, k, v, do, dq, lse, delta, sm_scale, *strides, H, N,
        HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=causal,
    )
    return dq, dk, dv
