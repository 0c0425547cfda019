"""Declared conventions: a target that follows a documented neighbour of attnspec's conventions on
purpose says so in ``conventions``, and is checked under it by every property.

Each declaration is exact translation at the target's boundary, so that no property, oracle or
strategy needs to know about it: the kit calls the translated target with attnspec's conventions
(CONVENTIONS.md), and the translation calls the user's code with the problem restated in theirs.

- ``rope-interleaved``: RoPE rotates the pairs (x_2i, x_2i+1), as GPT-J and Meta's original Llama code
  (through complex numbers) do.  The kit's half-split feature i is the target's 2i, its i + d/2 the
  target's 2i + 1: rope() permutes the features in and out, and a layer's reported q and k rows are
  permuted the same way within each head (the attention scores do not change under a permutation of
  the features shared by q and k).
- ``window-inclusive``: window W means keys p-W <= j <= p (W + 1 keys), as FlashAttention's
  ``window_size=(W, 0)``: the kit's window W is the target's W - 1 (so the target's 0 is one key).
- ``top-left``: with fewer queries than keys, query i sits at position i (torch's ``is_causal``).  The
  kit's bottom-right problem of Tq queries over Tk keys is the target's problem with Tk - Tq queries
  put before them, whose rows are dropped: the target sees only square causal problems, so a path it
  takes only for Tq < Tk is not exercised.  It cannot take queries that see no key ("blind").
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnspec.properties.targets import Layer, LayerSpec, Target

DECLARABLE = {
    "rope-interleaved": "RoPE pairs (x_2i, x_2i+1), as GPT-J and Meta's original Llama code rotate",
    "window-inclusive": "window W sees p-W <= j <= p, W + 1 keys (FlashAttention's window_size=(W, 0))",
    "top-left": "query i at position i when Tq < Tk (torch's is_causal=True)",
}


def half_split_order(d: int) -> list[int]:
    """Feature f of the interleaved layout is feature order[f] of the half-split one: 2i -> i,
    2i + 1 -> i + d/2."""
    return [f // 2 + (d // 2 if f % 2 else 0) for f in range(d)]


def problems(declared: frozenset[str], capabilities: frozenset[str]) -> list[str]:
    """What is wrong with a declaration: unknown names, or a convention that excludes a capability."""
    unknown = sorted(declared - set(DECLARABLE))
    found = [f"unknown convention {name!r}; declarable: {sorted(DECLARABLE)}" for name in unknown]
    if "top-left" in declared and "blind" in capabilities:
        found.append("'top-left' and 'blind' exclude each other: top-left queries past Tk see every key")
    return found


def translated(target: Target) -> Target:
    """The target as attnspec's conventions see it: its declared conventions translated away."""
    declared = target.conventions
    if not declared:
        return target
    attention, rope, layer = target.attention, target.rope, target.layer
    if "window-inclusive" in declared:
        attention = _inclusive_window(attention)
    if "top-left" in declared:
        attention = _top_left(attention)
    if "rope-interleaved" in declared:
        rope = None if rope is None else _interleaved_rope(rope)
        layer = None if layer is None else _interleaved_layer(layer)
    return replace(target, attention=attention, rope=rope, layer=layer)


def _inclusive_window(attention):
    def call(q, k, v, *, window=None, **kwargs):
        return attention(q, k, v, window=None if window is None else window - 1, **kwargs)

    return call


def _top_left(attention):
    def call(q, k, v, *, causal=True, **kwargs):
        before = k.shape[2] - q.shape[2]
        if not causal or before <= 0:
            return attention(q, k, v, causal=causal, **kwargs)
        padded = torch.cat([q.new_zeros(*q.shape[:2], before, q.shape[3]), q], dim=2)
        result = attention(padded, k, v, causal=causal, **kwargs)
        if isinstance(result, tuple):
            return tuple(part[:, :, before:] for part in result)
        return result[:, :, before:]

    return call


def _interleaved_rope(rope):
    def call(x, positions, base=10000.0):
        order = torch.tensor(half_split_order(x.shape[-1]), device=x.device)
        return rope(x[..., order], positions, base)[..., torch.argsort(order)]

    return call


def _interleaved_layer(layer):
    def build(spec: LayerSpec) -> Layer:
        built = layer(spec)
        order = half_split_order(spec.head_dim)
        inverse = sorted(range(spec.head_dim), key=order.__getitem__)

        def rows(n_heads: int) -> list[int]:
            return [head * spec.head_dim + f for head in range(n_heads) for f in inverse]

        permuted = {"wq": built.wq[rows(spec.n_heads)], "wk": built.wk[rows(spec.n_kv_heads)]}
        if built.bq is not None:
            permuted["bq"] = built.bq[rows(spec.n_heads)]
        if built.bk is not None:
            permuted["bk"] = built.bk[rows(spec.n_kv_heads)]
        return replace(built, **permuted)

    return build
