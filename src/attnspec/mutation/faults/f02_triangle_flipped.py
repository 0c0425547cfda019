"""F2: upper/lower triangle flipped (causal comparison, band bound or tril/triu mirrored)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .edits import comparison_mirrored
from .fault import CORE, Fault
from .matchers import call_name, diagonal_arg, key_vs_query, negated, positional, replace_arg

_MIRRORED = {
    cst.LessThan: cst.GreaterThan,
    cst.GreaterThan: cst.LessThan,
    cst.LessThanEqual: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.LessThanEqual,
}


def operator_flip_triangle(node: cst.Comparison) -> Iterator[cst.CSTNode]:
    """key <= query -> key >= query, for any key-like and query-like index (kv_idx <= q_idx,
    j <= i, key_pos > query_pos - W): the causal triangle and the band bound mirrored."""
    if len(node.comparisons) != 1:
        return
    target = node.comparisons[0]
    mirrored = _MIRRORED.get(type(target.operator))
    if mirrored and key_vs_query(node.left, target.comparator):
        yield node.with_changes(comparisons=[target.with_changes(operator=mirrored())])


# comparisons written as calls (torch.ge, keras.ops.greater_equal, np.less) and their mirror images
MIRRORED_CALLS = {"greater_equal": "less_equal", "greater": "less", "ge": "le", "gt": "lt"}
MIRRORED_CALLS |= {mirror: name for name, mirror in MIRRORED_CALLS.items()}


def operator_flip_comparison_call(node: cst.Call) -> Iterator[cst.CSTNode]:
    """ops.greater_equal(row_index, col_index) -> ops.less_equal(row_index, col_index) (torch.ge -> le,
    greater -> less): the causal triangle built by a comparison function, mirrored."""
    mirrored = MIRRORED_CALLS.get(call_name(node))
    args = positional(node)
    if mirrored is None or len(args) != 2 or len(node.args) != 2:
        return
    if key_vs_query(args[0].value, args[1].value):
        func = node.func
        name = cst.Name(mirrored)
        renamed = func.with_changes(attr=name) if isinstance(func, cst.Attribute) else name
        yield node.with_changes(func=renamed)


def operator_swap_tril_triu(node: cst.Call) -> Iterator[cst.CSTNode]:
    """tril(x, diagonal=d) <-> triu(x, diagonal=-d): the other triangle is kept or masked."""
    name = call_name(node)
    other = {"tril": "triu", "triu": "tril", "tril_": "triu_", "triu_": "tril_"}.get(name)
    if other is None:
        return
    func = node.func
    func = func.with_changes(attr=cst.Name(other)) if isinstance(func, cst.Attribute) else cst.Name(other)
    diagonal = diagonal_arg(node)
    flipped = node.with_changes(func=func)
    if diagonal is not None:
        flipped = replace_arg(flipped, diagonal, negated(diagonal.value))
    yield flipped


FAULT = Fault(
    "F2",
    "upper/lower triangle flipped (causal comparison, band bound or tril/triu mirrored)",
    "ch8",
    ("MASK-1", "MASK-2", "ATTN-2", "ATTN-9"),
    (
        (cst.Comparison, operator_flip_triangle),
        (cst.Call, operator_swap_tril_triu),
        (cst.Call, operator_flip_comparison_call),
    ),
    CORE,
    evidence=({"tril"}, {"triu"}, {"causal"}),
    generic=(comparison_mirrored,),
)
