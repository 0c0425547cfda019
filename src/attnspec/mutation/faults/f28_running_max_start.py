"""F28: the online softmax's running max starting at 0 or at a finite sentinel instead of -inf."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import call_name, func_name, is_minus_inf, words

ZERO = cst.Float("0.0")
FILL_CALLS = {"full", "new_full", "full_like"}
SENTINEL = cst.UnaryOperation(operator=cst.Minus(), expression=cst.Float("1.0e4"))

# the running max of an online softmax: m_i, m_prev, row_max, running_max, max_score (not a mask)
MAX_WORDS = {"m", "max", "mx"}
NOT_MAX_WORDS = {"mask", "masks", "len", "length", "seqlen", "pos", "position", "idx", "index"}


def running_max_like(node: cst.CSTNode) -> bool:
    w = words(node)
    return isinstance(node, (cst.Name, cst.Attribute)) and bool(w & MAX_WORDS) and not w & NOT_MAX_WORDS


def plus_inf(node: cst.CSTNode) -> bool:
    """float("inf"), math.inf, torch.inf, inf: the +inf a running max subtracts from zeros."""
    if func_name(node) == "inf" and not isinstance(node, cst.Call):
        return True
    if isinstance(node, cst.Call) and func_name(node.func) == "float" and node.args:
        value = node.args[0].value
        return isinstance(value, cst.SimpleString) and value.evaluated_value.lower() in ("inf", "infinity")
    return False


def operator_running_max_start(node: cst.Assign) -> Iterator[cst.CSTNode]:
    """The running max of an online softmax starts at 0 or at a finite sentinel instead of -inf:
    m_i = tl.full([BLOCK_M], float("-inf"), ...) -> 0.0 and -1.0e4 (torch.full, new_full, a bare
    -inf the same); m_i = tl.zeros([BLOCK_M], ...) - float("inf") -> tl.zeros(...) and
    tl.zeros(...) - 1.0e4.  Exact in exact arithmetic while some logit lies above the start: logits
    far below it underflow to a sum of 0 (KERN-4)."""
    if len(node.targets) != 1 or not running_max_like(node.targets[0].target):
        return
    value = node.value
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Subtract):
        if plus_inf(value.right) and m.findall(value.left, m.Call()):
            yield node.with_changes(value=value.left)
            yield node.with_changes(value=value.with_changes(right=cst.Float("1.0e4")))
        return
    constant = is_minus_inf(value) or call_name(value) in FILL_CALLS
    starts = m.findall(value, m.MatchIfTrue(is_minus_inf))
    if constant and len(starts) == 1:
        for start in (ZERO, SENTINEL):
            yield node.with_changes(
                value=value.deep_replace(starts[0], start) if value is not starts[0] else start
            )


FAULT = Fault(
    "F28",
    "online softmax's running max starts at 0 or at a finite sentinel instead of -inf",
    "real",
    ("KERN-4", "KERN-2"),
    ((cst.Assign, operator_running_max_start),),
    "the 'blocks' declaration of a kernel target (KERN-4: logits far below zero)",
    evidence=({"m", "i", "full"}, {"m", "i", "zeros"}, {"running", "max"}),
    kernel_only=True,
)
