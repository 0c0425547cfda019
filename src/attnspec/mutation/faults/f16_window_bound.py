"""F16: window bound off by one (W+1 keys, an inclusive bound, or W-1)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .edits import bound_toggled
from .fault import Fault
from .matchers import (
    KEY_WORDS,
    QUERY_WORDS,
    WINDOW,
    call_name,
    diagonal_arg,
    key_vs_query,
    mentions_window,
    plus,
    replace_arg,
    words,
)


def window_bound_toggled(target: cst.ComparisonTarget) -> cst.ComparisonTarget | None:
    toggled = {
        cst.LessThan: cst.LessThanEqual,
        cst.LessThanEqual: cst.LessThan,
        cst.GreaterThan: cst.GreaterThanEqual,
        cst.GreaterThanEqual: cst.GreaterThan,
    }.get(type(target.operator))
    return target.with_changes(operator=toggled()) if toggled else None


def operator_window_bound(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The window's bound off by one (W+1 keys: an inclusive bound, or W-1):
    kv_idx > q_idx - W -> kv_idx >= q_idx - W; tril(x, diagonal=-W) -> diagonal=-W - 1 and -W + 1."""
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        target = node.comparisons[0]
        left, right = node.left, target.comparator
        indices = (words(left) | words(right)) & (KEY_WORDS | QUERY_WORDS) or key_vs_query(left, right)
        if (mentions_window(left) or mentions_window(right)) and indices:
            toggled = window_bound_toggled(target)
            if toggled is not None:
                yield node.with_changes(comparisons=[toggled])
    if call_name(node) in ("tril", "triu", "tril_", "triu_"):
        diagonal = diagonal_arg(node)
        if diagonal is not None and mentions_window(diagonal.value):
            for n in (-1, 1):
                yield replace_arg(node, diagonal, plus(diagonal.value, n))


FAULT = Fault(
    "F16",
    "window bound off by one (W+1 keys, an inclusive bound, or W-1)",
    "real",
    ("MASK-2", "ATTN-2"),
    ((cst.Comparison, operator_window_bound), (cst.Call, operator_window_bound)),
    "the 'window' capability",
    evidence=WINDOW,
    generic=(bound_toggled,),
)
