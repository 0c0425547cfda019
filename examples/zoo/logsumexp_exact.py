"""A correct attention kernel that normalises by a stored log-sum-exp, with a hand-written backward.

The forward is exact float32 arithmetic, written the way a kernel author writes the reference of a fused
kernel: the logits ``q @ k^T * scale`` in float32 (fp16/bf16 loaded and scored in float32, the output
stored in the input dtype; float64 stays float64), the mask as ``-inf``, ``lse = torch.logsumexp(s)`` over
each row (the sink joining it as one more logit), then the weights ``exp(s - lse)`` — never divided by
their sum — times the values.  GQA by a view of the query heads as (Hkv, r) groups that broadcast over
their KV head; causal masks bottom-right aligned (a decode step's queries are the last positions), a
sliding window, ``causal=False``, more queries than keys (a query that sees nothing has
``lse = -inf`` and outputs 0).

The backward is an ``autograd.Function`` that saves ``lse`` and the output, as FlashAttention's does:
it recomputes ``p = exp(s - lse)``, forms ``D_i = dO_i . O_i``, ``dS = p * (dO @ V^T - D)``, and sums
each KV head's gradients over its group of query heads; the sink's gradient is ``-sum p_sink D``.

Because ``lse`` is rounded once at its own magnitude (about the row's largest logit) and the weights are
not renormalised, every weight of a row carries that rounding: at logits near 120 in float32 the
outputs move by a few 1e-6, which the tolerance's conditioning term allows for (attnspec/specs/tolerance.py).

Broken twin, ``lse_before_the_mask``: ``logsumexp`` taken over the whole row of logits and the mask
applied to the weights afterwards, as a port of a non-causal reference does: the hidden keys still
count in every row's sum, so a causal row's weights sum to less than one and its outputs shrink.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math

import torch


def _hidden(tq, tk, causal, window, device):
    """(Tq, Tk) True where query i may not see key j: bottom-right causal, query i at position Tk-Tq+i."""
    if not causal:
        return torch.zeros(tq, tk, dtype=torch.bool, device=device)
    pos = torch.arange(tq, device=device)[:, None] + (tk - tq)
    key = torch.arange(tk, device=device)[None, :]
    hidden = key > pos
    if window is not None:
        hidden = hidden | (key <= pos - window)
    return hidden


def _grouped(q, n_kv):
    """(B, Hq, T, d) -> (B, Hkv, r, T, d): the query heads of each KV head side by side."""
    batch, n_heads, t, d = q.shape
    return q.view(batch, n_kv, n_heads // n_kv, t, d)


def _logits(qg, k, scale, hidden):
    """The masked logits (B, Hkv, r, Tq, Tk) in the working dtype."""
    s = (qg @ k[:, :, None].transpose(-2, -1)) * scale
    return s.masked_fill(hidden, -math.inf)


def _lse(s, sink):
    """log sum exp of each row of ``s`` (and the sink, one more logit per query head), (..., Tq, 1)."""
    if sink is not None:
        s = torch.cat([s, sink.expand(*s.shape[:-1], 1)], dim=-1)
    return torch.logsumexp(s, dim=-1, keepdim=True)


def _weights(s, lse):
    """exp(s - lse), 0 where the row sees nothing (lse = -inf)."""
    safe = torch.where(lse == -math.inf, torch.zeros_like(lse), lse)
    return torch.exp(s - safe)


class _LseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, scale, causal, window, mask_first):
        dtype, n_kv = q.dtype, k.shape[1]
        work = torch.float64 if dtype == torch.float64 else torch.float32
        q, k, v = q.to(work), k.to(work), v.to(work)
        tq, tk = q.shape[2], k.shape[2]
        hidden = _hidden(tq, tk, causal, window, q.device)
        qg = _grouped(q, n_kv)
        sink = None
        if sinks is not None:
            sink = sinks.to(work).view(1, n_kv, -1, 1, 1)
        s = _logits(qg, k, scale, hidden)
        if mask_first:
            lse = _lse(s, sink)
        else:  # the broken twin: the row's sum taken before the mask
            raw = (qg @ k[:, :, None].transpose(-2, -1)) * scale
            lse = _lse(raw, sink)
        p = _weights(s, lse)
        out = p @ v[:, :, None]  # (B, Hkv, r, Tq, dv)
        ctx.save_for_backward(q, k, v, sink, out, lse)
        ctx.meta = (scale, hidden, dtype, sinks.dtype if sinks is not None else None)
        return out.reshape(q.shape[0], q.shape[1], tq, v.shape[-1]).to(dtype)

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, sink, out, lse = ctx.saved_tensors
        scale, hidden, dtype, sink_dtype = ctx.meta
        n_kv = k.shape[1]
        dog = _grouped(d_out.to(q.dtype), n_kv)  # (B, Hkv, r, Tq, dv)
        qg = _grouped(q, n_kv)
        p = _weights(_logits(qg, k, scale, hidden), lse)
        dv = (p.transpose(-2, -1) @ dog).sum(dim=2)
        dp = dog @ v[:, :, None].transpose(-2, -1)
        big_d = (dog * out).sum(dim=-1, keepdim=True)  # D_i = dO_i . O_i
        ds = p * (dp - big_d)
        dq = (ds @ k[:, :, None]) * scale
        dk = ((ds.transpose(-2, -1) @ qg) * scale).sum(dim=2)
        d_sinks = None
        if sink is not None:
            p_sink = _weights(sink.expand_as(lse), lse)
            d_sinks = -(p_sink * big_d).sum(dim=(0, 3, 4)).reshape(-1).to(sink_dtype)
        return dq.reshape(q.shape).to(dtype), dk.to(dtype), dv.to(dtype), d_sinks, None, None, None, None


def _call(q, k, v, causal, window, sinks, scale, mask_first):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _LseAttention.apply(q, k, v, sinks, scale, causal, window, mask_first)


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None):
    """q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> (B, Hq, Tq, dv)."""
    return _call(q, k, v, causal, window, sinks, scale, mask_first=True)


def lse_before_the_mask(q, k, v, *, causal=True, window=None, sinks=None, scale=None):
    """The broken twin: logsumexp over every key of the row, the mask applied to the weights after it."""
    return _call(q, k, v, causal, window, sinks, scale, mask_first=False)


for _target in (attention, lse_before_the_mask):
    _target.capabilities = {
        "window", "sinks", "value_dim", "gqa", "decode", "blind", "non_causal", "scale", "float64", "float16",
        "grad",
    }
