"""Attention masks: causal, sliding-window band, bottom-right alignment, layer schedule.

Convention (CONVENTIONS.md): a mask is boolean and True means "may attend".  Queries are
aligned bottom-right: with Tq queries over Tk keys, query i sits at absolute position
Tk - Tq + i.  With a window W, that query sees key j iff  pos - W < j <= pos.
"""

from __future__ import annotations

import math

import torch

WINDOW_LAYERS = ("even", "all")


def check_window(window: int | None) -> None:
    """Raise unless ``window`` is None (full attention) or an int >= 1."""
    if window is None:
        return
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window must be an int or None, got {type(window).__name__} {window!r}")
    if window < 1:
        raise ValueError(f"window must be >= 1 (W keys including the query itself), got window={window}")


def check_mask_options(causal: bool, window: int | None) -> None:
    """Raise unless ``window`` is valid and, when it is not None, ``causal`` is True."""
    check_window(window)
    if window is not None and not causal:
        raise ValueError(f"a sliding window is causal: got window={window} with causal={causal}")


def attention_mask(
    tq: int,
    tk: int,
    *,
    causal: bool = True,
    window: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Boolean (tq, tk) mask, True where query i may attend key j."""
    check_mask_options(causal, window)
    if tq < 1 or tk < 1:
        raise ValueError(f"mask sizes must be >= 1, got tq={tq}, tk={tk}")
    if not causal:
        return torch.ones(tq, tk, dtype=torch.bool, device=device)
    query_pos = torch.arange(tk - tq, tk, device=device).unsqueeze(1)  # (tq, 1), bottom-right
    key_pos = torch.arange(tk, device=device).unsqueeze(0)  # (1, tk)
    allowed = key_pos <= query_pos
    if window is not None:
        allowed = allowed & (key_pos > query_pos - window)
    return allowed


def additive_mask(allowed: torch.Tensor) -> torch.Tensor:
    """The additive form M of a boolean mask: 0 where allowed, -inf where masked (float32).

    0 and -inf are exact in every float dtype, and adding M promotes half-precision scores
    to float32, which is where the softmax runs anyway."""
    return torch.zeros_like(allowed, dtype=torch.float32).masked_fill(~allowed, -math.inf)


def layer_window(layer_idx: int, window: int | None, window_layers: str = "even") -> int | None:
    """The window a layer uses: ``window`` on even layers (or on all), full attention elsewhere."""
    if window_layers not in WINDOW_LAYERS:
        raise ValueError(f"window_layers must be one of {WINDOW_LAYERS}, got {window_layers!r}")
    if window_layers == "all":
        return window
    if layer_idx % 2 == 0:
        return window
    return None
