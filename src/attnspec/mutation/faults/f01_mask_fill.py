"""F1: mask adds 0 instead of -inf (fill value 0, or the mask built but never applied)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import call_unwrapped, keyword_nulled, operand_dropped
from .fault import CORE, Fault
from .matchers import (
    call_name,
    fill_word,
    is_minus_inf,
    key_like,
    keyword,
    literal_float,
    mask_operand,
    mentions,
    method_receiver,
    positional,
    query_like,
    replace_arg,
    words,
)

ZERO = cst.Float("0.0")


FILL_CALLS = {"masked_fill", "masked_fill_", "where", "full", "new_full", "full_like", "fill_", "fill"}


MASK_KEYWORDS = {"attn_mask", "attn_bias"}  # torch SDPA, xformers (attention_mask is often padding)


def operator_mask_fill_zero(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The masked value becomes 0: -inf in any spelling, torch.finfo(dtype).min -> 0.0."""
    if is_minus_inf(node):
        yield ZERO
    elif isinstance(node, cst.Attribute) and node.attr.value == "min" and call_name(node.value) == "finfo":
        yield ZERO


def operator_mask_not_applied(node: cst.Call) -> Iterator[cst.CSTNode]:
    """A mask that is built but has no effect: masked_fill(m, fill) with a fill variable -> 0.0,
    scores.masked_fill(m, v) -> scores, scores.add_(mask) -> scores, is_causal=True -> False,
    attn_mask=m -> attn_mask=None; a Triton kernel's tl.where(mask, qk, float("-inf")) -> qk and
    tl.where(causal, 0, -1.0e6) -> tl.where(causal, 0, 0.0) (where_not_applied)."""
    name = call_name(node)
    if name in FILL_CALLS:
        for arg in node.args:
            if fill_word(arg.value):
                yield replace_arg(node, arg, ZERO)
    receiver = method_receiver(node)
    positions = receiver is not None and words(receiver) & {"position", "positions", "pos"}
    if name in ("masked_fill", "masked_fill_") and receiver is not None and not positions:
        yield receiver  # (position ids filled where pads are: no mask of scores)
    if (
        name in ("add", "add_")
        and receiver is not None
        and len(node.args) == 1
        and mentions(node.args[0], "mask")
    ):
        yield receiver
    yield from where_not_applied(node)
    causal = keyword(node, "is_causal")
    if causal is not None and m.matches(causal.value, m.Name("True")):
        yield replace_arg(node, causal, cst.Name("False"))
    mask = keyword(node, *MASK_KEYWORDS)
    if mask is not None and not m.matches(mask.value, m.Name("None")):
        yield replace_arg(node, mask, cst.Name("None"))


def large_negative(node: cst.CSTNode) -> bool:
    """-1e6, -1.0e4, -10000.0: a finite fill a kernel uses for -inf."""
    value = literal_float(node)
    return value is not None and value <= -1e4


def where_not_applied(node: cst.Call) -> Iterator[cst.CSTNode]:
    """Triton's masks (tl.where only): tl.where(mask, qk, float("-inf")) -> qk, tl.where(causal, qk,
    -1.0e6) -> qk, tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0) -> p (a mask of probabilities,
    by a comparison of a query or key index), and a large finite fill -> 0.0: tl.where(causal, 0,
    -1.0e6) -> tl.where(causal, 0, 0.0) (an additive mask's bias)."""
    args = positional(node)
    receiver = method_receiver(node)
    if call_name(node) != "where" or len(args) != 3 or len(node.args) != 3:
        return
    if not (isinstance(receiver, cst.Name) and receiver.value == "tl"):
        return
    condition, kept, fill = (a.value for a in args)
    if large_negative(fill):
        yield replace_arg(node, args[2], ZERO)
    masking = is_minus_inf(fill) or large_negative(fill) or fill_word(fill)
    compared = isinstance(condition, cst.Comparison) and len(condition.comparisons) == 1
    if compared:
        sides = (condition.left, condition.comparisons[0].comparator)
        compared = any(key_like(s) or query_like(s) for s in sides)
    if masking or (literal_float(fill) == 0.0 and compared):
        if literal_float(kept) is None:
            yield kept


def operator_mask_not_added(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """scores + mask -> scores, and the statement scores += mask -> pass."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        if mask_operand(node.right) and not mask_operand(node.left):
            yield node.left
        elif mask_operand(node.left) and not mask_operand(node.right):
            yield node.right
    if (
        isinstance(node, cst.AugAssign)
        and isinstance(node.operator, cst.AddAssign)
        and mask_operand(node.value)
    ):
        yield cst.Pass()


FAULT = Fault(
    "F1",
    "mask adds 0 instead of -inf (fill value 0, or the mask built but never applied)",
    "ch8",
    ("MASK-3", "ATTN-2", "ATTN-9"),
    (
        (cst.UnaryOperation, operator_mask_fill_zero),
        (cst.Call, operator_mask_fill_zero),
        (cst.Attribute, operator_mask_fill_zero),
        (cst.Call, operator_mask_not_applied),
        (cst.BinaryOperation, operator_mask_not_added),
        (cst.AugAssign, operator_mask_not_added),
    ),
    CORE,
    evidence=({"masked", "fill"}, {"inf"}, {"finfo", "min"}, {"mask", "where"}, {"block", "mask"}),
    generic=(keyword_nulled, call_unwrapped, operand_dropped),
)
