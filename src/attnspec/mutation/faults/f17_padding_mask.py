"""F17: padding mask ignored or inverted (never passed on, dropped from the mask, or pads taken for
tokens)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import keyword_nulled, operand_dropped
from .fault import Fault
from .matchers import (
    SIZE_WORDS,
    drop_args,
    literal_int,
    names_in,
    positional,
    replace_arg,
    words,
)

PADDING_WORDS = {"padding", "pad", "pads"}


def padding_like(node: cst.CSTNode) -> bool:
    """A padding mask, or something read from one: padding_mask, key_padding_mask[b], pads[:, lo:hi]."""
    return bool(words(node) & PADDING_WORDS)


def operator_padding_ignored(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The padding mask never reaches the scores: f(..., padding_mask=m) -> padding_mask=None,
    and_masks(causal, padding_mask_function(m)) -> and_masks(causal), allowed & pads[...] -> allowed."""
    if isinstance(node, cst.Call):
        for arg in node.args:
            if (
                arg.keyword is not None
                and padding_like(arg.keyword)
                and not m.matches(arg.value, m.Name("None"))
            ):
                yield replace_arg(node, arg, cst.Name("None"))
        args = positional(node)
        if len(args) >= 2 and words(node.func) & {"and", "combine"}:
            for arg in args:
                if padding_like(arg.value):
                    yield drop_args(node, [arg])
    elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitAnd):
        if users_mask_like(node.right) and not users_mask_like(node.left):
            yield node.left
        elif users_mask_like(node.left) and not users_mask_like(node.right):
            yield node.right


def users_mask_like(node: cst.CSTNode) -> bool:
    """A padding mask, or the ``attention_mask`` a model's caller passes (which marks the pads)."""
    return padding_like(node) or "attention_mask" in names_in(node)


def operator_padding_inverted(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pads taken for real tokens and real tokens for pads: padding_mask[b, kv] -> ~padding_mask[b, kv],
    attention_mask == 1 -> attention_mask == 0 (and != 0 -> != 1)."""
    if (
        isinstance(node, cst.Subscript)
        and isinstance(node.value, (cst.Name, cst.Attribute))
        and padding_like(node.value)
    ):
        yield cst.UnaryOperation(operator=cst.BitInvert(), expression=node)
    elif isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        target = node.comparisons[0]
        value = literal_int(target.comparator)
        if value in (0, 1) and isinstance(target.operator, (cst.Equal, cst.NotEqual)):
            named = words(node.left)
            if "mask" in named and named & {"attention", "padding", "pad"} and not named & SIZE_WORDS:
                flipped = target.with_changes(comparator=cst.Integer(str(1 - value)))
                yield node.with_changes(comparisons=[flipped])


FAULT = Fault(
    "F17",
    "padding mask ignored or inverted (never passed on, dropped from the mask, or pads taken for tokens)",
    "real",
    ("MOD-9", "MOD-10", "ATTN-13"),
    (
        (cst.Call, operator_padding_ignored),
        (cst.BinaryOperation, operator_padding_ignored),
        (cst.Subscript, operator_padding_inverted),
        (cst.Comparison, operator_padding_inverted),
    ),
    "a model or module with a padding mask (the 'padding' capability: MOD-9, MOD-10)",
    evidence=({"padding"}, {"pads"}, {"pad", "mask"}, {"=attention_mask"}),
    generic=(keyword_nulled, operand_dropped),
)
