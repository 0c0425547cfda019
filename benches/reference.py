"""torch's own kernels under attnspec's conventions: what impl/ is timed against.

- ``torch_attention``: the conformance kit's torch adapter (src/attnspec/adapters/torch_sdpa.py):
  ``F.scaled_dot_product_attention`` with bottom-right queries (``is_causal`` where that is the
  same), a boolean band mask for a window, ``enable_gqa``, and sinks as one extra zero key.
- ``torch_attention_block``: the AttentionBlock's computation with torch primitives
  (``F.rms_norm``, ``F.linear``, RoPE, ``torch_attention``) and an impl block's parameters.
- ``tile_kernels``: the kernels of impl's causal tiles alone, what its tiled formulation costs in
  eager PyTorch before any work of its own: how close to SDPA that formulation can get.
- ``torch_variant_attention``: causal attention with ALiBi or packed documents through SDPA's float
  or boolean mask, and a soft-cap, which no mask carries, as the formula in eager torch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnspec.adapters.torch_sdpa import attention as torch_attention


def rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """Half-split RoPE of x (B, H, T, d) at positions 0..T-1."""
    d, t = x.shape[-1], x.shape[-2]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = torch.arange(t, dtype=torch.float64, device=x.device)[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def torch_attention_block(block, x: torch.Tensor) -> torch.Tensor:
    """x + out(SDPA(RoPE(q), RoPE(k), v)) over RMSNorm(x), with ``block``'s parameters and config."""
    cfg = block.config
    batch, t, d_model = x.shape
    h = F.rms_norm(x, (d_model,), block.norm.weight, cfg.norm_eps)
    q_width, kv_width = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    q, k, v = F.linear(h, block.qkv.weight).split([q_width, kv_width, kv_width], dim=-1)
    q = q.view(batch, t, cfg.n_heads, cfg.head_dim).transpose(1, 2)
    k = k.view(batch, t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
    v = v.view(batch, t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
    attn = torch_attention(
        rope(q, cfg.rope_base), rope(k, cfg.rope_base), v, window=block.window, sinks=block.sinks
    )
    return x + F.linear(attn.transpose(1, 2).reshape(batch, t, q_width), block.out.weight)


def tile_kernels(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tile: int) -> torch.Tensor:
    """Per tile of ``tile`` queries (largest tiles first, as impl's; a KV head's query heads stacked,
    as impl's GQA), the scaled scores over its causal prefix of keys, a softmax in place, the product
    with V into the output: the kernels impl's causal path cannot do without, and nothing else (no
    mask on the diagonal block, no checks: the result is not attention, only its cost)."""
    batch, heads, t, d = q.shape
    kv_heads, scale = k.shape[1], d**-0.5
    out = q.new_empty(batch, heads, t, v.shape[3])
    for start in reversed(range(0, t, tile)):
        stop = min(start + tile, t)
        grouped = (q[:, :, start:stop] * scale).reshape(batch, kv_heads, -1, d)
        scores = torch.matmul(grouped, k[:, :, :stop].mT)
        rows = torch.matmul(torch.softmax(scores, dim=-1, out=scores), v[:, :, :stop])
        out[:, :, start:stop] = rows.view(batch, heads, stop - start, -1)
    return out


def torch_variant_attention(q, k, v, *, alibi_slopes=None, document_ids=None, softcap=None) -> torch.Tensor:
    """Causal attention with impl's variants, in torch: ALiBi's bias slope_h (j - i) and the documents
    in SDPA's attention mask; a soft-cap as softmax(cap tanh(q k^T / sqrt(d) / cap) + M) v, written out."""
    t = q.shape[2]
    position = torch.arange(t, device=q.device)
    causal = position[None, :] <= position[:, None]
    gqa = q.shape[1] != k.shape[1]
    if softcap is not None:
        group = q.shape[1] // k.shape[1]
        scores = q @ k.repeat_interleave(group, 1).mT / math.sqrt(q.shape[-1])
        scores = (torch.tanh(scores / softcap) * softcap).masked_fill(~causal, -math.inf)
        return torch.softmax(scores, dim=-1) @ v.repeat_interleave(group, 1)
    mask = causal
    if document_ids is not None:
        mask = mask & (document_ids[:, :, None] == document_ids[:, None, :])[:, None]
    if alibi_slopes is not None:
        bias = alibi_slopes[:, None, None] * (position[None, :] - position[:, None]).to(q.dtype)
        mask = bias.masked_fill(~mask, -math.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
