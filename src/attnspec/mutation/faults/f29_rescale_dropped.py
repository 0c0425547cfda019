"""F29: the online softmax's rescale dropped when the max grows (acc or the running sum kept as is)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .edits import operand_dropped
from .fault import Fault
from .matchers import EXP_CALLS, SPLIT_WORDS, base_of, exp_of_difference, positional, words

# the factor exp(m_old - m_new) of an online softmax: alpha, rescale, correction, corr
RESCALE_WORDS = {"alpha", "rescale", "correction", "corr"}
MAX_WORDS = {"m", "max"}
# what the factor rescales: the accumulator and the running sum (acc, l_i, total, denom, o)
RUNNING_WORDS = {"acc", "accum", "accumulator", "l", "sum", "total", "denom", "denominator", "o", "out"}


def rescale_like(node: cst.CSTNode) -> bool:
    """alpha, alpha[:, None], self.rescale: the factor exp(m_old - m_new) by its name."""
    base = base_of(node)
    return base is not None and bool(words(base) & RESCALE_WORDS)


def running_like(node: cst.CSTNode) -> bool:
    base = base_of(node)
    return base is not None and bool(words(base) & RUNNING_WORDS)


def unit_factor(call: cst.Call, old: cst.BaseExpression) -> cst.Call:
    """exp(a - b) -> exp(a - a): a factor of 1 of the same shape."""
    inner = positional(call)[0].value
    return call.with_deep_changes(inner, right=old)


def operator_rescale_dropped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The rescale by exp(m_old - m_new) dropped when the max grows: acc = acc * alpha[:, None] ->
    acc, l_i = l_i * alpha + s -> l_i + s, acc *= alpha[:, None] -> pass (alpha, rescale, correction,
    corr, times an accumulator or a running sum: acc, l_i, total, denom, o); and the factor computed
    as 1: alpha = tl.math.exp2(m_i - m_ij) -> exp2(m_i - m_i) (any exp of a difference of running
    maxima, or assigned to a rescale name; not a key split's, F31)."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        if rescale_like(node.right) and running_like(node.left):
            yield node.left
        elif rescale_like(node.left) and running_like(node.right):
            yield node.right
    elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.MultiplyAssign):
        if rescale_like(node.value):
            yield cst.Pass()
    elif isinstance(node, cst.Assign) and len(node.targets) == 1:
        pair = exp_of_difference(node.value)
        if pair is None or (words(pair[0]) | words(pair[1])) & SPLIT_WORDS:
            return
        both_maxima = all(words(side) & MAX_WORDS for side in pair)
        if both_maxima or rescale_like(node.targets[0].target):
            yield node.with_changes(value=unit_factor(node.value, pair[0]))


FAULT = Fault(
    "F29",
    "online softmax's rescale dropped when the max grows (acc or the running sum not multiplied by "
    "exp(m_old - m_new))",
    "real",
    ("KERN-2", "KERN-1", "ATTN-4"),
    (
        (cst.BinaryOperation, operator_rescale_dropped),
        (cst.AugAssign, operator_rescale_dropped),
        (cst.Assign, operator_rescale_dropped),
    ),
    "the 'blocks' declaration of a kernel target (KERN-2: the largest logit in a later key block)",
    evidence=tuple({word, exp} for word in sorted(RESCALE_WORDS - {"corr"}) for exp in sorted(EXP_CALLS)),
    generic=(operand_dropped,),
    kernel_only=True,
)
