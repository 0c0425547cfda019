"""Flash-decoding as Triton kernels: a few new query tokens over a long KV cache.  The cache's keys
are cut into NUM_SPLITS parts, one program per (batch, head, part) runs an online softmax over its
part and writes an unnormalised partial output with its running max and sum; a second kernel
combines the parts, each rescaled to the largest max."""

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_split_kernel(
    Q, K_cache, V_cache, Lengths, Mid_O, Mid_M, Mid_L,
    sm_scale,
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_kt,
    stride_vb, stride_vh, stride_vt,
    stride_mob, stride_moh, stride_mos,
    stride_mmb, stride_mmh,
    num_heads,
    KV_GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    split_id = tl.program_id(1)
    batch = pid_bh // num_heads  # expect: F4
    head = pid_bh % num_heads  # expect: F4
    kv_head = head // KV_GROUP  # expect: F15

    cache_len = tl.load(Lengths + batch)
    # every part covers a whole number of key blocks; the last part ends at the cache's length
    blocks_per_split = tl.cdiv(tl.cdiv(cache_len, BLOCK_N), NUM_SPLITS)  # expect: F32
    split_start = split_id * blocks_per_split * BLOCK_N
    split_end = tl.minimum(split_start + blocks_per_split * BLOCK_N, cache_len)

    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(Q + batch * stride_qb + head * stride_qh + offs_d).to(tl.float32)
    q = q * (sm_scale * 1.44269504)  # expect: F3 F30

    m_i = -float("inf")  # expect: F28
    l_i = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    k_base = K_cache + batch * stride_kb + kv_head * stride_kh
    v_base = V_cache + batch * stride_vb + kv_head * stride_vh
    for start_n in range(split_start, split_end, BLOCK_N):  # expect: F32
        cols = start_n + offs_n
        valid = cols < split_end
        k = tl.load(k_base + cols[:, None] * stride_kt + offs_d[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vt + offs_d[None, :], mask=valid[:, None], other=0.0)
        s = tl.sum(q[None, :] * k.to(tl.float32), 1)
        s = tl.where(valid, s, float("-inf"))  # expect: F1
        m_new = tl.maximum(m_i, tl.max(s, 0))
        correction = tl.exp2(m_i - m_new)  # expect: F29 F30
        p = tl.exp2(s - m_new)  # expect: F30
        l_i = l_i * correction + tl.sum(p, 0)  # expect: F29
        acc = acc * correction + tl.sum(p[:, None] * v.to(tl.float32), 0)  # expect: F29
        m_i = m_new

    out_off = batch * stride_mob + head * stride_moh + split_id * stride_mos
    tl.store(Mid_O + out_off + offs_d, acc)
    tl.store(Mid_M + batch * stride_mmb + head * stride_mmh + split_id, m_i)
    tl.store(Mid_L + batch * stride_mmb + head * stride_mmh + split_id, l_i)


@triton.jit
def _decode_combine_kernel(
    Mid_O, Mid_M, Mid_L, Out,
    stride_mob, stride_moh, stride_mos,
    stride_mmb, stride_mmh,
    stride_ob, stride_oh,
    num_heads,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    batch = pid_bh // num_heads  # expect: F4
    head = pid_bh % num_heads  # expect: F4
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, HEAD_DIM)

    m_split = tl.load(Mid_M + batch * stride_mmb + head * stride_mmh + offs_s)
    l_split = tl.load(Mid_L + batch * stride_mmb + head * stride_mmh + offs_s)
    o_split = tl.load(
        Mid_O + batch * stride_mob + head * stride_moh + offs_s[:, None] * stride_mos + offs_d[None, :]
    )
    m_max = tl.max(m_split, 0)
    # an empty part has m = -inf and weighs nothing
    w_split = tl.exp2(m_split - m_max)  # expect: F30 F31
    denom = tl.sum(l_split * w_split, 0)  # expect: F31
    acc = tl.sum(o_split * w_split[:, None], 0)  # expect: F31
    tl.store(Out + batch * stride_ob + head * stride_oh + offs_d, acc / denom)


def flash_decode(q, k_cache, v_cache, lengths, sm_scale, num_splits=8):
    # q: (B, H, D), one new token per sequence; k_cache, v_cache: (B, H_KV, T_max, D)
    batch, n_heads, head_dim = q.shape
    n_kv_heads = k_cache.shape[1]
    group = n_heads // n_kv_heads
    mid_o = torch.empty(batch, n_heads, num_splits, head_dim, device=q.device, dtype=torch.float32)
    mid_m = torch.empty(batch, n_heads, num_splits, device=q.device, dtype=torch.float32)
    mid_l = torch.empty_like(mid_m)
    _decode_split_kernel[(batch * n_heads, num_splits)](  # expect: F3
        q, k_cache, v_cache, lengths, mid_o, mid_m, mid_l,
        sm_scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
        mid_m.stride(0), mid_m.stride(1),
        n_heads,
        KV_GROUP=group, HEAD_DIM=head_dim, BLOCK_N=64, NUM_SPLITS=num_splits,
    )
    out = torch.empty_like(q)
    _decode_combine_kernel[(batch * n_heads,)](
        mid_o, mid_m, mid_l, out,
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
        mid_m.stride(0), mid_m.stride(1),
        out.stride(0), out.stride(1),
        n_heads,
        HEAD_DIM=head_dim, NUM_SPLITS=num_splits,
    )
    return out
