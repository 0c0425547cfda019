"""The memory layouts a target's q, k and v come in: those model code hands attention.

Model code calls attention on ``view(B, T, H, d).transpose(1, 2)`` results (their memory is laid out
(B, T, H, d)), and on keys and values cut out of a longer cache buffer.  A kernel that reads its
inputs as if they were contiguous (a Triton kernel that computes offsets from the shape, not the
strides) computes garbage on them.  So each call of an attention target gets its inputs in one of
LAYOUTS, the same values with other strides, chosen by the call's shapes (the same call always gets
the same layout: Hypothesis replays a failing example exactly).  A target that needs contiguous
inputs declares it, ``attention.needs_contiguous = True``, and gets them contiguous.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator

import torch

LAYOUTS = ("contiguous", "heads after positions", "inside a longer buffer")


def heads_after_positions(x: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, d) as the view a (B, T, H, d) tensor transposed gives."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def inside_a_longer_buffer(x: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, d) as the first T positions of a buffer with room for 3 more (a cache's keys)."""
    room = x.new_zeros(*x.shape[:2], 3, x.shape[3])
    return torch.cat([x, room], dim=2)[:, :, : x.shape[2]]


RELAY = {"heads after positions": heads_after_positions, "inside a longer buffer": inside_a_longer_buffer}


def layout_for(q: torch.Tensor, k: torch.Tensor) -> str:
    """The layout of a call with these shapes: each of LAYOUTS in turn as the sizes vary."""
    return LAYOUTS[(sum(q.shape) + sum(k.shape)) % len(LAYOUTS)]


def layout_of(x: torch.Tensor) -> str:
    """In words, the layout a tensor of the kit's is in (for a failing call's description)."""
    if x.is_contiguous():
        return "contiguous"
    return "heads after positions" if x.stride(1) < x.stride(2) else "inside a longer buffer"


_AS_GIVEN = contextvars.ContextVar("as_given", default=False)


@contextlib.contextmanager
def as_given() -> Iterator[None]:
    """Calls of a laid-out target get their inputs as they are passed (contiguous ones stay so)."""
    token = _AS_GIVEN.set(True)
    try:
        yield
    finally:
        _AS_GIVEN.reset(token)


def laid_out(attention: Callable) -> Callable:
    """``attention``, called with q, k and v in the layout of their shapes (layout_for).  Inputs that
    come already strided (a property's own views) are passed as they are, and so is everything
    inside ``as_given()``."""

    @functools.wraps(attention)
    def laying_out(q, k, v, *args, **kwargs):
        tensors = (q, k, v)
        contiguous = all(isinstance(t, torch.Tensor) and t.dim() == 4 and t.is_contiguous() for t in tensors)
        if contiguous and not _AS_GIVEN.get():
            layout = layout_for(q, k)
            if layout in RELAY:
                q, k, v = (RELAY[layout](t) for t in tensors)
        return attention(q, k, v, *args, **kwargs)

    return laying_out
