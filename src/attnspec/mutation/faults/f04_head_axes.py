"""F4: head and sequence axes confused in the head split or merge."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import call_unwrapped
from .fault import Fault
from .matchers import call_name, heads_like, literal_int, method_receiver, swap_args, words


def int_args(node: cst.Call) -> list[int | None]:
    return [literal_int(a.value) for a in node.args]


SWAPS_HEADS_AND_TOKENS = ([1, 2], [2, 1], [-2, -3], [-3, -2])


SEQUENCE_WORDS = {"t", "seq", "len", "tokens", "slen", "seqlen", "length", "tq", "tk", "time"}


def tokens_like(node: cst.CSTNode) -> bool:
    return literal_int(node) == -1 or bool(words(node) & SEQUENCE_WORDS) or m.matches(node, m.Name("T"))


def operator_confuse_head_axes(node: cst.Call) -> Iterator[cst.CSTNode]:
    """Head and token axes confused.  Split: x.view(...).transpose(1, 2) -> x.view(...);
    view(B, T, H, d) -> view(B, H, T, d) and view(T, H, d) -> view(H, T, d).  Merge:
    x.transpose(1, 2).reshape(...) (or .contiguous(), .view(...)) without the transpose;
    x.permute(0, 2, 1, 3) -> x."""
    inner = method_receiver(node)
    name = call_name(node)
    if name == "transpose" and int_args(node) in SWAPS_HEADS_AND_TOKENS:
        if call_name(inner) in ("view", "reshape"):
            yield inner  # split: (B, T, H, d) returned as it is
    if name in ("view", "reshape", "contiguous", "flatten") and call_name(inner) == "transpose":
        if int_args(inner) in SWAPS_HEADS_AND_TOKENS:
            yield node.with_changes(func=node.func.with_changes(value=method_receiver(inner)))  # merge
    if name == "permute" and int_args(node) == [0, 2, 1, 3]:
        yield inner
    if name in ("view", "reshape") and not any(a.keyword or a.star for a in node.args):
        args = list(node.args)
        for i in range(len(args) - 2):  # the last axis is the head size
            if tokens_like(args[i].value) and heads_like(args[i + 1].value) and not heads_like(args[i].value):
                yield node.with_changes(args=swap_args(args, i))


FAULT = Fault(
    "F4",
    "head and sequence axes confused in the head split or merge",
    "ch8",
    ("HEAD-1", "BLOCK-1", "LAYER-1"),
    ((cst.Call, operator_confuse_head_axes),),
    "a layer (the 'layer' capability), or the core where it reshapes heads",
    # a head split or merge: n_head, head_dim (a per-head table's n_heads alone, e.g. sinks.view(1, n_heads,
    # 1, 1), is no split)
    evidence=tuple({verb, "head"} for verb in ("view", "reshape", "transpose", "rearrange")),
    generic=(call_unwrapped,),
)
