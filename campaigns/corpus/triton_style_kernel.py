"""Flash-attention forward written the way a Triton kernel writes it, emulated with plain PyTorch ops."""

import math

import torch

BLOCK_M = 64
BLOCK_N = 64


def _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, offs_m, hi, sm_scale, CAUSAL):
    # walks the key/value blocks of one (batch, kv_head) for one query block, like the inner tl loop
    for start_n in range(0, hi, BLOCK_N):  # expect: F32
        offs_n = torch.arange(start_n, min(start_n + BLOCK_N, hi), device=q.device)
        k = K_block_ptr[offs_n].float()
        v = V_block_ptr[offs_n].float()
        qk = q @ k.T
        qk *= sm_scale  # expect: F3
        if CAUSAL:  # expect: F25
            qk = torch.where(offs_m[:, None] >= offs_n[None, :], qk, float("-inf"))  # expect: F1 F2
        m_ij = torch.maximum(m_i, qk.max(dim=1).values)  # expect: F14
        p = torch.exp(qk - m_ij[:, None])
        alpha = torch.exp(m_i - m_ij)  # expect: F29
        l_i = l_i * alpha + p.sum(dim=1)  # expect: F14 F29
        acc = acc * alpha[:, None] + p @ v  # expect: F29
        m_i = m_ij
    return acc, l_i, m_i


def _attn_fwd(Q, K, V, Out, Sinks, sm_scale, CAUSAL):
    Z, H, N_CTX, HEAD_DIM = Q.shape
    H_KV = K.shape[1]
    for off_z in range(Z):  # tl.program_id(1) // H
        for off_h in range(H):  # tl.program_id(1) % H
            kv_head = off_h // (H // H_KV)  # expect: F15
            for start_m in range(0, N_CTX, BLOCK_M):  # tl.program_id(0) * BLOCK_M  # expect: F32
                offs_m = torch.arange(start_m, min(start_m + BLOCK_M, N_CTX), device=Q.device)
                q = Q[off_z, off_h, offs_m].float()
                m_i = torch.full((offs_m.numel(),), float("-inf"), device=Q.device)  # expect: F28
                l_i = torch.zeros(offs_m.numel(), device=Q.device)
                acc = torch.zeros(offs_m.numel(), HEAD_DIM, device=Q.device)
                # causal blocks stop at the diagonal; bidirectional ones read every key block
                hi = min(start_m + BLOCK_M, N_CTX) if CAUSAL else N_CTX  # expect: F25 F32
                acc, l_i, m_i = _attn_fwd_inner(  # expect: F19 F25
                    acc, l_i, m_i, q, K[off_z, kv_head], V[off_z, kv_head], offs_m, hi, sm_scale, CAUSAL
                )
                if Sinks is not None:
                    # the sink is an extra logit per head that takes probability mass but has no value
                    l_i = l_i + torch.exp(Sinks[off_h].float() - m_i)  # expect: F10
                Out[off_z, off_h, offs_m] = (acc / l_i[:, None]).to(Out.dtype)


def attention(q, k, v, causal=True, sm_scale=None, sinks=None):
    # q: (Z, H, N_CTX, HEAD_DIM); k, v: (Z, H_KV, N_CTX, HEAD_DIM); sinks: (H,) or None
    n_heads, n_kv_heads = q.shape[1], k.shape[1]
    if n_heads % n_kv_heads != 0:  # expect: F9
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(q.shape[-1])  # expect: F3
    o = torch.empty_like(q)
    _attn_fwd(q, k, v, o, sinks, sm_scale, causal)  # expect: F10 F19 F25
    return o
