"""The target's calls, recorded as the properties make them: the last few, for a failure's reproducer
(reproducers.py), and the one in flight, for a crash or a hang (in_flight.py); and a call in words."""

from __future__ import annotations

import contextlib
import functools
from collections import deque
from collections.abc import Callable, Iterator

import torch

from attnspec.kit import breaches, in_flight
from attnspec.protocol.memory_layouts import layout_of

KEPT = 8  # calls kept: the calls of one example of any property
CALLS: deque[tuple[tuple, dict]] = deque(maxlen=KEPT)
TYPES_CHECKED = True  # what a call returns is checked here (not while the first call is probed: as_returned)


def recorded(attention: Callable) -> Callable:
    """``attention``, keeping each call's arguments in CALLS."""

    @functools.wraps(attention)
    def recording(*args, **kwargs):
        CALLS.append((args, kwargs))
        try:
            with in_flight.watched(lambda: in_words(args, kwargs)):  # for a crash or a hang
                result = attention(*args, **kwargs)
        except Exception as error:  # the call it raised on travels with it (refusal)
            error.attnspec_call = (args, kwargs)  # type: ignore[attr-defined]
            raise
        except BaseException as error:  # SystemExit, KeyboardInterrupt: this call's failure, not the run's
            breach = breaches.escaped(error, in_words(args, kwargs))
            if breach is None:
                raise
            raise breach from None
        breach = breaches.wrong_return(result, kwargs, in_words(args, kwargs)) if TYPES_CHECKED else None
        if breach is not None:
            raise breach
        return result

    return recording


@contextlib.contextmanager
def as_returned() -> Iterator[None]:
    """The calls inside return what the target returns, unchecked: the probe of its first call says
    what is wrong with it in its own words (target_checks.py)."""
    global TYPES_CHECKED
    saved, TYPES_CHECKED = TYPES_CHECKED, False
    try:
        yield
    finally:
        TYPES_CHECKED = saved


def in_words(args: tuple, kwargs: dict) -> str:
    """A call of the target in words: as ``described`` says it where it is (q, k, v)."""
    if len(args) == 3 and all(isinstance(x, torch.Tensor) and x.dim() == 4 for x in args):
        return described({"q": args[0], "k": args[1], "v": args[2], "keywords": kwargs})
    return f"attention({', '.join([*map(in_flight.brief, args), *map(in_flight.brief, kwargs.values())])})"


def forget() -> None:
    CALLS.clear()


_RECORDING = recorded(lambda: None).__code__  # the code of every recording wrapper


def raised_by_the_target(error: BaseException) -> bool:
    """Whether ``error`` came out of a call of the target (through its recording wrapper), not out of
    the kit's own checks."""
    frame = error.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code is _RECORDING:
            return True
        frame = frame.tb_next
    return False


def first_error(error: BaseException) -> BaseException:
    """Of several failures (an exception group, as Hypothesis raises for distinct ones), the first."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def described(call: dict) -> str:
    """The call in plain words: its shapes, its switches and its dtype."""
    q, k, v, keywords = call["q"], call["k"], call["v"], call["keywords"]
    words = [
        f"B={q.shape[0]}",
        f"{_count(q.shape[1], 'query head')} over {_count(k.shape[1], 'KV head')}",
        f"Tq={_count(q.shape[2], 'query', 'queries')} over Tk={_count(k.shape[2], 'key')}",
        f"head size {q.shape[3]}" + (f" (values {v.shape[3]})" if v.shape[3] != q.shape[3] else ""),
        "causal" if keywords.get("causal", True) else "not causal",
    ]
    if keywords.get("window") is not None:
        words.append(f"window={keywords['window']}")
    if keywords.get("sinks") is not None:
        words.append("sinks")
    if keywords.get("scale") is not None:
        words.append(f"scale={keywords['scale']:g}")
    documents = keywords.get("document_ids")
    if documents is not None:
        words.append("documents" if documents.is_meta else f"documents {documents.tolist()}")
    strided = [t for t in (q, k, v) if not t.is_contiguous()]
    if strided:  # memory_layouts.py
        words.append(f"q, k, v {layout_of(strided[0])} in memory")
    return ", ".join(words) + f", {str(q.dtype).removeprefix('torch.')}"


def _count(n: int, noun: str, nouns: str = "") -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {nouns or noun + 's'}"
