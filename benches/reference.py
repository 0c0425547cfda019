"""torch's own kernels under attnspec's conventions: what impl/ is timed against.

- ``torch_attention``: ``F.scaled_dot_product_attention`` with queries aligned bottom-right
  (``is_causal`` when that is the same thing), a boolean band mask for a window, GQA through
  ``enable_gqa``, and sinks as one extra all-zero key and value whose float-mask column holds
  the sink logit (its score is then exactly the sink, unscaled, and its value adds nothing).
- ``torch_attention_block``: the AttentionBlock's computation with torch primitives
  (``F.rms_norm``, ``F.linear``, RoPE, ``torch_attention``) and an impl block's parameters.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def band_mask(tq: int, tk: int, window: int | None, device=None) -> torch.Tensor:
    """(tq, tk) booleans, True where query i (at position tk - tq + i) may see key j."""
    query = torch.arange(tk - tq, tk, device=device)[:, None]
    key = torch.arange(tk, device=device)[None, :]
    allowed = key <= query
    if window is not None:
        allowed &= key > query - window
    return allowed


def torch_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention (B, Hq, Tq, dv) by torch's SDPA; k, v (B, Hkv, Tk, d)."""
    tq, tk = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if window is None and sinks is None and tq == tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    allowed = band_mask(tq, tk, window, q.device)
    if sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=gqa)
    mask = torch.zeros(q.shape[1], tq, tk + 1, dtype=q.dtype, device=q.device)
    mask[:, :, :tk].masked_fill_(~allowed, -math.inf)
    mask[:, :, tk] = sinks.to(q.dtype)[:, None]
    zero_k = k.new_zeros(*k.shape[:2], 1, k.shape[3])
    zero_v = v.new_zeros(*v.shape[:2], 1, v.shape[3])
    k, v = torch.cat([k, zero_k], dim=2), torch.cat([v, zero_v], dim=2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


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
