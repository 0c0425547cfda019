"""F12: RoPE offset not applied in decode (every chunk rotated from position 0)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import called, keyword_nulled, operand_dropped
from .fault import Fault
from .matchers import (
    CACHE_WORDS,
    call_name,
    drop_args,
    func_name,
    literal_int,
    positional,
    words,
)


def rope_offset_arg(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == "offset"


def operator_rope_offset_ignored(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """apply_rope(q, offset=offset), apply_rope(k, offset=offset) -> both without the offset:
    every chunk is rotated as if it started at position 0, which a full pass cannot see (ROPE-4)
    but a decode step at offset t can."""
    rope_with_offset = m.Call(
        func=m.MatchIfTrue(lambda f: "rope" in func_name(f)),
        args=[m.ZeroOrMore(), m.Arg(keyword=m.Name("offset")), m.ZeroOrMore()],
    )
    if not m.findall(node, rope_with_offset):
        return

    def drop_offset(call: cst.Call, _: object) -> cst.Call:
        return drop_args(call, [a for a in call.args if rope_offset_arg(a)])

    yield m.replace(node, rope_with_offset, drop_offset)


OFFSET_WORDS = {"offset", "past", "seen", "start", "cache", "prefix"}


def triton_call(node: cst.CSTNode) -> bool:
    """tl.arange(0, BLOCK_M): a Triton tile's offsets (start_m * BLOCK_M + tl.arange(...)), no positions."""
    return m.matches(node, m.Call(func=m.Attribute(value=m.Name("tl"))))


def operator_positions_from_zero(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """arange(T) + past_seen_tokens -> arange(T): new tokens numbered from 0 in decode."""
    if not isinstance(node.operator, cst.Add):
        return
    for this, other in ((node.left, node.right), (node.right, node.left)):
        if call_name(this) == "arange" and words(other) & OFFSET_WORDS and not triton_call(this):
            yield this


def operator_arange_from_zero(node: cst.Call) -> Iterator[cst.CSTNode]:
    """arange(past, past + T) -> arange(T) and arange(offset, total) -> arange(total - offset): the
    positions of the new tokens counted from 0 instead of from the tokens already seen."""
    args = positional(node)
    if call_name(node) != "arange" or len(args) != 2 or not words(args[0].value) & OFFSET_WORDS:
        return
    start, stop = args[0].value, args[1].value
    if (
        isinstance(stop, cst.BinaryOperation)
        and isinstance(stop.operator, cst.Add)
        and stop.left.deep_equals(start)
    ):
        count: cst.BaseExpression = stop.right
    elif words(start) & OFFSET_WORDS == {"start"} or isinstance(stop, cst.Call):
        return  # a tile's offsets, arange(start_n, min(start_n + BLOCK_N, n)), are no positions
    else:
        count = cst.BinaryOperation(left=stop, operator=cst.Subtract(), right=start)
    yield node.with_changes(args=[args[1].with_changes(value=count), *node.args[2:]])


SEQ_LENGTH_CALLS = ("get_seq_length", "get_usable_length")  # a cache's count of the tokens it holds


def offset_name(node: cst.CSTNode) -> bool:
    """offset, position_offset, past_len, past_seen_tokens, cache_length: the count of the tokens
    before the new ones (not past_key_values, the cache itself)."""
    w = words(node)
    return bool(w & {"offset"}) or bool(w & {"past", "cache", "prefix"} and w & {"len", "length", "seen"})


def operator_offset_dropped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The tokens already in the cache not counted, so the new ones are numbered from 0:
    cache.get_seq_length() -> 0, and offset = layer_past[0].shape[-2] if layer_past is not None
    else 0 -> offset = 0 (an offset's name given a value read from the cache)."""
    if isinstance(node, cst.Call) and call_name(node) in SEQ_LENGTH_CALLS:
        yield cst.Integer("0")
    if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
        return
    target, value = node.targets[0].target, node.value
    if not isinstance(target, (cst.Name, cst.Attribute)) or not offset_name(target):
        return
    if literal_int(value) is not None or not words(value) & CACHE_WORDS:
        return
    if any(call_name(call) in SEQ_LENGTH_CALLS for call in m.findall(value, m.Call())):
        return  # the call itself is the site
    yield node.with_changes(value=cst.Integer("0"))


FAULT = Fault(
    "F12",
    "RoPE offset not applied in decode (every chunk rotated from position 0)",
    "book",
    ("CACHE-1", "CACHE-2"),
    (
        (cst.IndentedBlock, operator_rope_offset_ignored),
        (cst.BinaryOperation, operator_positions_from_zero),
        (cst.Call, operator_arange_from_zero),
        (cst.Call, operator_offset_dropped),
        (cst.Assign, operator_offset_dropped),
    ),
    "a KV cache, or a layer with the 'offset' capability",
    evidence=tuple(
        {place, offset}
        for place in ("arange", "positions", "position", "rope", "rotary")
        for offset in ("offset", "past", "seen", "start", "prefix")
    ),
    needs="F7",
    generic=(called(operator_arange_from_zero), operand_dropped, keyword_nulled),
)
