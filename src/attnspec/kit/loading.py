"""The target of a run, loaded as the kit checks it: its declaration checked and translated
(attnspec/protocol/declared.py), and its attention's calls recorded, for a failure's reproducer
(recording.py), with its inputs in the memory layouts model code hands attention
(attnspec/protocol/memory_layouts.py)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import replace

from attnspec.kit.recording import recorded
from attnspec.protocol import declared, interpreted
from attnspec.protocol.memory_layouts import laid_out
from attnspec.protocol.targets import DEVICE_ENV, ENV, Target, as_target, resolve


def load(name: str) -> Target:
    """The target called ``name``: a built-in adapter or "package.module:object"; a user's Triton kernels
    interpreted in a run on the CPU (protocol/interpreted.py)."""
    device = os.environ.get(DEVICE_ENV, "cpu")
    interpreted.prepare(device)
    before = set(sys.modules)
    made = resolve(name)
    own = getattr(made, "__module__", None) or ""
    loaded = [
        module
        for key, module in list(sys.modules.items())
        if (key not in before or key == own) and module is not None
        and not key.startswith(("triton", "torch"))
    ]
    interpreted.found(loaded, device)  # its Triton kernels, if any: interpreted on the CPU
    target = as_target(name, made)
    problems = declared.problems(target)
    if problems:
        raise ValueError("; ".join(problems))
    target = declared.translated(target)
    if target.attention is None or name == "impl":
        return target
    attention = recorded(target.attention)  # a failure's calls, for its reproducer
    # the inputs in the memory layouts model code produces, unless it needs contiguous ones
    return replace(target, attention=attention if target.needs_contiguous else laid_out(attention))


_current: Target | None = None


def current() -> Target:
    """The target of this run (``$ATTNSPEC_IMPL``, which --impl sets; impl/ by default)."""
    global _current
    name = os.environ.get(ENV, "impl") or "impl"
    if _current is None or _current.name != name:
        _current = load(name)
    return _current


@contextlib.contextmanager
def running(target: Target) -> Iterator[Target]:
    """``target`` as the run's target (what current() returns) inside the block: the diagnosis of a
    target built in the process (a declared variant of impl/, for the main job's grading)."""
    global _current
    saved, name = _current, os.environ.get(ENV)
    _current = target
    os.environ[ENV] = target.name
    try:
        yield target
    finally:
        _current = saved
        if name is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = name
