"""F5: residual branch dropped, or added to the normalised input."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import operand_dropped
from .fault import Fault

RESIDUAL_NAMES = {"x", "h", "residual", "shortcut", "skip", "identity", "inputs", "hidden_states", "hidden"}


def operator_break_residual(node: cst.Return) -> Iterator[cst.CSTNode]:
    """return x + f(...) -> return f(...), and -> return self.norm(x) + f(...); the same with the
    residual after the branch (litgpt's return self.mlp(x_normed) + x)."""
    value = node.value
    if m.matches(value, m.BinaryOperation(operator=m.Add(), left=m.Name(), right=m.Call())):
        yield node.with_changes(value=value.right)
        normed = cst.Call(func=cst.parse_expression("self.norm"), args=[cst.Arg(value.left)])
        yield node.with_changes(value=value.with_changes(left=normed))
    elif m.matches(value, m.BinaryOperation(operator=m.Add(), left=m.Call())) and residual_name(value.right):
        yield node.with_changes(value=value.left)
        normed = cst.Call(func=cst.parse_expression("self.norm"), args=[cst.Arg(value.right)])
        yield node.with_changes(value=value.with_changes(right=normed))


def residual_name(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and (node.value in RESIDUAL_NAMES or "residual" in node.value)


def operator_drop_residual_sum(node: cst.Assign) -> Iterator[cst.CSTNode]:
    """h = residual + h -> h = h, t = x + t -> t = t, h = residual + dropout(a) -> h = dropout(a):
    the residual branch is dropped from a sum written as an assignment."""
    value = node.value
    if not m.matches(value, m.BinaryOperation(operator=m.Add())):
        return
    left, right = value.left, value.right
    if m.matches(left, m.Name()) and m.matches(right, m.Name()) and left.value == right.value:
        return
    if residual_name(left) and not residual_name(right):
        yield node.with_changes(value=right)
    elif residual_name(right) and not residual_name(left):
        yield node.with_changes(value=left)
    elif residual_name(left) and residual_name(right):  # h = residual + h: the saved input is the residual
        kept = right if "residual" in left.value or left.value == "x" else left
        yield node.with_changes(value=kept)


FAULT = Fault(
    "F5",
    "residual branch dropped, or added to the normalised input",
    "ch8",
    ("BLOCK-1", "BLOCK-2"),
    ((cst.Return, operator_break_residual), (cst.Assign, operator_drop_residual_sum)),
    "a layer with its residual (a 'layer' with residual=True), or a decoder layer",
    evidence=({"residual"}, {"+", "hidden"}, {"+", "attn"}, {"+", "attention"}, {"+", "mlp"}),
    generic=(operand_dropped,),
)
