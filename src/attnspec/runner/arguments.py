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


def positive_float(text: str) -> float:
    value = _number(text, float)
    if not value > 0:  # nan too
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number of 0 or more, got {text}")
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
