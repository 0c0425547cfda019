"""F11: KV cache eviction off by one (a windowed layer's cache holds W+1 or W-1 positions)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import WINDOWED_CACHE, call_name, func_name, mentions, plus


def operator_evict_off_by_one(node: cst.Call) -> Iterator[cst.CSTNode]:
    """min(length, window) -> min(length, window + 1) and window - 1: a windowed layer's cache
    holds one position too many or too few."""
    if call_name(node) != "min" or len(node.args) != 2:
        return
    if not any(mentions(a.value, "length") for a in node.args):
        return
    for i, arg in enumerate(node.args):
        if func_name(arg.value) == "window" or m.matches(arg.value, m.Name("window")):
            for n in (1, -1):
                args = list(node.args)
                args[i] = arg.with_changes(value=plus(arg.value, n))
                yield node.with_changes(args=args)


FAULT = Fault(
    "F11",
    "KV cache eviction off by one (a windowed layer's cache holds W+1 or W-1 positions)",
    "book",
    ("CACHE-2",),
    ((cst.Call, operator_evict_off_by_one),),
    "a KV cache (impl's CACHE properties)",
    evidence=WINDOWED_CACHE,
    voided_by={"=cache_position"},
)
