"""F4: head and sequence axes confused in the head split or merge."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import call_unwrapped
from .fault import Fault
from .matchers import call_name, heads_like, literal_int, method_receiver, positional, swap_args, words


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


# einops' axis names for the heads and for the tokens
EINOPS_HEADS = {"h", "heads", "nh", "num_heads"}
EINOPS_TOKENS = {"n", "t", "s", "l", "i", "j", "seq", "seqlen", "len", "time", "tokens"}


def einops_axes(side: str) -> tuple[set[str], list[str]]:
    """The axis names of one side of an einops pattern: those inside parentheses, and the others in order."""
    grouped = set(re.findall(r"\w+", " ".join(re.findall(r"\(([^)]*)\)", side))))
    return grouped, re.findall(r"\w+", re.sub(r"\([^)]*\)", " ", side))


def heads_and_tokens_swapped(side: str) -> str | None:
    """'b h n d' -> 'b n h d': the heads' axis and the tokens' axis beside it exchanged."""
    for heads in EINOPS_HEADS:
        for tokens in EINOPS_TOKENS:
            for first, second in ((heads, tokens), (tokens, heads)):
                found = re.search(rf"(?<![\w(]){first}(\s+){second}(?![\w)])", side)
                if found and "(" not in side[: found.start()].split(")")[-1]:
                    return side[: found.start()] + second + found.group(1) + first + side[found.end() :]
    return None


def operator_confuse_einops_heads(node: cst.Call) -> Iterator[cst.CSTNode]:
    """einops: rearrange(t, 'b n (h d) -> b h n d') -> 'b n (h d) -> b n h d' (split), and
    rearrange(o, 'b h n d -> b n (h d)') -> 'b n h d -> b n (h d)' (merge): the heads' axis and the
    tokens' axis confused on the side where the heads stand alone."""
    args = positional(node)
    if call_name(node) != "rearrange" or len(args) < 2 or not isinstance(args[1].value, cst.SimpleString):
        return
    pattern = args[1].value
    if pattern.value.count("->") != 1:
        return
    left, right = pattern.value.split("->")
    for alone, fused in ((right, left), (left, right)):
        grouped, _ = einops_axes(fused)
        if not grouped & EINOPS_HEADS:
            continue
        swapped = heads_and_tokens_swapped(alone)
        if swapped is not None:
            text = f"{left}->{swapped}" if alone is right else f"{swapped}->{right}"
            new = args[1].with_changes(value=pattern.with_changes(value=text))
            yield node.with_changes(args=[new if a is args[1] else a for a in node.args])
            return


PROGRAM_WORDS = {"hz", "zh", "bh", "hb", "bhid", "pid"}


def program_id_like(node: cst.CSTNode) -> bool:
    """off_hz, pid_bh, bhid, tl.program_id(1): a Triton program's index over batch x heads."""
    return call_name(node) == "program_id" or (
        isinstance(node, (cst.Name, cst.Attribute)) and bool(words(node) & PROGRAM_WORDS)
    )


def operator_program_id_split(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """A Triton kernel's batch and head taken from the wrong part of its program id: off_z = off_hz //
    H -> off_hz % H, off_h = off_hz % H -> off_hz // H (the batch read as the head, or back)."""
    other = {cst.FloorDivide: cst.Modulo, cst.Modulo: cst.FloorDivide}.get(type(node.operator))
    counted = heads_like(node.right) or bool(words(node.right) & {"nheads", "nhead"})
    if other is not None and program_id_like(node.left) and counted:
        yield node.with_changes(operator=other())


FAULT = Fault(
    "F4",
    "head and sequence axes confused in the head split or merge",
    "ch8",
    ("HEAD-1", "BLOCK-1", "LAYER-1"),
    (
        (cst.Call, operator_confuse_head_axes),
        (cst.Call, operator_confuse_einops_heads),
        (cst.BinaryOperation, operator_program_id_split),
    ),
    "a layer (the 'layer' capability), or the core where it reshapes heads or splits a kernel's program id",
    # a head split or merge: n_head, head_dim (a per-head table's n_heads alone, e.g. sinks.view(1, n_heads,
    # 1, 1), is no split)
    evidence=tuple({verb, "head"} for verb in ("view", "reshape", "transpose", "rearrange")),
    generic=(call_unwrapped,),
)
