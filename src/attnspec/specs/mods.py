"""Declared score and mask modifications, in PyTorch FlexAttention's vocabulary, and the reference ones.

A target declares what its attention computes beyond softmax(q.k * scale) with two functions:

    score_mod(score, b, h, q_idx, kv_idx) -> score     the scaled logit, modified (soft-capping, a bias)
    mask_mod(b, h, q_idx, kv_idx) -> bool              True where query q_idx may see key kv_idx

b is the batch element, h the query head, and the positions count as attnspec aligns them: key j at
position j, query i of Tq over Tk keys at position Tk - Tq + i (bottom-right).  FlexAttention calls
mods under ``torch.vmap`` with 0-d tensors; users also write them for index grids.  ``evaluate``
accepts both: it calls a mod once on broadcast index tensors, b (B, 1, 1, 1), h (1, H, 1, 1),
q_idx (1, 1, Tq, 1), kv_idx (1, 1, 1, Tk), and where that raises, per element (under vmap, and
then one call at a time), and broadcasts whatever shape the mod returns to (B, H, Tq, Tk).

The reference mods at the end (soft_cap, alibi, ...) are written from their formulas: the oracle of
impl's own variants, independent of impl/.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

ScoreMod = Callable[..., torch.Tensor]
MaskMod = Callable[..., torch.Tensor]


class ModError(ValueError):
    """A mod that cannot be evaluated in any form (broadcast, vmap, per element)."""


def index_grid(batch: int, n_heads: int, tq: int, tk: int) -> tuple[torch.Tensor, ...]:
    """(b, h, q_idx, kv_idx): int64 index tensors that broadcast to (B, H, Tq, Tk), queries at the
    bottom-right positions Tk - Tq .. Tk - 1."""
    b = torch.arange(batch).view(-1, 1, 1, 1)
    h = torch.arange(n_heads).view(1, -1, 1, 1)
    q_idx = torch.arange(tk - tq, tk).view(1, 1, -1, 1)
    kv_idx = torch.arange(tk).view(1, 1, 1, -1)
    return b, h, q_idx, kv_idx


def _name(mod: Callable) -> str:
    return getattr(mod, "__name__", None) or type(mod).__name__


def _broadcast(value: object, shape: torch.Size, like: torch.Tensor) -> torch.Tensor:
    out = torch.as_tensor(value)
    return torch.broadcast_to(out.to(like.device), shape)


def evaluate(mod: Callable, args: tuple[torch.Tensor, ...], shape: torch.Size) -> torch.Tensor:
    """``mod(*args)`` over the whole grid ``shape``: called once on the broadcast arguments, or where
    that raises, per element (vmap over the flattened grid, then a Python loop); the result is
    broadcast to ``shape``.  ModError when no form works (the per-element error is the one shown)."""
    like = args[0]
    try:
        return _broadcast(mod(*args), shape, like)
    except Exception:  # a mod written for 0-d tensors: branch on a value, int(), .item() ...
        pass
    flat = [torch.broadcast_to(a, shape).reshape(-1) for a in args]
    try:
        return _broadcast(torch.vmap(mod)(*flat), torch.Size([flat[0].numel()]), like).reshape(shape)
    except Exception:
        pass
    try:
        values = [torch.as_tensor(mod(*(a[n] for a in flat))) for n in range(flat[0].numel())]
        return torch.stack(values).reshape(shape) if values else torch.zeros(shape, dtype=like.dtype)
    except Exception as error:
        why = f"{type(error).__name__}: {error}"
        raise ModError(f"{_name(mod)} cannot be evaluated on an index grid: {why}") from error


def mask_values(mask_mod: MaskMod, batch: int, n_heads: int, tq: int, tk: int) -> torch.Tensor:
    """(B, H, Tq, Tk) bool: where ``mask_mod`` lets each query see each key (queries bottom-right)."""
    grid = index_grid(batch, n_heads, tq, tk)
    return evaluate(mask_mod, grid, torch.Size([batch, n_heads, tq, tk])).bool()


def score_values(score_mod: ScoreMod, scores: torch.Tensor) -> torch.Tensor:
    """``score_mod`` of each scaled logit in ``scores`` (B, H, Tq, Tk, on the CPU), in their dtype."""
    grid = index_grid(*scores.shape)
    return evaluate(score_mod, (scores, *grid), scores.shape).to(scores.dtype)


def score_slopes(score_mod: ScoreMod, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(score_mod(scores), d score_mod / d score) elementwise, the derivative by autograd in the dtype of
    ``scores``: what the oracle's gradients and the tolerance's conditioning carry through the mod.  A
    mod that does not depend on the score (a mask written as a score_mod) has slope 0."""
    with torch.enable_grad():
        s = scores.detach().clone().requires_grad_(True)
        values = score_values(score_mod, s)
        if not values.requires_grad:
            return values.detach(), torch.zeros_like(scores)
        (slope,) = torch.autograd.grad(values.sum(), s, allow_unused=True)
    return values.detach(), torch.zeros_like(scores) if slope is None else slope.detach()


