"""Scaled dot-product attention with GQA, per-head sinks and sliding windows.

    Attn(Q, K, V) = softmax(Q K^T * scale + M) V,   scale = 1 / sqrt(d)

q is (B, Hq, Tq, d); k and v are (B, Hkv, Tk, d) and (B, Hkv, Tk, dv).  KV head g serves
query heads g*r .. g*r + r - 1 with r = Hq // Hkv.  A sink is one logit per query head,
appended as an extra softmax column (not scaled, independent of q) and dropped after
the softmax, so it only takes probability mass away from the real keys.
"""

from __future__ import annotations

import math

import torch

from .masks import additive_mask, attention_mask


def check_attention_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sinks: torch.Tensor | None,
) -> None:
    """Raise a ValueError/TypeError naming the argument for every malformed input."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, T, d), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got q {q.device}, k {k.device}, v {v.device}")
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(f"batch sizes differ: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree in (B, Hkv, Tk): k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k head_dim differ: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if min(q.shape) < 1 or min(k.shape) < 1 or v.shape[3] < 1:
        raise ValueError(f"empty dimension: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    n_heads, n_kv_heads = q.shape[1], k.shape[1]
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"query heads must be a multiple of KV heads: Hq={n_heads}, Hkv={n_kv_heads}")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor):
            raise TypeError(f"sinks must be a torch.Tensor or None, got {type(sinks).__name__}")
        if sinks.shape != (n_heads,):
            raise ValueError(f"sinks must have shape (Hq,) = ({n_heads},), got {tuple(sinks.shape)}")
        if sinks.device != q.device:
            raise ValueError(f"sinks on {sinks.device} but q on {q.device}")


def softmax_or_zero(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis; a row whose entries are all -inf gives zeros, not NaN."""
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = torch.exp(scores - row_max)
    # A row with any finite score has total >= 1 (its maximum contributes exp(0) = 1); an
    # all -inf row has total 0 and exp 0, and dividing by 1 leaves it at 0.
    return exp / exp.sum(dim=-1, keepdim=True).clamp(min=1.0)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
    scale: float | None = None,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention output (B, Hq, Tq, dv); with ``return_weights`` also the (B, Hq, Tq, Tk) weights."""
    check_attention_inputs(q, k, v, sinks)
    batch, n_heads, tq, head_dim = q.shape
    n_kv_heads, tk = k.shape[1], k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)

    # GQA: KV head g serves query heads g*r .. g*r + r - 1.  Those r heads' queries are stacked
    # as r*Tq rows against the one KV head, so K and V are never copied r times.
    group = n_heads // n_kv_heads
    grouped_q = q.reshape(batch, n_kv_heads, group * tq, head_dim)

    # Half-precision inputs are scored and normalised in float32.
    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scores = torch.matmul(grouped_q.to(compute), k.to(compute).mT) * scale  # (B, Hkv, r*Tq, Tk)
    scores = scores.view(batch, n_heads, tq, tk)
    allowed = attention_mask(tq, tk, causal=causal, window=window, device=q.device)
    scores = scores + additive_mask(allowed)

    if sinks is not None:
        sink_column = sinks.to(compute)[:, None, None].expand(batch, n_heads, tq, 1)
        scores = torch.cat([scores, sink_column], dim=-1)  # (B, Hq, Tq, Tk + 1)
    weights = softmax_or_zero(scores)
    if sinks is not None:
        weights = weights[..., :tk]  # drop the sink column

    out = torch.matmul(
        weights.reshape(batch, n_kv_heads, group * tq, tk), v.to(compute)
    )  # (B, Hkv, r*Tq, dv)
    out = out.view(batch, n_heads, tq, v.shape[-1]).to(q.dtype)
    if return_weights:
        return out, weights.to(q.dtype)
    return out
