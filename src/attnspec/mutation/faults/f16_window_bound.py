"""F16: window bound off by one (W+1 keys, an inclusive bound, or W-1)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .edits import bound_toggled
from .fault import Fault
from .matchers import (
    KEY_WORDS,
    POSITION_WORDS,
    QUERY_WORDS,
    WINDOW,
    call_name,
    diagonal_arg,
    key_vs_query,
    literal_int,
    mentions_window,
    plus,
    positional,
    replace_arg,
    tile_axis,
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


# a bound written as a call (keras.ops.less, torch.lt, np.less_equal) and its other strictness
TOGGLED_CALLS = {"less": "less_equal", "greater": "greater_equal", "lt": "le", "gt": "ge"}
TOGGLED_CALLS |= {toggled: name for name, toggled in TOGGLED_CALLS.items()}


def operator_window_bound_call(node: cst.Call) -> Iterator[cst.CSTNode]:
    """ops.less(ops.abs(row_index - col_index), self._sliding_window) -> ops.less_equal(...) (torch.lt
    -> le, greater -> greater_equal, and back): the window's bound written as a call, off by one."""
    toggled = TOGGLED_CALLS.get(call_name(node))
    args = positional(node)
    if toggled is None or len(args) != 2 or len(node.args) != 2:
        return
    left, right = args[0].value, args[1].value
    indices = (words(left) | words(right)) & (KEY_WORDS | QUERY_WORDS) or key_vs_query(left, right)
    if (mentions_window(left) or mentions_window(right)) and indices:
        func = node.func
        name = cst.Name(toggled)
        renamed = func.with_changes(attr=name) if isinstance(func, cst.Attribute) else name
        yield node.with_changes(func=renamed)


def query_index(node: cst.CSTNode) -> bool:
    """i, q_idx, pos, self.pos: a query's position (no key's, no window's, no size's)."""
    found = words(node)
    positions = found & (QUERY_WORDS | POSITION_WORDS) or tile_axis(found) == "query"
    return bool(positions) and not found & KEY_WORDS and not mentions_window(node)


def window_start_moved(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """i - W + 1 -> i - W and i - W + 2 (i - W -> i - W + 1 and i - W - 1): the first key a query's
    window covers, one too early or one too late."""
    inner, constant = expr, 0
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract)):
        value = literal_int(expr.right)
        if value is not None:
            inner, constant = expr.left, value if isinstance(expr.operator, cst.Add) else -value
    if not (isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Subtract)):
        return []
    if not (mentions_window(inner.right) and query_index(inner.left)):
        return []
    inner = inner.with_changes(lpar=[], rpar=[])
    return [inner if c == 0 else plus(inner, c) for c in (constant - 1, constant + 1)]


def operator_window_start(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """max(0, i - window + 1) -> max(0, i - window) and max(0, i - window + 2), and the same where the
    start is assigned or slices the keys (x[i - W + 1 : i + 1]): litgpt's sliding-window mask, built
    row by row, keeps W+1 or W-1 keys."""
    if isinstance(node, cst.Arg) and node.keyword is None:
        for moved in window_start_moved(node.value):
            yield node.with_changes(value=moved)
    if isinstance(node, cst.Assign):
        for moved in window_start_moved(node.value):
            yield node.with_changes(value=moved)
    if isinstance(node, cst.Slice) and node.lower is not None:
        for moved in window_start_moved(node.lower):
            yield node.with_changes(lower=moved)


FAULT = Fault(
    "F16",
    "window bound off by one (W+1 keys, an inclusive bound, or W-1)",
    "real",
    ("MASK-2", "ATTN-2"),
    (
        (cst.Comparison, operator_window_bound),
        (cst.Call, operator_window_bound),
        (cst.Call, operator_window_bound_call),
        (cst.Arg, operator_window_start),
        (cst.Assign, operator_window_start),
        (cst.Slice, operator_window_start),
    ),
    "the 'window' capability",
    evidence=WINDOW,
    generic=(bound_toggled,),
)
