"""The call into the target in flight, where the check's process can read it.

`attnspec check` runs the properties in worker processes (attnspec/runner/parallel.py).  When a worker dies
or stops answering, its memory is gone or unreachable, so what it was doing has to be written down
before it does it: each worker gets a slot in memory shared with the check's process, and every call
into the target (an attention function, through its recording wrapper; a module, through torch's
global module hooks) writes when it started and the call in words there, and clears it once the call
returns or raises.  The check's process reads the slot to tell a hang (one call running longer than
--timeout) from a slow property, and to say on which case a worker crashed.

Outside a worker (the kit's own suite, pytest without isolation) there is no slot, and a call costs
one test of a global.
"""

from __future__ import annotations

import mmap
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: `attnspec --help` does not wait for it
    import torch

HEADER = struct.Struct("<dI")  # when the outermost call in flight started (0: none), how deep it is
WORDS = 400  # bytes of the call in words
SIZE = HEADER.size + WORDS


class Slots:
    """One slot per worker, in anonymous memory shared across fork()."""

    def __init__(self, count: int) -> None:
        self.memory = mmap.mmap(-1, SIZE * max(count, 1))

    def slot(self, index: int) -> Slot:
        return Slot(self.memory, index * SIZE)


class Slot:
    def __init__(self, memory: mmap.mmap, offset: int) -> None:
        self.memory = memory
        self.offset = offset

    def clear(self) -> None:
        HEADER.pack_into(self.memory, self.offset, 0.0, 0)

    def enter(self, words: Callable[[], str]) -> None:
        started, depth = HEADER.unpack_from(self.memory, self.offset)
        if depth == 0:  # the outermost call: a module's own submodules are part of it
            text = words().encode()[:WORDS].ljust(WORDS, b"\0")
            self.memory[self.offset + HEADER.size : self.offset + SIZE] = text
            started = time.monotonic()
        HEADER.pack_into(self.memory, self.offset, started, depth + 1)

    def leave(self) -> None:
        started, depth = HEADER.unpack_from(self.memory, self.offset)
        depth = max(depth - 1, 0)
        HEADER.pack_into(self.memory, self.offset, started if depth else 0.0, depth)

    def in_flight(self) -> tuple[float, str] | None:
        """(seconds the call has run, the call in words), or None when no call is in flight, or when the
        worker is writing the slot just now: a read across its write can pair a new depth with the old
        start of 0 (a call running since boot, once a false hang on a correct target in 220 checks), so
        the header must read the same twice and hold a start."""
        started, depth = HEADER.unpack_from(self.memory, self.offset)
        if not depth or started <= 0.0 or HEADER.unpack_from(self.memory, self.offset) != (started, depth):
            return None
        words = bytes(self.memory[self.offset + HEADER.size : self.offset + SIZE]).rstrip(b"\0")
        return time.monotonic() - started, words.decode(errors="replace")


SLOT: Slot | None = None  # this worker's; None outside one


def use(slot: Slot) -> None:
    """This process is a worker writing its calls to ``slot``: the target's attention calls say so
    through ``watched``, every module call through torch's global module hooks."""
    import torch

    global SLOT
    SLOT = slot
    slot.clear()
    torch.nn.modules.module.register_module_forward_pre_hook(_module_entered)
    torch.nn.modules.module.register_module_forward_hook(_module_left, always_call=True)


@contextmanager
def watched(words: Callable[[], str]) -> Iterator[None]:
    """A call into the target, described by ``words()`` (called only where a slot is written)."""
    slot = SLOT
    if slot is None:
        yield
        return
    slot.enter(words)
    try:
        yield
    finally:
        slot.leave()


def _module_entered(module: torch.nn.Module, args: tuple) -> None:
    if SLOT is not None:
        SLOT.enter(lambda: f"{type(module).__name__}({', '.join(brief(a) for a in args)})")


def _module_left(module: torch.nn.Module, args: tuple, output: object) -> None:
    if SLOT is not None:
        SLOT.leave()


def brief(value: object) -> str:
    """An argument in a few words: a tensor by its shape and dtype."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    return repr(value)[:40]
