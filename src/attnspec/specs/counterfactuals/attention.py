"""The faults of attention's own arithmetic, spelled out with the oracle's pieces: the mask filled with
0 or applied after the softmax, a score_mod applied after the mask, the softmax over the queries."""

from __future__ import annotations

import math

import torch

from ..mods import score_values
from ..oracle import GOLDEN, per_query_head, visible_for
from .cases import AttentionCase


def _logits(case: AttentionCase, modded: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q.k * scale (B, Hq, Tq, Tk), through the call's score_mod where ``modded``; the values per query
    head; the visible keys) in float64."""
    q, k, v = (t.detach().cpu().to(GOLDEN) for t in (case.q, case.k, case.v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if case.call.scale is None else case.call.scale
    visible = visible_for(q, k, case.call).expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    logits = (q @ per_query_head(k, q.shape[1]).mT) * scale
    if modded and case.call.score_mod is not None:
        logits = score_values(case.call.score_mod, logits)
    return logits, per_query_head(v, q.shape[1]), visible


def _weights(logits: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """softmax(logits, sink column) without the sink's column; a row of NaN stays NaN."""
    if sinks is not None:
        column = sinks.detach().cpu().to(GOLDEN)[None, :, None, None].expand(*logits.shape[:3], 1)
        return torch.softmax(torch.cat([logits, column], dim=-1), dim=-1)[..., :-1]
    return torch.softmax(logits, dim=-1)


def mod_after_the_mask(case: AttentionCase) -> torch.Tensor | None:
    """The score_mod applied to the masked logits: a hidden key's -inf becomes mod(-inf) (a soft-cap's
    -cap), so it gets weight."""
    mod = case.call.score_mod
    if mod is None:
        return None
    logits, values, visible = _logits(case, modded=False)
    hidden = score_values(mod, torch.full_like(logits, -math.inf))
    if visible.all() or bool((hidden[~visible] == -math.inf).all()):
        return None
    modded = torch.where(visible, score_values(mod, logits), hidden)
    return _weights(modded, case.call.sinks) @ values


def hidden_logits_zero(case: AttentionCase) -> torch.Tensor | None:
    """The hidden keys' logits set to 0 (masked_fill(~mask, 0) for -inf): they weigh like a key with a
    zero score."""
    logits, values, visible = _logits(case)
    if visible.all():
        return None
    return _weights(torch.where(visible, logits, 0.0), case.call.sinks) @ values


def mask_after_the_softmax(case: AttentionCase) -> torch.Tensor | None:
    """The softmax over the whole row, the mask applied to the weights after it: each row normalised
    over the keys it may not see too (its weights sum to less than 1)."""
    logits, values, visible = _logits(case)
    if visible.all():
        return None
    return torch.where(visible, _weights(logits, case.call.sinks), 0.0) @ values


def softmax_over_queries(case: AttentionCase) -> torch.Tensor | None:
    """The softmax taken over the queries of each key (dim=-2), hidden keys at -inf: a key no query
    sees weighs nothing."""
    if case.call.sinks is not None or case.q.shape[2] < 2:
        return None
    logits, values, visible = _logits(case)
    weights = torch.softmax(torch.where(visible, logits, -math.inf), dim=-2).nan_to_num(0.0)
    return weights @ values
