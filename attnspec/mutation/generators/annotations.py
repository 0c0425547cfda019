"""Inline annotations: ``# attnspec: site F12`` at the end of a line points a fault at code the
catalogue's operators do not recognise, and the campaign mutates that line with the fault's generic
operators, plain structural edits that need no names to guess from:

========  ====================================================================================
F1        a keyword argument set to None (``attn_mask=None``), a call replaced by its receiver or
          first argument (``scores.masked_fill(...)`` -> ``scores``), an operand dropped
          (``scores + mask`` -> ``scores``)
F2        an order comparison mirrored (``<=`` -> ``>=``)
F3, F5    an operand dropped (``x * scale`` -> ``x``; ``x + h`` -> ``h``), or a keyword set to None
F4, F7    a call replaced by its receiver or first argument (``x.transpose(1, 2)`` -> ``x``,
          ``rotate(q, ...)`` -> ``q``), or an operand dropped
F10       a keyword set to None, a call replaced by its first argument
F12       ``arange(a, b)`` -> ``arange(b - a)``, an operand dropped (``arange(T) + past`` ->
          ``arange(T)``), a keyword set to None
F13       the first two positional arguments swapped (``update(k, v)`` -> ``update(v, k)``)
F14       the softmax's axis moved (as the catalogue's own operator)
F16, F24  a bound made inclusive or exclusive (``<`` <-> ``<=``), or mirrored (F24)
F17-F19   a keyword set to None, an operand dropped (``allowed & pads`` -> ``allowed``)
F22       an operand dropped
F23       the operands of a subtraction swapped (``q - kv`` -> ``kv - q``)
F26       an operand dropped (``head_dim * rotary_pct`` -> ``head_dim``)
F27       a call replaced by its first argument (``self.q_norm(q)`` -> ``q``)
========  ====================================================================================

The other faults (F6, F8, F9, F11, F15, F20, F21, F25) change more than one line, or a line in a way
no structural edit describes: their annotation still counts as the fault's feature being present, so
a campaign reports it ``not recognised`` at that line rather than ``no site``.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator

import libcst as cst

from .catalogue import Operator, operator_arange_from_zero, operator_softmax_axis, positional, swap_args

ANNOTATION = re.compile(r"#\s*attnspec:\s*site\s+(F\d+(?:[\s,]+F\d+)*)")


def comment_ids(source: str, pattern: re.Pattern[str]) -> dict[int, set[str]]:
    """line -> the fault ids a comment on it names through ``pattern`` (its first group); {} where
    the source does not tokenize."""
    found: dict[int, set[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                match = pattern.search(token.string)
                if match:
                    found.setdefault(token.start[0], set()).update(
                        re.split(r"[\s,]+", match.group(1).strip())
                    )
    except (tokenize.TokenError, SyntaxError):
        return {}
    return found


def annotations(source: str) -> dict[int, set[str]]:
    """line -> the faults ``# attnspec: site F..`` comments point at it."""
    return comment_ids(source, ANNOTATION)


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


GENERIC: dict[str, tuple[Operator, ...]] = {
    "F1": (keyword_nulled, call_unwrapped, operand_dropped),
    "F2": (comparison_mirrored,),
    "F3": (operand_dropped, keyword_nulled),
    "F4": (call_unwrapped,),
    "F5": (operand_dropped,),
    "F7": (call_unwrapped, operand_dropped),
    "F10": (keyword_nulled, call_unwrapped),
    "F12": (called(operator_arange_from_zero), operand_dropped, keyword_nulled),
    "F13": (first_args_swapped,),
    "F14": (called(operator_softmax_axis),),
    "F16": (bound_toggled,),
    "F17": (keyword_nulled, operand_dropped),
    "F18": (keyword_nulled,),
    "F19": (keyword_nulled,),
    "F22": (operand_dropped,),
    "F23": (operands_swapped,),
    "F24": (bound_toggled, comparison_mirrored),
    "F26": (operand_dropped,),
    "F27": (call_unwrapped,),
}
