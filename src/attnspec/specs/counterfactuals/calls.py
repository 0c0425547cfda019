"""The faults that make attention compute another Call than the one asked for (a scale, a window, a
mask_mod or a score_mod changed): written once as a change of the Call, they hold at the attention
and at the layer level alike."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch

from ..mods import alibi_slopes, bidirectional
from ..oracle import Call
from .cases import (
    ATTENTION_KEYWORDS,
    PER_CALL,
    AttentionCase,
    Counterfactual,
    LayerCase,
    layer_call,
    layer_oracle,
    oracle,
)

# (the call, Tq, Tk, query heads, head size) -> the fields the fault changes, or None where it cannot show
Change = Callable[[Call, int, int, int, int], dict | None]


def called(fault: str, behaves: str, fix: str, change: Change) -> Counterfactual:
    """A fault that makes attention compute another Call than the one asked for: the same at every
    level (the layer's attention takes its window, sinks, scale and mods; a call that is not causal is
    a layer's bidirectional mask_mod)."""

    def attention(case: AttentionCase) -> torch.Tensor | None:
        q, k = case.q, case.k
        changed = change(case.call, q.shape[2], k.shape[2], q.shape[1], q.shape[3])
        return None if changed is None else oracle(case, **changed)

    def layer(case: LayerCase) -> torch.Tensor | None:
        if case.chunks is not None:
            return None  # a decode: the decode faults' own counterfactuals
        seq, layer = case.x.shape[1], case.layer
        changed = change(layer_call(layer), seq, seq, layer["n_heads"], layer["head_dim"])
        if changed is not None:  # a layer has no documents nor padding to drop
            changed = {
                key: value for key, value in changed.items() if key not in PER_CALL or value is not None
            }
        if changed is None or changed.keys() - {*ATTENTION_KEYWORDS, "causal"}:
            return None
        if "causal" in changed:
            if changed.pop("causal"):
                return None  # a layer is causal already
            changed["mask_mod"] = bidirectional
        return layer_oracle(case, **changed)

    return Counterfactual(fault, behaves, fix, attention, layer)


def attention_only(fault: str, behaves: str, fix: str, change: Change) -> Counterfactual:
    """A change of the Call whose layer form conventions.py already names (a layer's scale)."""
    return replace(called(fault, behaves, fix, change), layer=None)


def masked(call: Call) -> bool:
    return call.mask_mod is None and call.causal


def flipped(call: Call, tq: int, tk: int, heads: int, d: int) -> dict | None:
    """The causal triangle mirrored: each query sees itself and the keys after it (the band too)."""
    if not masked(call):
        return None
    window = call.window

    def flipped(b, h, q_idx, kv_idx):
        seen = kv_idx >= q_idx
        return seen if window is None else seen & (kv_idx < q_idx + window)

    return {"mask_mod": flipped}


def band_flipped(call: Call, tq: int, tk: int, heads: int, d: int) -> dict | None:
    """The window's lower bound flipped: each query sees the earlier keys outside its window instead of
    those inside (j < p - W for j > p - W)."""
    if not masked(call) or call.window is None:
        return None
    window = call.window

    def outside(b, h, q_idx, kv_idx):
        return kv_idx < q_idx - window

    return {"mask_mod": outside}


def documents_leak(call: Call, tq: int, tk: int, heads: int, d: int) -> dict | None:
    """Each document's queries also see the previous document's last token."""
    if call.document_ids is None or call.mask_mod is not None:
        return None
    ids = call.document_ids.detach().cpu()
    starts = torch.tensor(
        [[int((row == row[p]).nonzero()[0]) for p in range(ids.shape[1])] for row in ids], dtype=torch.int64
    )
    causal, window = call.causal, call.window

    def leaking(b, h, q_idx, kv_idx):
        p = q_idx.clamp(min=0)
        same = (ids[b, p] == ids[b, kv_idx]) | (kv_idx == starts[b, p] - 1)
        if not causal:
            return same
        seen = same & (kv_idx <= q_idx)
        return seen if window is None else seen & (kv_idx > q_idx - window)

    return {"document_ids": None, "mask_mod": leaking}


def scaled_after_the_mod(call: Call, tq: int, tk: int, heads: int, d: int) -> dict | None:
    if call.score_mod is None:
        return None
    scale = 1.0 / math.sqrt(d) if call.scale is None else call.scale
    mod = call.score_mod

    def before_the_scale(score, b, h, q_idx, kv_idx):
        return scale * mod(score / scale, b, h, q_idx, kv_idx)

    return {"score_mod": before_the_scale}


def mirrored(call: Call, tq: int, tk: int, heads: int, d: int) -> dict | None:
    """The score_mod given the query's and key's positions the other way round: a bias of j - p read
    as p - j (ALiBi's sign flipped, T5's buckets mirrored)."""
    mod = call.score_mod
    if mod is None:
        return None

    def mirrored(score, b, h, q_idx, kv_idx):
        return mod(score, b, h, kv_idx, q_idx)

    return {"score_mod": mirrored}


def mask_counted_from_one(call: Call, tq: int, tk: int, heads: int, d: int) -> dict | None:
    mod = call.mask_mod
    if mod is None or mod is bidirectional:
        return None

    def from_one(b, h, q_idx, kv_idx):
        return mod(b, h, q_idx + 1, kv_idx + 1)

    return {"mask_mod": from_one}


def shifted_documents(step: int) -> Change:
    """Each document boundary ``step`` tokens early (-1) or late (+1): a token of each document counted
    in its neighbour (cu_seqlens off by one)."""

    def change(call: Call, tq: int, tk: int, heads: int, d: int) -> dict | None:
        ids = call.document_ids
        if ids is None:
            return None
        shifted = (
            torch.cat([ids[:, 1:], ids[:, -1:]], 1) if step < 0 else torch.cat([ids[:, :1], ids[:, :-1]], 1)
        )
        return {"document_ids": shifted}

    return change


def heads_reversed(call: Call, tq: int, tk: int, heads: int, d: int) -> dict | None:
    mod = call.score_mod
    if mod is None or heads < 2:
        return None

    def reversed_heads(score, b, h, q_idx, kv_idx):
        return mod(score, b, heads - 1 - h, q_idx, kv_idx)

    return {"score_mod": reversed_heads}


def slopes_for(counted: Callable[[int], list[float]]) -> Change:
    """ALiBi's bias with the slopes ``counted(H)`` gives, for a call whose mod is ALiBi's (its slopes
    known: mods.alibi)."""

    def change(call: Call, tq: int, tk: int, heads: int, d: int) -> dict | None:
        slopes = getattr(call.score_mod, "slopes", None)
        if slopes is None:
            return None
        wrong = torch.as_tensor(counted(len(slopes)), dtype=torch.float64)[: len(slopes)]
        if wrong.shape != slopes.shape or torch.allclose(wrong, slopes):
            return None

        def alibi(score, b, h, q_idx, kv_idx):
            return score + wrong.to(score.dtype)[h] * (kv_idx - q_idx).to(score.dtype)

        return {"score_mod": alibi}

    return change


def power_of_two_slopes(n: int) -> list[float]:
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


def extra_slopes_first(n: int) -> list[float]:
    power = 2 ** math.floor(math.log2(n))
    slopes = alibi_slopes(n)
    return slopes[power:] + slopes[:power]


def next_power_of_two_slopes(n: int) -> list[float]:
    return alibi_slopes(2 ** math.ceil(math.log2(n)))
