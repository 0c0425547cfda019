"""The generic edits: plain structural edits that need no names to guess from, which an inline
annotation (``# attnspec: site F12`` at the end of a line, faults/annotations.py) turns on at that
line for the fault it names, where the catalogue's operators do not recognise the code.  Each fault
module lists its own (``generic=``).

The other faults (F6, F8, F9, F11, F15, F20, F21, F25, F28, F32) change more than one line, or a line
in a way no structural edit describes: no annotation can place them, and a campaign refuses one before it
runs (generators/annotated.py), as it does an annotation on a line none of the fault's edits changes.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .fault import Operator
from .matchers import positional, swap_args


def bare(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[], rpar=[]) if hasattr(node, "lpar") else node


def operand_dropped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """a <op> b -> a, and -> b."""
    if isinstance(node, cst.BinaryOperation) and not isinstance(node.operator, cst.MatrixMultiply):
        yield bare(node.left)
        yield bare(node.right)


def operands_swapped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """a - b -> b - a."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
        yield node.with_changes(left=node.right, right=node.left)


MIRRORED = {cst.LessThan: cst.GreaterThan, cst.GreaterThan: cst.LessThan}
MIRRORED |= {cst.LessThanEqual: cst.GreaterThanEqual, cst.GreaterThanEqual: cst.LessThanEqual}
TOGGLED = {cst.LessThan: cst.LessThanEqual, cst.LessThanEqual: cst.LessThan}
TOGGLED |= {cst.GreaterThan: cst.GreaterThanEqual, cst.GreaterThanEqual: cst.GreaterThan}


def compared(node: cst.CSTNode, table: dict) -> Iterator[cst.CSTNode]:
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        target = node.comparisons[0]
        new = table.get(type(target.operator))
        if new is not None:
            yield node.with_changes(comparisons=[target.with_changes(operator=new())])


def comparison_mirrored(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """a <= b -> a >= b."""
    yield from compared(node, MIRRORED)


def bound_toggled(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """a < b -> a <= b, and back."""
    yield from compared(node, TOGGLED)


MODULES = {"torch", "F", "nn", "functional", "math", "np", "numpy", "einops", "tl", "self", "cls"}


def root_name(node: cst.BaseExpression) -> str | None:
    """'torch' for torch.nn.functional, 'q' for q; None for a computed value (a call, a subscript)."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def call_unwrapped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """x.method(...) -> x (a tensor's method: x.transpose(1, 2)); f(x, ...) -> x (a function, or a
    module's or self's: torch.softmax(x), self.rotary(q, pos))."""
    if not isinstance(node, cst.Call):
        return
    func = node.func
    if isinstance(func, cst.Attribute) and root_name(func.value) not in MODULES:
        yield func.value
        return
    args = positional(node)
    if args:
        yield args[0].value


def keyword_nulled(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """f(..., name=value) -> f(..., name=None), one keyword at a time."""
    if isinstance(node, cst.Call):
        for arg in node.args:
            if arg.keyword is not None and not (
                isinstance(arg.value, cst.Name) and arg.value.value == "None"
            ):
                yield node.with_changes(
                    args=[a if a is not arg else a.with_changes(value=cst.Name("None")) for a in node.args]
                )


def first_args_swapped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """f(a, b, ...) -> f(b, a, ...)."""
    if isinstance(node, cst.Call) and len(positional(node)) >= 2 and node.args[0].keyword is None:
        if node.args[1].keyword is None and not node.args[0].star and not node.args[1].star:
            yield node.with_changes(args=swap_args(list(node.args), 0))


def called(operator: Operator) -> Operator:
    """A catalogue operator that takes a Call, on any node (the others it ignores)."""

    def generic(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.Call):
            yield from operator(node)

    generic.__doc__ = operator.__doc__
    return generic
