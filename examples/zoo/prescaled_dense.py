"""A correct dense attention written the way many model files write it: q scaled before the product.

``q * scale`` first, then ``torch.baddbmm`` of an additive mask bias and the scaled queries against the
keys, batch and heads folded into one axis; the bias uses the dtype's most negative finite value (as
Hugging Face models fill masks) rather than -inf, and the softmax upcasts to float32.  GQA by
``expand`` and ``reshape`` of the KV heads.  fp16/bf16 inputs are scored in float32 and the output is
rounded once.  No query may see nothing here (no "blind"): a row of finite fills would average every
value instead of returning 0.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math

import torch


def _repeat_kv(x, group):
    batch, n_kv, seq, width = x.shape
    return x[:, :, None].expand(batch, n_kv, group, seq, width).reshape(batch, n_kv * group, seq, width)


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> (B, Hq, Tq, dv) [, weights]."""
    batch, n_heads, tq, head_dim = q.shape
    tk, group, dtype = k.shape[2], n_heads // k.shape[1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), _repeat_kv(k, group).to(work), _repeat_kv(v, group).to(work)
    q = q * (1.0 / math.sqrt(head_dim) if scale is None else scale)
    bias = torch.zeros(tq, tk, dtype=work, device=q.device)
    if causal:
        rows = torch.arange(tq, device=q.device)[:, None] + (tk - tq)
        cols = torch.arange(tk, device=q.device)[None, :]
        hidden = cols > rows
        if window is not None:
            hidden = hidden | (cols <= rows - window)
        bias = bias.masked_fill(hidden, torch.finfo(work).min)
    flat_q = q.reshape(batch * n_heads, tq, head_dim)
    flat_k = k.reshape(batch * n_heads, tk, head_dim)
    scores = torch.baddbmm(bias.expand(batch * n_heads, tq, tk), flat_q, flat_k.transpose(1, 2))
    scores = scores.view(batch, n_heads, tq, tk)
    if sinks is not None:
        sink = sinks.to(work).view(1, n_heads, 1, 1).expand(batch, n_heads, tq, 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :tk]
    else:
        probs = torch.softmax(scores, dim=-1)
    out = (probs @ v).to(dtype)
    return (out, probs.to(dtype)) if return_weights else out


attention.capabilities = {
    "weights", "window", "sinks", "value_dim", "gqa", "decode", "non_causal", "scale", "float64", "float16",
    "grad",
}
