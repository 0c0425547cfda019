"""F30: exp2 without log2(e): the log2(e) factor dropped from the scale while exp2 stays, or exp for exp2."""

from __future__ import annotations

import math
from collections.abc import Iterator

import libcst as cst

from .edits import operand_dropped
from .fault import Fault
from .matchers import call_name, exp_of_difference, func_name, literal_float, positional, words

LOG2E = 1 / math.log(2)
LOG2E_NAMES = {"log2e", "log2_e", "rcp_ln2", "inv_ln2", "ln2_inv", "one_over_ln2", "log2_of_e"}


def log2e_like(node: cst.CSTNode) -> bool:
    """LOG2E, RCP_LN2, self.log2e, 1.44269504 (any literal within 1e-5 of log2(e)), math.log2(math.e),
    1 / math.log(2), 1 / LN2."""
    if isinstance(node, cst.Name):
        return node.value.lower() in LOG2E_NAMES
    if isinstance(node, cst.Attribute):
        return node.attr.value.lower() in LOG2E_NAMES
    value = literal_float(node)
    if value is not None:
        return abs(value - LOG2E) < 1e-5
    if call_name(node) == "log2" and len(positional(node)) == 1:
        return words(positional(node)[0].value) == {"math", "e"}
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
        over = node.right
        given = positional(over) if isinstance(over, cst.Call) else []
        ln2 = call_name(over) == "log" and len(given) == 1 and literal_float(given[0].value) == 2.0
        named = isinstance(over, (cst.Name, cst.Attribute)) and func_name(over).lower() in ("ln2", "ln_2")
        return literal_float(node.left) == 1.0 and (ln2 or named)
    return False


def operator_log2e_dropped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The log2(e) factor of a base-2 softmax dropped while exp2 stays: qk_scale = sm_scale * LOG2E ->
    sm_scale (1.44269504, RCP_LN2, 1 / math.log(2) the same), qk *= LOG2E -> pass."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        if log2e_like(node.right):
            yield node.left
        elif log2e_like(node.left):
            yield node.right
    elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.MultiplyAssign):
        if log2e_like(node.value):
            yield cst.Pass()


def operator_exp_for_exp2(node: cst.Call) -> Iterator[cst.CSTNode]:
    """tl.math.exp2(qk - m) -> tl.math.exp(qk - m) (tl.exp2, torch.exp2, exp2 the same): logits already
    folded with log2(e) exponentiated in base e.  Only an exponent that subtracts (a logit less a
    running max or a log-sum-exp): exp2(-8.0 * h / H) is ALiBi's slopes, no softmax."""
    if call_name(node) != "exp2" or exp_of_difference(node) is None:
        return
    func = node.func
    yield node.with_changes(
        func=func.with_changes(attr=cst.Name("exp")) if isinstance(func, cst.Attribute) else cst.Name("exp")
    )


FAULT = Fault(
    "F30",
    "exp2 without log2(e): the log2(e) factor dropped from the scale while exp2 stays, or exp for exp2",
    "real",
    ("ATTN-6", "ATTN-4"),
    (
        (cst.BinaryOperation, operator_log2e_dropped),
        (cst.AugAssign, operator_log2e_dropped),
        (cst.Call, operator_exp_for_exp2),
    ),
    "the attention core of a kernel that exponentiates in base 2",
    evidence=({"exp2"}, {"log2e"}, {"rcp", "ln2"}),
    generic=(operand_dropped,),
    kernel_only=True,
)
