"""The argument types the command lines share: a number out of range is argparse's one-line usage
error (exit code 2), never a traceback or a run that starts and fails later."""

from __future__ import annotations

import argparse
import math


def _number(text: str, kind: type) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


MOST_GIB = 2.0**33  # gibibytes of address space no machine has (8 EiB: the most setrlimit takes)
LEAST_TIMEOUT_S = 0.5  # a call in flight is looked at every 0.25 s: a shorter limit would not hold


def positive_float(text: str) -> float:
    value = _number(text, float)
    if not 0 < value < math.inf:  # nan too
        raise argparse.ArgumentTypeError(f"must be a finite number more than 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number of 0 or more, got {text}")
    return value


def memory_gib(text: str) -> float:
    """GiB of address space: 0 (no cap) up to what any machine could have."""
    value = non_negative_float(text)
    if value > MOST_GIB:
        raise argparse.ArgumentTypeError(f"must be at most {MOST_GIB:.0f} GiB (0: no cap), got {text}")
    return value


def timeout_seconds(text: str) -> float:
    """Seconds one call may run: at least LEAST_TIMEOUT_S, finite."""
    value = positive_float(text)
    if value < LEAST_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be at least {LEAST_TIMEOUT_S:g} s, got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def percentage(text: str) -> float:
    value = _number(text, float)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be a percentage from 0 to 100, got {text}")
    return value
