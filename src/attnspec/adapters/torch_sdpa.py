"""torch's F.scaled_dot_product_attention under attnspec's conventions.

Queries are aligned bottom-right with an explicit boolean mask (torch's ``is_causal`` is
top-left aligned when Tq < Tk), a window is a band mask, GQA goes through ``enable_gqa``, and
sinks are one extra all-zero key and value whose float-mask column holds the sink logit: its
score is then exactly the sink (unscaled) and its value adds nothing.  No attention weights
(SDPA does not return them), and no argument checks of its own beyond torch's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnspec.kit.references import float_mask_attention
from attnspec.protocol.targets import Target


def allowed_keys(tq: int, tk: int, window: int | None, device=None) -> torch.Tensor:
    """(tq, tk) booleans, True where query i (at position tk - tq + i) may see key j."""
    query = torch.arange(tk - tq, tk, device=device)[:, None]
    key = torch.arange(tk, device=device)[None, :]
    allowed = key <= query
    if window is not None:
        allowed &= key > query - window
    return allowed


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None):
    tq, tk = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if not causal and sinks is None:
        return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)
    if causal and window is None and sinks is None and tq == tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    allowed = allowed_keys(tq, tk, window, q.device) if causal else torch.ones(tq, tk, dtype=torch.bool)
    if sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=gqa)
    mask = torch.zeros(tq, tk, dtype=q.dtype, device=q.device).masked_fill(~allowed.to(q.device), -math.inf)
    return float_mask_attention(q, k, v, mask, sinks=sinks, scale=scale)


TARGET = Target(
    "torch",
    attention,
    frozenset("window sinks gqa value_dim decode blind non_causal scale float64 grad".split()),
    "torch.nn.functional.scaled_dot_product_attention (masks built here, sinks as an extra key)",
)
