"""A fused attention forward in Triton: one program per (query block, batch x head), an online softmax
in base 2 over the key blocks it may see, causal and sliding-window block skipping, GQA by pointer
arithmetic, per-head sinks, fp16/bf16 inputs with float32 scores and accumulator.

Run on a GPU it is compiled; `attnspec check` on a CPU runs it through Triton's interpreter.
"""

import math

import torch
import triton
import triton.language as tl

LOG2E: tl.constexpr = 1.4426950408889634


@triton.jit
def _attn_fwd(
    Q, K, V, Sinks, Out,
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om, stride_od,
    sm_scale, H, N_Q, N_KV, WINDOW,
    GROUP: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SINKS: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    off_kvh = off_h // GROUP

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    # queries are the last N_Q positions of the N_KV keys
    q_pos = offs_m + (N_KV - N_Q)

    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < N_Q) & (offs_d[None, :] < HEAD_D), other=0.0)
    k_base = K + off_z * stride_kz + off_kvh * stride_kh
    v_base = V + off_z * stride_vz + off_kvh * stride_vh

    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    # the key blocks this query block may see
    lo = 0
    hi = N_KV
    if IS_CAUSAL:
        hi = tl.minimum(N_KV, (start_m + 1) * BLOCK_M + (N_KV - N_Q))
        if HAS_WINDOW:
            lo = tl.maximum(0, start_m * BLOCK_M + (N_KV - N_Q) - WINDOW + 1)
            lo = (lo // BLOCK_N) * BLOCK_N

    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(
            k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd,
            mask=(cols[None, :] < N_KV) & (offs_d[:, None] < HEAD_D),
            other=0.0,
        )
        qk = tl.dot(q, k, input_precision="ieee") * qk_scale  # float32 inputs: no TF32 on a GPU
        visible = cols[None, :] < N_KV
        if IS_CAUSAL:
            visible = visible & (cols[None, :] <= q_pos[:, None])
            if HAS_WINDOW:
                visible = visible & (cols[None, :] > q_pos[:, None] - WINDOW)
        qk = tl.where(visible, qk, float("-inf"))

        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_use = tl.where(m_ij == float("-inf"), 0.0, m_ij)  # a row that has seen no key yet
        p = tl.math.exp2(qk - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + cols[:, None] * stride_vn + offs_dv[None, :] * stride_vd,
            mask=(cols[:, None] < N_KV) & (offs_dv[None, :] < HEAD_DV),
            other=0.0,
        )
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
        m_i = m_ij

    if HAS_SINKS:
        sink = tl.load(Sinks + off_h).to(tl.float32) * LOG2E
        m_new = tl.maximum(m_i, sink)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.math.exp2(sink - m_new)
        acc = acc * alpha[:, None]
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # a query that sees no key outputs 0
    out = acc / l_safe[:, None]

    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om + offs_dv[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=(offs_m[:, None] < N_Q) & (offs_dv[None, :] < HEAD_DV))


BLOCK_M = 16
BLOCK_N = 16


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """q (B, H, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> (B, H, Tq, dv)."""
    batch, n_heads, n_q, head_d = q.shape
    n_kv_heads, n_kv, head_dv = k.shape[1], k.shape[2], v.shape[-1]
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(head_d)
    out = torch.empty((batch, n_heads, n_q, head_dv), dtype=q.dtype, device=q.device)
    sinks_arg = sinks if sinks is not None else out  # not read without sinks
    grid = (triton.cdiv(n_q, BLOCK_M), batch * n_heads)
    _attn_fwd[grid](
        q, k, v, sinks_arg, out,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        sm_scale, n_heads, n_q, n_kv, window if window is not None else 0,
        GROUP=n_heads // n_kv_heads, HEAD_D=head_d, HEAD_DV=head_dv,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        BLOCK_D=max(16, triton.next_power_of_2(head_d)), BLOCK_DV=max(16, triton.next_power_of_2(head_dv)),
        IS_CAUSAL=causal, HAS_WINDOW=causal and window is not None, HAS_SINKS=sinks is not None,
    )
    return out


attention.capabilities = {
    "window", "sinks", "gqa", "decode", "blind", "non_causal", "scale", "value_dim", "float16",
}
attention.conventions = {"weights-in-input-dtype"}  # P rounded to fp16/bf16 for the product with V
attention.blocks = (BLOCK_N, BLOCK_M)
