"""A per-layer KV cache for decoding, one token (or a chunk of tokens) at a time.

The cache stores each layer's keys after RoPE, so a key keeps the rotation of its absolute
position however long it stays.  A full-attention layer keeps every position in a buffer of
``max_len`` slots.  A windowed layer keeps exactly the last W positions in a ring of W slots:
position p lives in slot p % W, and writing position p evicts position p - W.

Decoding is inference: run it under ``torch.no_grad()`` (the buffers are written in place).
"""

from __future__ import annotations

import torch

from .attention import describe
from .masks import check_window


class KVCache:
    """Rotated keys and values of one attention layer, by absolute position 0, 1, 2, ..."""

    def __init__(self, max_len: int, window: int | None = None) -> None:
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got max_len={max_len!r}")
        check_window(window)
        self.max_len = max_len
        self.window = window
        self.reset()

    def reset(self) -> None:
        """Forget every position: the next update starts again at position 0, any batch size."""
        self.length = 0  # positions written so far, which is also the next position
        # keys (B, Hkv, slots, d) and values (B, Hkv, slots, dv), allocated by the first write
        self.buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def held(self) -> int:
        """How many positions the cache holds: all of them, or the last W of a windowed layer."""
        if self.window is None:
            return self.length
        return min(self.length, self.window)

    def positions(self) -> torch.Tensor:
        """The absolute positions held, oldest first, (held,) on the CPU."""
        return torch.arange(self.length - self.held(), self.length)

    def keys_values(self, oldest_first: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys (B, Hkv, held, d) and values (B, Hkv, held, dv) held, oldest first: views of the
        buffers while the oldest sits in slot 0 (which the next write changes), else copies.  With
        ``oldest_first=False`` in slot order (position p in slot p % slots), always the views."""
        if self.buffers is None:
            raise ValueError("the cache is empty: nothing was written since it was made or reset")
        keys, values = self.buffers
        held = self.held()
        oldest = (self.length - held) % keys.shape[2]  # its slot: roll it to the front
        if oldest == 0 or not oldest_first:
            return keys[:, :, :held], values[:, :, :held]
        return keys.roll(-oldest, dims=2), values.roll(-oldest, dims=2)

    def update(
        self, k: torch.Tensor, v: torch.Tensor, offset: int, *, any_order: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store keys (B, Hkv, C, d) and values (B, Hkv, C, dv) for positions offset .. offset+C-1
        and return every key and value that one of these C queries may see, oldest first; the new
        ones come last, so the queries sit bottom-right (CONVENTIONS.md's alignment).

        ``any_order``: the caller's attention does not care in which order a single query's keys come
        (nothing, such as a padding mask, has to line up with them).  One new token then gets them in
        slot order, the buffers themselves: a windowed layer's ring is never copied to roll it."""
        self.check(k, v, offset)
        if self.window is None or k.shape[2] == 1:
            # One new query sees the W positions that end at its own: writing it evicts only the
            # position that just left its window, so the cache then holds exactly what it sees.
            self.write(k, v)
            return self.keys_values(oldest_first=not any_order)
        if self.length == 0:
            self.write(k, v)
            return k, v
        # The first of C new queries still sees positions that writing them may evict: read them
        # first, as a copy (the write reuses their slots).
        old_k, old_v = (held.clone() for held in self.keys_values())
        self.write(k, v)
        return torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)

    def write(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Put the C new positions in their slots; a windowed layer evicts the oldest.  The first
        write allocates buffers shaped like k and v: max_len slots, or W for a windowed layer."""
        if self.buffers is None:
            size = self.max_len if self.window is None else min(self.window, self.max_len)
            self.buffers = (
                k.new_empty(k.shape[0], k.shape[1], size, k.shape[3]),
                v.new_empty(v.shape[0], v.shape[1], size, v.shape[3]),
            )
        keys, values = self.buffers
        # The buffers are a ring: position p lives in slot p % slots (a full layer's never wraps).  The
        # positions kept fill it from the first one's slot to its end, and the rest wraps to slot 0.
        slots, new = keys.shape[2], k.shape[2]
        end = self.length + new
        kept = min(new, slots)  # of a chunk longer than W only the last W stay
        first = (end - kept) % slots
        before_end = min(kept, slots - first)
        for buffer, chunk in ((keys, k[:, :, new - kept :]), (values, v[:, :, new - kept :])):
            buffer[:, :, first : first + before_end] = chunk[:, :, :before_end]
            buffer[:, :, : kept - before_end] = chunk[:, :, before_end:]
        self.length = end

    def check(self, k: torch.Tensor, v: torch.Tensor, offset: int) -> None:
        """Raise a ValueError or TypeError naming what does not fit the cache."""
        for name, t in (("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4:
                raise ValueError(f"{name} must be a 4-D tensor (B, Hkv, T, d), got {describe(t)}")
        if k.shape[:3] != v.shape[:3] or k.dtype != v.dtype or k.device != v.device:
            raise ValueError(f"k and v do not match: k {describe(k)}, v {describe(v)}")
        if k.shape[2] < 1:
            raise ValueError(f"nothing to write: k has 0 positions, {describe(k)}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset != self.length:
            raise ValueError(
                f"offset={offset!r} does not match the cache: it has seen {self.length} positions, "
                f"so the next token is at position {self.length} (reset() to start a new sequence)"
            )
        if offset + k.shape[2] > self.max_len:
            raise ValueError(
                f"the cache is full: positions {offset}..{offset + k.shape[2] - 1} "
                f"exceed max_len={self.max_len}"
            )
        if self.buffers is None:
            return
        keys, values = self.buffers
        for what, got, cached in (
            ("batch size", k.shape[0], keys.shape[0]),
            ("number of KV heads", k.shape[1], keys.shape[1]),
            ("key head_dim", k.shape[3], keys.shape[3]),
            ("value head_dim", v.shape[3], values.shape[3]),
        ):
            if got != cached:
                raise ValueError(f"{what} {got} does not match the cache's {cached} (reset() to start over)")
        if k.dtype != keys.dtype:
            raise TypeError(f"dtype {k.dtype} does not match the cache's {keys.dtype}")
        if k.device != keys.device:
            raise ValueError(f"device {k.device} does not match the cache's {keys.device}")
