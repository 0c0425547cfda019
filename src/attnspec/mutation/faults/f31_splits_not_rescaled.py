"""F31: key splits combined without rescale (split-K / flash-decoding parts added as they are)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import operand_dropped
from .fault import Fault
from .matchers import SPLIT_WORDS, assigned, base_of, exp_of_difference, words


def split_weight(node: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(a, b) for a split's weight exp(a - b) / exp2(a - b) where a or b is a split's statistic
    (m_split - m_max, lse_part - lse_max)."""
    pair = exp_of_difference(node)
    if pair is None or not (words(pair[0]) | words(pair[1])) & SPLIT_WORDS:
        return None
    return pair


def same_name(a: cst.CSTNode | None, b: cst.CSTNode) -> bool:
    return a is not None and a.deep_equals(b)


def operator_split_weight_unit(node: cst.Call) -> Iterator[cst.CSTNode]:
    """Each split weighed 1 instead of exp(m_split - m_max): tl.exp2(m_split - m_max) ->
    tl.exp2(m_split - m_split) (exp, torch.exp the same; a factor of 1 of the same shape)."""
    pair = split_weight(node)
    if pair is not None:
        inner = node.args[0].value
        yield node.with_deep_changes(inner, right=pair[0])


def operator_split_weight_dropped(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """w = exp2(m_split - m_max); l = sum(l_split * w); o = sum(o_split * w[:, None]) -> each later
    product by w dropped, one statement at a time (the sums or the outputs combined unweighted).  A
    weight whose own names say nothing of splits (factor = exp(m - top)) counts where it multiplies a
    split's statistic (total + factor * part_total); then it is also made 1: exp(m - top) -> exp(m - m)."""
    for old, new in weights_dropped(node, in_split_loop=False):
        yield node.deep_replace(old, new)


def operator_split_loop_weight_dropped(node: cst.For) -> Iterator[cst.CSTNode]:
    """The same inside a loop over the splits (``for split in range(n_splits)``), whatever the names:
    a combine kernel's ``scale = tl.exp2(m_s - m_max); acc += scale[:, None] * acc_s`` (what the
    loop-free rule above already finds is left to it)."""
    if not words(node.target) & SPLIT_WORDS or not isinstance(node.body, cst.IndentedBlock):
        return
    found = set(map(repr, weights_dropped(node.body, in_split_loop=False)))
    for old, new in weights_dropped(node.body, in_split_loop=True):
        if repr((old, new)) not in found:
            yield node.deep_replace(old, new)


def weights_dropped(
    node: cst.IndentedBlock, in_split_loop: bool
) -> Iterator[tuple[cst.CSTNode, cst.CSTNode]]:
    """(old, new) for each product by a split's weight in ``node``'s statements dropped, and each such
    weight that its names do not show as a split's made 1; ``in_split_loop``: every weight counts."""
    weights: dict[str, cst.Call] = {}
    unit: set[str] = set()  # the weights already made 1
    for statement in node.body:
        found = assigned(statement)
        if found is not None and exp_of_difference(found[1]) is not None:
            weights[found[0]] = found[1]
            continue
        if not weights or not isinstance(statement, cst.SimpleStatementLine):
            continue
        for product in m.findall(statement, m.BinaryOperation(operator=m.Multiply())):
            for kept, weight in ((product.left, product.right), (product.right, product.left)):
                base = base_of(weight)
                if (
                    not isinstance(base, cst.Name)
                    or base.value not in weights
                    or same_name(base_of(kept), base)
                ):
                    continue
                exp = weights[base.value]
                named = split_weight(exp) is not None
                if not named and not words(kept) & SPLIT_WORDS and not in_split_loop:
                    continue
                yield product, kept
                if not named and base.value not in unit:
                    unit.add(base.value)
                    left = exp_of_difference(exp)[0]
                    yield exp, exp.with_deep_changes(exp.args[0].value, right=left)
                break


FAULT = Fault(
    "F31",
    "key splits combined without rescale (each split's sum and output added as they are, not weighted "
    "by exp(m_split - m_max))",
    "real",
    ("KERN-1", "KERN-2"),
    (
        (cst.Call, operator_split_weight_unit),
        (cst.IndentedBlock, operator_split_weight_dropped),
        (cst.For, operator_split_loop_weight_dropped),
    ),
    "the 'decode' capability of a kernel target that splits the keys (KERN-1: a few queries over many keys)",
    evidence=({"split", "exp"}, {"split", "exp2"}, {"part", "exp"}, {"part", "exp2"}),
    generic=(operand_dropped,),
    kernel_only=True,
)
