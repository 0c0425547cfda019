"""The faults of attention's own arithmetic, spelled out with the oracle's pieces: the mask filled with
0 or applied after the softmax, a score_mod applied after the mask, the softmax over the queries."""

from __future__ import annotations

import math

import torch

from ..mods import score_values
from ..oracle import GOLDEN, visible_for
from .cases import AttentionCase


def _logits(case: AttentionCase) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """(q.k * scale (B, Hq, Tq, Tk), the values per query head, the visible keys, the scale) in float64."""
    q, k, v = (t.detach().cpu().to(GOLDEN) for t in (case.q, case.k, case.v))
    group = q.shape[1] // k.shape[1]
    heads = [h // group for h in range(q.shape[1])]
    scale = 1.0 / math.sqrt(q.shape[-1]) if case.call.scale is None else case.call.scale
    visible = visible_for(q, k, case.call).expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return (q @ k[:, heads].mT) * scale, v[:, heads], visible, scale


def _weighted(logits: torch.Tensor, values: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """softmax(logits, sink column) @ values, row by row; a row of NaN stays NaN."""
    if sinks is not None:
        column = sinks.detach().cpu().to(GOLDEN)[None, :, None, None].expand(*logits.shape[:3], 1)
        logits = torch.cat([logits, column], dim=-1)
    weights = torch.softmax(logits, dim=-1)[..., : values.shape[2]]
    return weights @ values


def mod_after_the_mask(case: AttentionCase) -> torch.Tensor | None:
    """The score_mod applied to the masked logits: a hidden key's -inf becomes mod(-inf) (a soft-cap's
    -cap), so it gets weight."""
    mod = case.call.score_mod
    if mod is None:
        return None
    logits, values, visible, _ = _logits(case)
    hidden = score_values(mod, torch.full_like(logits, -math.inf))
    if visible.all() or bool((hidden[~visible] == -math.inf).all()):
        return None
    modded = torch.where(visible, score_values(mod, logits), hidden)
    return _weighted(modded, values, case.call.sinks)


def hidden_logits_zero(case: AttentionCase) -> torch.Tensor | None:
    """The hidden keys' logits set to 0 (masked_fill(~mask, 0) for -inf): they weigh like a key with a
    zero score."""
    logits, values, visible, _ = _logits(case)
    if visible.all():
        return None
    if case.call.score_mod is not None:
        logits = score_values(case.call.score_mod, logits)
    return _weighted(torch.where(visible, logits, 0.0), values, case.call.sinks)


def mask_after_the_softmax(case: AttentionCase) -> torch.Tensor | None:
    """The softmax over the whole row, the mask applied to the weights after it: each row normalised
    over the keys it may not see too (its weights sum to less than 1)."""
    logits, values, visible, _ = _logits(case)
    if visible.all():
        return None
    if case.call.score_mod is not None:
        logits = score_values(case.call.score_mod, logits)
    if case.call.sinks is not None:
        column = case.call.sinks.detach().cpu().to(GOLDEN)[None, :, None, None].expand(*logits.shape[:3], 1)
        logits = torch.cat([logits, column], dim=-1)
    weights = torch.softmax(logits, dim=-1)[..., : values.shape[2]]
    return torch.where(visible, weights, 0.0) @ values


def softmax_over_queries(case: AttentionCase) -> torch.Tensor | None:
    """The softmax taken over the queries of each key (dim=-2), hidden keys at -inf: a key no query
    sees weighs nothing."""
    if case.call.sinks is not None or case.q.shape[2] < 2:
        return None
    logits, values, visible, _ = _logits(case)
    if case.call.score_mod is not None:
        logits = score_values(case.call.score_mod, logits)
    weights = torch.softmax(torch.where(visible, logits, -math.inf), dim=-2).nan_to_num(0.0)
    return weights @ values
