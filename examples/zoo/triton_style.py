"""A correct attention kernel written the way Triton kernels are, ported to plain PyTorch.

The host function flattens batch and heads into one axis, pads the keys to whole blocks with zeros,
reads the sequence bounds out of tensors as Python integers (as a varlen launcher reads
``cu_seqlens``) and launches one "program" per (batch·head, query block).  A program keeps its
running max and sum in base 2: the softmax scale and log2(e) are folded into one float32 constant
(``qk_scale``) and every exponential is an ``exp2``.  fp16/bf16 are loaded and scored in float32 and
the output is stored in the input dtype.  A few queries over many keys take a split-keys path (each
split reduces its keys on its own, a second step merges the splits), as decode kernels do.  Sinks
are read as Python floats and join the sum at the end.  It takes head sizes of 16, 32, 64 and 128
only, and declares them (``head_dims``).  There is no autograd: the launch runs under
``torch.no_grad()``, as a Triton kernel without a backward would.

Nothing here is shaped like attnspec's own code; it is a target of the zoo (examples/zoo/README.md).
"""

from __future__ import annotations

import math

import torch

LOG2E = 1.4426950408889634
BLOCK_M = 32  # queries per program
BLOCK_N = 16  # keys per inner step
SPLIT_BELOW = 4  # decode path: fewer queries than this ...
SPLIT_FROM = 64  # ... over at least this many keys
NUM_SPLITS = 4
HEAD_DIMS = (16, 32, 64, 128)  # the head sizes the kernel is built for (tl.dot tiles of 16 and up)


def _program(q, k, v, qk_scale, q_lo, q_hi, k_lo, k_hi, n_keys, offset, causal, window):
    """One program: queries q_lo..q_hi-1 of one (batch·head) over keys k_lo..k_hi-1 (a whole number of
    key blocks of the padded K/V, of which only the first ``n_keys`` are real).  Returns (acc, l, m): the
    un-normalised accumulator, the running sum and the running max in base 2."""
    rows = q_hi - q_lo
    acc = torch.zeros(rows, v.shape[-1], dtype=torch.float32, device=q.device)
    l_i = torch.zeros(rows, dtype=torch.float32, device=q.device)
    m_i = torch.full((rows,), -math.inf, dtype=torch.float32, device=q.device)
    offs_m = torch.arange(q_lo, q_hi, device=q.device) + offset  # absolute positions of the queries
    qb = q[q_lo:q_hi]
    for start_n in range(k_lo, k_hi, BLOCK_N):
        offs_n = torch.arange(start_n, start_n + BLOCK_N, device=q.device)
        kb, vb = k[start_n : start_n + BLOCK_N], v[start_n : start_n + BLOCK_N]
        qk = (qb @ kb.T) * qk_scale  # logits in base 2
        mask = (offs_n < n_keys)[None, :]
        if causal:
            mask = mask & (offs_n[None, :] <= offs_m[:, None])
            if window is not None:
                mask = mask & (offs_n[None, :] > offs_m[:, None] - window)
        qk = torch.where(mask, qk, -math.inf)
        m_ij = torch.maximum(m_i, qk.amax(dim=1))
        safe = torch.where(m_ij == -math.inf, 0.0, m_ij)  # a row that has seen nothing yet
        p = torch.exp2(qk - safe[:, None])
        alpha = torch.exp2(m_i - safe)
        l_i = l_i * alpha + p.sum(dim=1)
        acc = acc * alpha[:, None] + p @ vb
        m_i = m_ij
    return acc, l_i, m_i


def _finish(acc, l_i, m_i, sink_l2):
    """acc / (l + 2^(sink - m)), with the sink (a base-2 logit, or None) as one more column of value 0."""
    if sink_l2 is not None:
        m_new = torch.maximum(m_i, torch.full_like(m_i, sink_l2))
        scale = torch.exp2(m_i - m_new)
        scale = torch.where(m_i == -math.inf, 0.0, scale)
        l_i = l_i * scale + torch.exp2(sink_l2 - m_new)
        acc = acc * scale[:, None]
    denom = torch.where(l_i > 0, l_i, 1.0)
    return torch.where(l_i[:, None] > 0, acc / denom[:, None], 0.0)


