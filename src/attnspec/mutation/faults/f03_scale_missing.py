"""F3: missing 1/sqrt(d_k) scale (default scale 1, or the * scale dropped)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import keyword_nulled, operand_dropped
from .fault import CORE, Fault
from .matchers import (
    call_name,
    is_square_root,
    keyword,
    literal_float,
    replace_arg,
    scale_like,
    triton_launch,
)

ONE = cst.Float("1.0")


SCALE_KEYWORDS = {"scale", "scaling", "sm_scale", "softmax_scale"}


def rotary_product(node: cst.CSTNode) -> bool:
    """q * freqs.cos(), rotate_half(k) * freqs.sin(): a rotation's term (its ``* scale`` is xPos's, not
    the softmax's)."""
    return any(call_name(call) in ("cos", "sin") for call in m.findall(node, m.Call()))


def operator_drop_scale(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """The 1/sqrt(d_k) factor is lost: a / sqrt(d) -> a, a / d ** 0.5 -> a, scores * scale ->
    scores (any softmax-scale name, but not a rotary term's: q * cos * scale is xPos), d ** -0.5 -> 1.0."""
    if isinstance(node.operator, cst.Divide) and is_square_root(node.right):
        yield node.left
    if isinstance(node.operator, cst.Multiply) and not rotary_product(node):
        if scale_like(node.right):
            yield node.left
        elif scale_like(node.left):
            yield node.right
    if isinstance(node.operator, cst.Power) and literal_float(node.right) == -0.5:
        yield ONE


def operator_drop_scale_statement(node: cst.AugAssign) -> Iterator[cst.CSTNode]:
    """scores *= sm_scale -> pass, scores /= sqrt(d) -> pass."""
    if isinstance(node.operator, cst.MultiplyAssign) and scale_like(node.value):
        yield cst.Pass()
    if isinstance(node.operator, cst.DivideAssign) and is_square_root(node.value):
        yield cst.Pass()


def operator_unit_scale_argument(node: cst.Call) -> Iterator[cst.CSTNode]:
    """f(..., scale=s) -> f(..., scale=1.0) (also scaling=, sm_scale=, softmax_scale=), and a Triton
    launch's scale by position: kernel[grid](q, k, v, sm_scale, ...) -> kernel[grid](q, k, v, 1.0, ...)."""
    arg = keyword(node, *SCALE_KEYWORDS)
    if arg is not None and not m.matches(arg.value, m.Name("None")) and literal_float(arg.value) != 1.0:
        yield replace_arg(node, arg, ONE)
    if triton_launch(node):  # kernel[grid](q, k, v, sm_scale, ...): the scale handed on by position
        for given in node.args:
            if given.keyword is None and not given.star and scale_like(given.value):
                yield replace_arg(node, given, ONE)


FAULT = Fault(
    "F3",
    "missing 1/sqrt(d_k) scale (default scale 1, or the * scale dropped)",
    "ch8",
    ("ATTN-6", "ATTN-4"),
    (
        (cst.BinaryOperation, operator_drop_scale),
        (cst.AugAssign, operator_drop_scale_statement),
        (cst.Call, operator_unit_scale_argument),
    ),
    CORE + ", or a layer (the 'layer' capability) for a scale set at construction",
    # a fused call scales by 1/sqrt(d) itself
    evidence=({"scale"}, {"scaling"}, {"sqrt"}, {"scaled", "dot", "product"}, {"flex", "attention"}),
    generic=(operand_dropped, keyword_nulled),
)