def same_document(document_ids: torch.Tensor, tq: int) -> torch.Tensor:
    """(B, Tq, Tk) bool: query i (at position Tk - Tq + i) and key j lie in one document of
    ``document_ids`` (B, Tk); a query at a position before the first key (Tq > Tk) lies in the first
    key's document, so that one document is the same as none (a causal mask hides every key from it)."""
    ids = document_ids.detach().cpu()
    tk = ids.shape[1]
    positions = (torch.arange(tq) + tk - tq).clamp(min=0)
    return ids[:, positions, None] == ids[:, None, :]


# --- the reference mods of impl's variants, from their formulas ------------------------------------


def bidirectional(b, h, q_idx, kv_idx):
    """An encoder's mask: every query sees every key (an encoder's ``OBJ.mask_mod``)."""
    return kv_idx >= 0


def causal(b, h, q_idx, kv_idx):
    """The causal mask: a query sees its own position and every earlier one."""
    return kv_idx <= q_idx


def sliding_window(window: int) -> MaskMod:
    """A causal sliding window of W keys, the query's own included: q - W < kv <= q."""

    def sliding_window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx > q_idx - window)

    sliding_window.__qualname__ = f"sliding_window({window})"
    return sliding_window


def chunked(size: int) -> MaskMod:
    """Chunked attention (Llama 4's): the positions cut into blocks of ``size`` from 0, a query sees the
    keys of its own block up to itself."""

    def chunked(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (
            torch.div(q_idx, size, rounding_mode="floor") == torch.div(kv_idx, size, rounding_mode="floor")
        )

    chunked.__qualname__ = f"chunked({size})"
    return chunked


def local(radius: int) -> MaskMod:
    """A bidirectional local window (ModernBERT's local layers): a query sees the keys at most
    ``radius`` positions away on either side, |q - kv| <= radius."""

    def local(b, h, q_idx, kv_idx):
        return (kv_idx - q_idx).abs() <= radius

    local.__qualname__ = f"local({radius})"
    return local


def shifted(mask_mod: MaskMod, offset: int) -> MaskMod:
    """``mask_mod`` of positions counted from ``offset``: a layer's tokens 0 .. T-1 at positions offset ..,
    for a mask that depends on where a token is, not only on distances (chunked attention)."""
    if not offset:
        return mask_mod

    def at_offset(b, h, q_idx, kv_idx):
        return mask_mod(b, h, q_idx + offset, kv_idx + offset)

    at_offset.__qualname__ = getattr(mask_mod, "__qualname__", "mask_mod")
    return at_offset


def reach(masks: list[torch.Tensor]) -> torch.Tensor:
    """(T, T) bool: which inputs each output of a stack of layers depends on, the layers' masks (T, T)
    (query, key) in order: through each layer's residual an output keeps what its own position reached,
    and through its attention it gathers what every key it sees reached."""
    if not masks:
        raise ValueError("reach of no layers")
    seen = torch.eye(masks[0].shape[-1], dtype=torch.bool)
    for mask in masks:
        seen = ((mask | torch.eye(mask.shape[-1], dtype=torch.bool)).double() @ seen.double()) > 0
    return seen


def soft_cap(cap: float) -> ScoreMod:
    """Logit soft-capping (Gemma 2): cap * tanh(score / cap), on the scaled logit, before any mask."""

    def soft_cap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    soft_cap.__qualname__ = f"soft_cap({cap:g})"  # how messages name it
    soft_cap.cap = cap  # type: ignore[attr-defined]  # what the diagnosis's counterfactuals read
    return soft_cap


def alibi_slopes(n_heads: int) -> list[float]:
    """ALiBi's slope of each head (Press et al.): for H a power of two, head h (from 0) has
    2^(-8 (h + 1) / H).  Otherwise the H' = 2^floor(log2 H) slopes of H', then the odd-numbered
    slopes 1, 3, 5, ... of 2 H' (2^(-4 (2m + 1) / H')), as many as the heads left."""
    first = 2 ** math.floor(math.log2(n_heads))
    slopes = [2.0 ** (-8.0 * (h + 1) / first) for h in range(first)]
    for m in range(n_heads - first):
        slopes.append(2.0 ** (-4.0 * (2 * m + 1) / first))
    return slopes


def alibi(slopes: list[float] | torch.Tensor) -> ScoreMod:
    """ALiBi: the scaled logit plus slope_h * (kv_idx - q_idx), a penalty linear in the distance to
    every earlier key (and a bonus to later ones, which a causal mask hides)."""
    table = torch.as_tensor(slopes, dtype=torch.float64)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + table.to(score.dtype)[h] * (kv_idx - q_idx).to(score.dtype)

    alibi.__qualname__ = f"alibi({len(table)} heads)"  # how messages name it
    alibi.slopes = table  # type: ignore[attr-defined]  # what the diagnosis's counterfactuals read
    return alibi


def composed(*mods: ScoreMod | None) -> ScoreMod | None:
    """One score_mod that applies ``mods`` in order (None: no mod at all)."""
    used = [mod for mod in mods if mod is not None]
    if not used:
        return None
    if len(used) == 1:
        return used[0]

    def composed(score, b, h, q_idx, kv_idx):
        for mod in used:
            score = mod(score, b, h, q_idx, kv_idx)
        return score

    return composed