def _key_bounds(q_lo, q_hi, offset, causal, window, n_keys_padded):
    """The key blocks a query block may see: [lo, hi), both on the block grid."""
    if not causal:
        return 0, n_keys_padded
    hi = min(offset + q_hi, n_keys_padded)
    lo = 0 if window is None else max(0, offset + q_lo - window + 1)
    lo = lo // BLOCK_N * BLOCK_N
    hi = -(-hi // BLOCK_N) * BLOCK_N
    return lo, max(lo, hi)


def _split_keys(q, k, v, qk_scale, seqlen_q, n_keys, offset, causal, window, sink_l2):
    """Decode: the visible key blocks in NUM_SPLITS parts, each reduced alone, then merged."""
    lo, hi = _key_bounds(0, seqlen_q, offset, causal, window, k.shape[0])
    per_split = -(-(hi - lo) // (NUM_SPLITS * BLOCK_N)) * BLOCK_N
    parts = []
    for s_lo in range(lo, hi, max(per_split, BLOCK_N)):
        s_hi = min(s_lo + per_split, hi)
        parts.append(_program(q, k, v, qk_scale, 0, seqlen_q, s_lo, s_hi, n_keys, offset, causal, window))
    if not parts:
        zeros = torch.zeros(seqlen_q, v.shape[-1], dtype=torch.float32, device=q.device)
        return _finish(zeros, zeros[:, 0], torch.full_like(zeros[:, 0], -math.inf), sink_l2)
    m_all = torch.stack([m for _, _, m in parts]).amax(dim=0)
    safe = torch.where(m_all == -math.inf, 0.0, m_all)
    acc = sum(a * torch.exp2(m - safe)[:, None] for a, _, m in parts)
    l_all = sum(l_part * torch.exp2(m - safe) for _, l_part, m in parts)
    return _finish(acc, l_all, m_all, sink_l2)


@torch.no_grad()
def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """The launcher: q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> (B, Hq, Tq, dv)."""
    batch, n_heads, _, head_dim = q.shape
    if head_dim not in HEAD_DIMS or v.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head sizes d={head_dim}, dv={v.shape[-1]}: this kernel is built for {HEAD_DIMS}")
    n_kv = k.shape[1]
    group = n_heads // n_kv
    sm_scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    qk_scale = torch.tensor(sm_scale * LOG2E, dtype=torch.float32).item()  # one float32 constant
    # sequence bounds as tensors, read back as Python ints (a varlen launcher's cu_seqlens)
    seqlens = torch.tensor([q.shape[2], k.shape[2]], device=q.device)
    seqlen_q, seqlen_k = (int(n) for n in seqlens.tolist())
    offset = seqlen_k - seqlen_q  # bottom-right: query i sits at position offset + i
    padded = -(-seqlen_k // BLOCK_N) * BLOCK_N
    pad = padded - seqlen_k
    qf = q.reshape(batch * n_heads, seqlen_q, head_dim).float()
    kf = torch.nn.functional.pad(k.float(), (0, 0, 0, pad)).reshape(batch * n_kv, padded, head_dim)
    vf = torch.nn.functional.pad(v.float(), (0, 0, 0, pad)).reshape(batch * n_kv, padded, v.shape[-1])
    sink_list = None if sinks is None else [float(s) * LOG2E for s in sinks.float().tolist()]
    out = torch.empty(batch * n_heads, seqlen_q, v.shape[-1], dtype=q.dtype, device=q.device)
    for bh in range(batch * n_heads):
        b, h = divmod(bh, n_heads)
        kv = b * n_kv + h // group
        sink_l2 = None if sink_list is None else sink_list[h]
        if seqlen_q < SPLIT_BELOW and seqlen_k >= SPLIT_FROM:
            res = _split_keys(
                qf[bh], kf[kv], vf[kv], qk_scale, seqlen_q, seqlen_k, offset, causal, window, sink_l2
            )
            out[bh] = res.to(q.dtype)
            continue
        for q_lo in range(0, seqlen_q, BLOCK_M):
            q_hi = min(q_lo + BLOCK_M, seqlen_q)
            k_lo, k_hi = _key_bounds(q_lo, q_hi, offset, causal, window, padded)
            acc, l_i, m_i = _program(
                qf[bh], kf[kv], vf[kv], qk_scale, q_lo, q_hi, k_lo, k_hi, seqlen_k, offset, causal, window
            )
            out[bh, q_lo:q_hi] = _finish(acc, l_i, m_i, sink_l2).to(q.dtype)
    return out.reshape(batch, n_heads, seqlen_q, v.shape[-1])


attention.capabilities = {
    "window", "sinks", "value_dim", "gqa", "decode", "blind", "non_causal", "scale", "float16"
}
attention.head_dims = HEAD_DIMS
attention.blocks = (BLOCK_N, BLOCK_M)
attention.switches = (SPLIT_BELOW, SPLIT_FROM)
