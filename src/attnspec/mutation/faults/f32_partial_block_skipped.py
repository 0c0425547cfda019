"""F32: the last partial block skipped, or the key-block loop bound one block short (a block count
rounded down: cdiv -> //, the causal block-skip bound (start_m + 1) * BLOCK_M -> start_m * BLOCK_M)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import call_name, literal_int, positional, words

BLOCK_WORDS = {"block", "blk", "tile"}
BOUND_WORDS = {"hi", "end", "stop", "upper", "last"}
COUNT_WORDS = {"blocks", "steps", "tiles"}


def block_like(node: cst.CSTNode) -> bool:
    """BLOCK_N, BLOCK_M, self.block_k, blk, TILE: a block size (not a count of blocks)."""
    w = words(node)
    return isinstance(node, (cst.Name, cst.Attribute)) and bool(w & BLOCK_WORDS) and not w & COUNT_WORDS


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def rounded_down(stop: cst.BaseExpression, step: cst.BaseExpression) -> cst.BaseExpression:
    """stop // step * step (stop in parentheses unless it is a name)."""
    text = code(stop) if isinstance(stop, (cst.Name, cst.Attribute)) else f"({code(stop)})"
    return cst.parse_expression(f"{text} // {code(step)} * {code(step)}")


def operator_block_count_rounded_down(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """A block count rounded down, the last partial block never read: tl.cdiv(n, BLOCK) /
    triton.cdiv(n, BLOCK) -> n // BLOCK, (n + BLOCK - 1) // BLOCK -> n // BLOCK."""
    if (
        isinstance(node, cst.Call)
        and call_name(node) == "cdiv"
        and len(positional(node)) == 2 == len(node.args)
    ):
        total, size = (a.value for a in node.args)
        yield cst.BinaryOperation(left=total, operator=cst.FloorDivide(), right=size)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide):
        inner, size = node.left, node.right
        ceil = m.matches(
            inner, m.BinaryOperation(operator=m.Subtract(), left=m.BinaryOperation(operator=m.Add()))
        )
        if ceil and literal_int(inner.right) == 1 and inner.left.right.deep_equals(size):
            yield node.with_changes(left=inner.left.left)


def operator_block_loop_short(node: cst.Call) -> Iterator[cst.CSTNode]:
    """The loop over blocks stops before the last partial one: range(lo, hi, BLOCK_N) ->
    range(lo, hi // BLOCK_N * BLOCK_N, BLOCK_N); range(num_blocks) / range(0, n_blocks) -> one block
    fewer."""
    if call_name(node) != "range" or any(a.keyword or a.star for a in node.args):
        return
    args = list(node.args)
    if len(args) == 3 and block_like(args[2].value):
        stop = args[1]
        if not m.matches(stop.value, m.BinaryOperation(operator=m.Multiply())):
            yield node.with_changes(
                args=[args[0], stop.with_changes(value=rounded_down(stop.value, args[2].value)), args[2]]
            )
    elif len(args) in (1, 2):
        stop = args[-1]
        if isinstance(stop.value, (cst.Name, cst.Attribute)) and words(stop.value) & COUNT_WORDS:
            shorter = cst.BinaryOperation(left=stop.value, operator=cst.Subtract(), right=cst.Integer("1"))
            yield node.with_changes(args=[*args[:-1], stop.with_changes(value=shorter)])


def operator_causal_bound_short(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """The causal block-skip bound one block short, the diagonal block never read: (start_m + 1) *
    BLOCK_M -> start_m * BLOCK_M."""
    if not isinstance(node.operator, cst.Multiply):
        return
    for bumped, size in ((node.left, node.right), (node.right, node.left)):
        next_block = m.matches(bumped, m.BinaryOperation(operator=m.Add())) and literal_int(bumped.right) == 1
        if next_block and block_like(size):
            start = bumped.left
            yield node.with_changes(**{"left" if bumped is node.left else "right": start})


def operator_bound_one_block_short(node: cst.Assign) -> Iterator[cst.CSTNode]:
    """hi = min(start + BLOCK_M, n) -> min(start, n) (tl.minimum the same, an IfExp's branch too):
    a loop's end bound one block short."""
    if len(node.targets) != 1 or not words(node.targets[0].target) & BOUND_WORDS:
        return
    for call in m.findall(node.value, m.Call()):
        if call_name(call) not in ("min", "minimum"):
            continue
        for arg in call.args:
            value = arg.value
            if (
                isinstance(value, cst.BinaryOperation)
                and isinstance(value.operator, cst.Add)
                and block_like(value.right)
            ):
                yield node.deep_replace(value, value.left)


FAULT = Fault(
    "F32",
    "last partial block skipped, or the key-block loop bound one block short (a block count rounded "
    "down, the causal block-skip bound shifted by one block)",
    "real",
    ("KERN-1", "KERN-3", "ATTN-4"),
    (
        (cst.Call, operator_block_count_rounded_down),
        (cst.BinaryOperation, operator_block_count_rounded_down),
        (cst.Call, operator_block_loop_short),
        (cst.BinaryOperation, operator_causal_bound_short),
        (cst.Assign, operator_bound_one_block_short),
    ),
    "the 'blocks' declaration of a kernel target (KERN-1: lengths around its block sizes)",
    evidence=(
        {"cdiv"},
        {"range", "block", "n"},
        {"range", "block", "m"},
        {"range", "block", "k"},
        {"range", "block", "q"},
    ),
)
