"""What a target does outside its call protocol that would otherwise end the run or fail every property
unexplained, turned into a failure of the call it did it in:

- raising KeyboardInterrupt, SystemExit or another BaseException that is not an Exception (pytest and
  Hypothesis let those through to stop the whole run: a worker of `attnspec check` would die with a
  traceback of the kit's internals, and the verdict would blame no call);
- returning something other than a tensor (``(out, weights)`` with ``return_weights=True``) after a
  first call that returned one.

A real Ctrl-C (or SIGTERM) is told apart from a target that raises KeyboardInterrupt by the signals this
process was sent (``listen``): the workers of `attnspec check` ignore SIGINT, so there every
KeyboardInterrupt is the target's.
"""

from __future__ import annotations

import signal
import traceback
from collections.abc import Callable

from attnspec.kit.frames import raised_at

SIGNALLED: list[int] = []  # the interrupting signals this process got while listening


class Breach(Exception):
    """A call of the target that broke the protocol, in words: one line, said once for the run."""


def listen() -> None:
    """Note every SIGINT and SIGTERM this process gets, before its handler (pytest's, `attnspec check`'s)
    runs; idempotent, and nothing for a signal that is ignored or handled outside Python."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if not callable(handler) or getattr(handler, "attnspec_listening", False):
            continue
        signal.signal(signum, _noting(handler))


def _noting(handler: Callable) -> Callable:
    def noting(signum: int, frame: object) -> object:
        SIGNALLED.append(signum)
        return handler(signum, frame)

    noting.attnspec_listening = True  # type: ignore[attr-defined]
    return noting


def escaped(error: BaseException, call: str) -> Breach | None:
    """The failure to raise in place of ``error``, raised by the target on ``call`` (in words), where
    it would end the run (not an Exception, not pytest's own outcome, not a real interrupt); else None."""
    from _pytest.outcomes import OutcomeException

    if isinstance(error, (Exception, OutcomeException, GeneratorExit)):
        return None
    if isinstance(error, KeyboardInterrupt) and SIGNALLED:
        return None  # Ctrl-C, or SIGTERM: the run stops
    raised = f"{type(error).__name__}({', '.join(map(repr, error.args))})"
    at = _raised_at(error)
    # (what it did before " on ": the run report says it once for every property it failed)
    return Breach(f"the target raised {raised}{at} (no Exception: it would stop the run) on {call}")


def _raised_at(error: BaseException) -> str:
    where = raised_at(traceback.extract_tb(error.__traceback__))
    return f" at {where}" if where else ""


def wrong_return(result: object, keywords: dict, call: str) -> Breach | None:
    """The failure of a call that returned ``result`` where the protocol wants a tensor, or a pair of
    tensors with ``return_weights=True`` (the first call, which the kit checks before any property, did);
    None where it returned that."""
    import torch

    if keywords.get("return_weights"):
        pair = isinstance(result, tuple) and len(result) == 2
        ok = pair and all(isinstance(x, torch.Tensor) for x in result)
        due = "a pair (out, weights) of tensors"
    else:
        ok = isinstance(result, torch.Tensor)
        due = "a tensor"
    if ok:
        return None
    return Breach(f"the target returned {_kind(result)} where {due} is due on {call}")


def _kind(value: object) -> str:
    """A returned value in a few words: its type, and a tuple's length (no shape: the run report says
    each kind once, with the first call)."""
    name = type(value).__module__.replace("builtins", "").rstrip(".")
    name = f"{name}.{type(value).__qualname__}" if name else type(value).__qualname__
    if isinstance(value, (tuple, list)):
        return f"a {name} of {len(value)}"
    return f"a {name}"
