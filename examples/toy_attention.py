"""A toy attention kernel in plain PyTorch: an example of a user's target for attnspec.

It is the softmax attention of attnspec's conventions (src/attnspec/CONVENTIONS.md), written for clarity, not
speed, and it supports every attention-level capability: attention weights, sliding windows, sinks,
a value head size of its own, grouped-query attention, decode (fewer queries than keys, aligned
bottom-right), queries that see no key, non-causal attention, packed sequences (document ids), an
explicit scale, float64, fp16/bf16 scored in float32, and gradients.  It needs only torch.  Check it with

    python -m pytest properties --impl examples.toy_attention:attention

Narrowing the capabilities: the environment variable ATTNSPEC_TOY_CAPABILITIES, read when this
module is imported, names the capabilities that ``attention.capabilities`` declares, comma-separated
("weights,gqa"); empty declares none; unset declares them all.  A narrowed kernel refuses, with a
TypeError, a call that uses a capability it does not declare, as a kernel without that support may:
the properties promise never to make such a call (src/attnspec/protocol/targets.py).
"""

from __future__ import annotations

import math
import os

import torch

SUPPORTED = frozenset(
    "weights window sinks value_dim gqa decode blind non_causal documents scale float64 float16 grad".split()
)
CAPABILITIES_ENV = "ATTNSPEC_TOY_CAPABILITIES"


def attention(
    q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False, document_ids=None
):
    """softmax(q k^T * scale + mask, sink) v.

    q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> out (B, Hq, Tq, dv), and with
    ``return_weights`` (out, weights (B, Hq, Tq, Tk)), the weights without the sink column.
    ``document_ids`` (B, Tk): packed sequences, the document of every key; a query sees only keys of
    the document at its own position."""
    used = _used(q, k, v, causal, window, sinks, scale, return_weights, document_ids)
    undeclared = used - attention.capabilities
    if undeclared:
        raise TypeError(f"the toy kernel does not declare {sorted(undeclared)} ({CAPABILITIES_ENV})")
    batch, n_heads, tq, head_dim = q.shape
    n_kv_heads, tk = k.shape[1], k.shape[2]
    out_dtype = q.dtype
    # Half precision is scored and normalised in float32 and rounded once at the end.
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    q, k, v = q.to(work), k.to(work), v.to(work)

    # Grouped-query attention: KV head g serves query heads g*r .. g*r + r - 1.
    r = n_heads // n_kv_heads
    k = k.repeat_interleave(r, dim=1)
    v = v.repeat_interleave(r, dim=1)

    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, Hq, Tq, Tk)

    # Bottom-right alignment: query i sits at position Tk - Tq + i and sees keys p - W < j <= p.
    position = torch.arange(tk - tq, tk, device=q.device).unsqueeze(1)
    key = torch.arange(tk, device=q.device).unsqueeze(0)
    allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device)
    if causal:
        allowed = key <= position
        if window is not None:
            allowed = allowed & (key > position - window)
    if document_ids is not None:
        # The document at each query's position (the first key's before it), against each key's.
        own = document_ids[:, position.squeeze(1).clamp(min=0)]  # (B, Tq)
        same = own[:, :, None] == document_ids[:, None, :]
        allowed = allowed & same[:, None]  # (B, 1, Tq, Tk)
    scores = scores.masked_fill(~allowed, -math.inf)

    # A sink is one more softmax column per query head, independent of q and not scaled.
    logits = scores
    if sinks is not None:
        sink_column = sinks.to(device=q.device, dtype=work).view(1, n_heads, 1, 1)
        logits = torch.cat([scores, sink_column.expand(batch, n_heads, tq, 1)], dim=-1)

    # A softmax that gives a row with nothing visible (every logit -inf) weights of exactly 0, not
    # NaN.  The row maximum only keeps exp() in range: detached, it changes neither value nor gradient.
    top = logits.amax(dim=-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    exps = torch.exp(logits - top)
    total = exps.sum(dim=-1, keepdim=True)
    probabilities = exps / torch.where(total > 0, total, torch.ones_like(total))
    weights = probabilities[..., :tk]  # the sink column is dropped

    out = (weights @ v).to(out_dtype)
    if return_weights:
        return out, weights.to(out_dtype)
    return out


def _used(q, k, v, causal, window, sinks, scale, return_weights, document_ids) -> set[str]:
    """The capabilities a call uses."""
    dtypes = {t.dtype for t in (q, k, v, sinks) if t is not None}
    used = {
        "weights": return_weights,
        "window": window is not None,
        "sinks": sinks is not None,
        "value_dim": v.shape[-1] != q.shape[-1],
        "gqa": k.shape[1] != q.shape[1],
        "decode": q.shape[2] < k.shape[2],
        "blind": q.shape[2] > k.shape[2],
        "non_causal": not causal,
        "documents": document_ids is not None,
        "scale": scale is not None,
        "float64": torch.float64 in dtypes,
        "float16": bool(dtypes & {torch.float16, torch.bfloat16}),
        "grad": any(t is not None and t.requires_grad for t in (q, k, v, sinks)),
    }
    return {name for name, in_use in used.items() if in_use}


def _declared_capabilities() -> frozenset[str]:
    text = os.environ.get(CAPABILITIES_ENV)
    if text is None:
        return SUPPORTED
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    unknown = names - SUPPORTED
    if unknown:
        raise ValueError(
            f"{CAPABILITIES_ENV} names {sorted(unknown)}; the toy kernel supports {sorted(SUPPORTED)}"
        )
    return names


attention.capabilities = _declared_capabilities()
