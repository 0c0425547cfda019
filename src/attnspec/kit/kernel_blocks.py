"""The block geometry of a tiled kernel, as the kernel properties (test_kernels.py) see it: the
lengths where a kernel's blocks and paths change, and, for a failure, where the wrong rows sit in
its blocks.

A target may declare ``blocks`` (the sizes it tiles queries and keys with) and ``switches`` (the
lengths at which it changes code path); without a declaration the common block sizes below stand
in, so that every target meets a few long sequences.
"""

from __future__ import annotations

import torch

from attnspec.protocol.targets import Target

# Block sizes of common tiled kernels, tried on a target that declares none.
COMMON_BLOCKS = (16, 64)
# The lengths drawn around a block size b: n*b - 1, n*b and n*b + 1 for n = 1 .. BLOCKS_SPANNED.
BLOCKS_SPANNED = 3


def block_sizes(target: Target) -> tuple[int, ...]:
    """The block sizes the properties aim at: the target's own, or COMMON_BLOCKS."""
    return target.blocks or COMMON_BLOCKS


def boundary_lengths(target: Target) -> list[int]:
    """Sequence lengths on the target's boundaries, in increasing order: 1, a block less one, a
    block, a block plus one (and so on up to BLOCKS_SPANNED blocks of each size), and s - 1, s,
    s + 1 for each declared switch s."""
    lengths = {1}
    for size in block_sizes(target):
        for n in range(1, BLOCKS_SPANNED + 1):
            lengths |= {n * size - 1, n * size, n * size + 1}
    for switch in target.switches:
        lengths |= {switch - 1, switch, switch + 1}
    return sorted(n for n in lengths if n >= 1)


def _span(first: int, last: int, size: int, length: int) -> str:
    """'block 1' or 'blocks 0-1 (the last partial: 1 of 16)' for items first..last of a sequence of
    ``length`` cut in blocks of ``size``."""
    lo, hi = first // size, last // size
    blocks = f"block {lo}" if lo == hi else f"blocks {lo}-{hi}"
    partial = length % size and hi == (length - 1) // size
    return blocks + (f" (the last partial: {length % size} of {size})" if partial else "")


def where_in_blocks(wrong: torch.Tensor, tq: int, tk: int, window: int | None, causal: bool, sizes) -> str:
    """Where the wrong query rows (``wrong``: booleans, (Tq,)) sit in blocks of each size in
    ``sizes``, and the keys they see: the words a kernel author looks for (a partial last block, a
    window edge or a causal diagonal inside a key block)."""
    rows = torch.nonzero(wrong).flatten().tolist()
    if not rows:
        return "no row is wrong"
    first, last = rows[0], rows[-1]
    offset = tk - tq
    positions = f"{offset + first}..{offset + last}"
    words = [f"{len(rows)} of {tq} query rows are wrong, queries {first}..{last} at positions {positions}"]
    lo, hi = 0, tk - 1
    if causal:
        lo = 0 if window is None else max(0, offset + first - window + 1)
        hi = min(tk - 1, offset + last)
        words.append(f"they see keys {lo}..{hi} of Tk={tk}" if lo <= hi else "they see no key")
    for size in sizes:
        where = [f"query {_span(first, last, size, tq)}"]
        if lo <= hi:
            where.append(f"key {_span(lo, hi, size, tk)}")
        if causal and window is not None and lo % size:
            where.append(f"the window edge inside key block {lo // size}")
        if causal and offset % size:
            where.append(f"the causal diagonal {offset % size} keys off the block grid")
        words.append(f"in blocks of {size}: " + ", ".join(where))
    return "; ".join(words)


def where_keys_in_blocks(wrong: torch.Tensor, tk: int, sizes) -> str:
    """Where the wrong key rows (``wrong``: booleans, (Tk,)) of a key gradient sit in blocks of each size."""
    keys = torch.nonzero(wrong).flatten().tolist()
    if not keys:
        return "no key row is wrong"
    first, last = keys[0], keys[-1]
    spans = "; ".join(f"in blocks of {size}: key {_span(first, last, size, tk)}" for size in sizes)
    return f"{len(keys)} of {tk} key rows are wrong, keys {first}..{last}; {spans}"
