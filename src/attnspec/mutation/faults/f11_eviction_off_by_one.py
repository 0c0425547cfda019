"""F11: KV cache eviction off by one (a windowed layer's cache holds W+1 or W-1 positions)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import WINDOWED_CACHE, call_name, func_name, mentions, mentions_window, plus


def operator_evict_off_by_one(node: cst.Call) -> Iterator[cst.CSTNode]:
    """min(length, window) -> min(length, window + 1) and window - 1: a windowed layer's cache
    holds one position too many or too few (any length's and window's names: max_len, seq_len,
    litgpt's min(max_seq_length, self.config.sliding_window_size))."""
    if call_name(node) != "min" or len(node.args) != 2:
        return
    if not any(mentions(a.value, "len") for a in node.args):  # length, max_len, seq_len
        return
    for i, arg in enumerate(node.args):
        named = func_name(arg.value) == "window" or m.matches(arg.value, m.Name("window"))
        if named or (isinstance(arg.value, (cst.Name, cst.Attribute)) and mentions_window(arg.value)):
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
