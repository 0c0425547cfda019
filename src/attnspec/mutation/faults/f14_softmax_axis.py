"""F14: softmax over the wrong axis (the queries instead of the keys)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import called
from .fault import CORE, Fault
from .matchers import (
    call_name,
    dim_arg,
    is_method_call,
    literal_int,
    method_receiver,
    replace_arg,
    words,
)

# What attention code calls the logits it normalises (scores, attn_weights, QK, combined_logits, ...).
SCORE_WORDS = {
    "scores",
    "score",
    "logits",
    "logit",
    "attn",
    "attention",
    "weights",
    "qk",
    "att",
    "sim",
    "dots",
}


def operator_softmax_axis(node: cst.Call) -> Iterator[cst.CSTNode]:
    """softmax(scores, dim=-1) -> softmax(scores, dim=-2) (also s.softmax(-1), dim=3 -> 2):
    normalised over the queries instead of the keys.  Only the softmax of attention logits
    (named scores, logits, attn_weights, QK, ...): a router's softmax is not attention."""
    if call_name(node) == "sum" and is_method_call(node) and exponentials(method_receiver(node)):
        yield from normalised_over_queries(node, dim_arg(node, 0))  # a softmax written out: e / e.sum(-1)
        return
    if call_name(node) not in ("softmax", "log_softmax", "_softmax", "safe_softmax"):
        return
    operand = method_receiver(node) if is_method_call(node) else (node.args[0].value if node.args else None)
    if operand is None or not words(operand) & SCORE_WORDS:  # a router's or a sampler's softmax
        return
    yield from normalised_over_queries(node, dim_arg(node, 0 if is_method_call(node) else 1))


def exponentials(node: cst.CSTNode) -> bool:
    """exps, p, torch.exp(...): what a written-out softmax sums."""
    return call_name(node) == "exp" or bool(words(node) & {"exp", "exps", "p", "probs", "numerator", "e"})


def normalised_over_queries(node: cst.Call, arg: cst.Arg | None) -> Iterator[cst.CSTNode]:
    value = None if arg is None else literal_int(arg.value)
    if value == -1:
        yield replace_arg(node, arg, cst.parse_expression("-2"))
    elif value is not None and value >= 1:
        yield replace_arg(node, arg, cst.Integer(str(value - 1)))


# a tile of logits or probabilities: qk, s, p, scores, logits
TILE_NAMES = {"qk", "s", "p", "score", "scores", "logits", "probs", "attn", "w", "weights"}


def operator_tile_reduction_axis(node: cst.Call) -> Iterator[cst.CSTNode]:
    """A Triton kernel's row statistics over the wrong axis of its (BLOCK_M, BLOCK_N) tile:
    tl.max(qk, 1) -> tl.max(qk, 0), tl.sum(p, axis=1) -> axis=0 (the queries instead of the keys)."""
    if call_name(node) not in ("max", "sum") or not m.matches(node.func, m.Attribute(value=m.Name("tl"))):
        return
    tile = node.args[0].value if node.args else None
    if not (isinstance(tile, cst.Name) and words(tile) & TILE_NAMES):
        return  # a reduction of something else: delta = tl.sum(o * do, axis=1), a dot product
    arg = dim_arg(node, 1)
    if arg is not None and literal_int(arg.value) == 1:
        yield replace_arg(node, arg, cst.Integer("0"))


FAULT = Fault(
    "F14",
    "softmax over the wrong axis (the queries instead of the keys)",
    "real",
    ("ATTN-1", "ATTN-4"),
    ((cst.Call, operator_softmax_axis), (cst.Call, operator_tile_reduction_axis)),
    CORE,
    evidence=({"softmax"},),
    generic=(called(operator_softmax_axis),),
)
