"""F24: document boundary leaks by one token (the previous document's last token seen, a cu_seqlens slice)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import bound_toggled, comparison_mirrored
from .fault import Fault
from .matchers import (
    SIZE_WORDS,
    base_of,
    broadcast_axis,
    call_name,
    key_like,
    keys_or_values,
    literal_int,
    name_words,
    names_in,
    positional,
    query_like,
    words,
)

DOCUMENT_WORDS = {"document", "documents", "doc", "docs", "segment", "segments", "packed"}


def document_like(node: cst.CSTNode) -> bool:
    """document_ids, doc_ids, segment_ids, seq_ids, packed_sequence_mask: labels of packed sequences."""
    w = words(node)
    return bool(w & DOCUMENT_WORDS) or bool(w & {"seq", "sequence"} and w & {"id", "ids"})


def attention_side(node: cst.CSTNode) -> str | None:
    """'key' or 'query': the side of attention an expression of labels is read for.  By its index
    first (ids[kv_idx], ids[b, q_idx]), then by its broadcast axis (ids[:, None, :] is a row of keys),
    then by its name (doc_k, queries)."""
    if isinstance(node, cst.Subscript):
        for element in node.slice:
            index = element.slice.value if isinstance(element.slice, cst.Index) else None
            if index is not None and key_like(index):
                return "key"
            if index is not None and query_like(index) and not m.matches(index, m.Name("None")):
                return "query"
    axis = broadcast_axis(node)
    if axis is not None:
        return axis
    base = base_of(node)
    if base is not None and key_like(base):
        return "key"
    if base is not None and query_like(base):
        return "query"
    return None


def next_labels(base: cst.BaseExpression) -> cst.BaseExpression:
    """ids -> each key labelled with the next key's document (the last keeps its own)."""
    code = cst.Module([]).code_for_node(base)
    return cst.parse_expression(f"torch.cat([{code}[..., 1:], {code}[..., -1:]], dim=-1)")


def operator_document_leak(node: cst.Comparison) -> Iterator[cst.CSTNode]:
    """A document boundary that leaks by one token: the key just before a document's first token is
    also seen by that document's queries.  doc[q_idx] == doc[kv_idx] -> that, or doc[q_idx] equals the
    next key's document (the key axis of the labels shifted by one); the same for labels broadcast
    as queries[:, :, None] == document_ids[:, None, :], and != (masked where different) with &."""
    if len(node.comparisons) != 1:
        return
    target = node.comparisons[0]
    if not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
        return
    left, right = node.left, target.comparator
    if (words(left) | words(right)) & SIZE_WORDS:
        return
    sides = attention_side(left), attention_side(right)
    if set(sides) != {"key", "query"}:
        return
    key, query = (left, right) if sides[0] == "key" else (right, left)
    base = base_of(key)
    if base is None or not (document_like(base) or document_like(query)):
        return
    shifted_key = next_labels(base) if base is key else key.deep_replace(base, next_labels(base))
    inner = node.with_changes(lpar=[], rpar=[])
    shifted = inner.deep_replace(key, shifted_key)
    either = cst.BitOr() if isinstance(target.operator, cst.Equal) else cst.BitAnd()
    parens = {"lpar": [cst.LeftParen()], "rpar": [cst.RightParen()]}
    yield cst.BinaryOperation(
        left=inner.with_changes(**parens),
        operator=either,
        right=shifted.with_changes(**parens),
        lpar=node.lpar,
        rpar=node.rpar,
    )


def varlen_loop(node: cst.For) -> bool:
    """A loop over packed documents: it reads cumulative sequence lengths (cu_seqlens, cu_seq_lens_k)."""
    for name in names_in(node):
        w = name_words(name)
        if "cumulative" in w or ("cu" in w and w & {"seqlens", "seqlen", "seq", "lens"}):
            return True
    return False


def operator_varlen_slice_widened(node: cst.For) -> Iterator[cst.CSTNode]:
    """A cu_seqlens slice one token too wide: in a loop over packed documents, every slice of the keys
    and values k[:, :, start:end] -> k[:, :, max(start - 1, 0):end], so that each document's queries
    also see the previous document's last token (the queries' and outputs' slices stay)."""
    if not varlen_loop(node):
        return

    def document_slice(n: cst.CSTNode) -> bool:
        return (
            isinstance(n, cst.Subscript)
            and keys_or_values(n.value)
            and any(
                isinstance(e.slice, cst.Slice) and e.slice.lower is not None and e.slice.upper is not None
                for e in n.slice
            )
        )

    def widened(n: cst.Subscript, _: object) -> cst.Subscript:
        elements = []
        for e in n.slice:
            if isinstance(e.slice, cst.Slice) and e.slice.lower is not None and e.slice.upper is not None:
                lower = cst.parse_expression(f"max({cst.Module([]).code_for_node(e.slice.lower)} - 1, 0)")
                e = e.with_changes(slice=e.slice.with_changes(lower=lower))
            elements.append(e)
        return n.with_changes(slice=elements)

    if m.findall(node.body, m.MatchIfTrue(document_slice)):
        yield node.with_changes(body=m.replace(node.body, m.MatchIfTrue(document_slice), widened))


def cumulative_lengths(node: cst.CSTNode) -> bool:
    """cu_seqlens, cu_seqlens_k, cu_seq_lens: the cumulative lengths of packed sequences."""
    w = words(node)
    return "cu" in w and bool(w & {"seqlens", "seqlen", "seq", "lens"})


def operator_varlen_bound_widened(node: cst.Call) -> Iterator[cst.CSTNode]:
    """A Triton varlen kernel's key range one token too wide: k_start = tl.load(cu_seqlens_k + b) ->
    tl.load(...) - 1 (the previous document's last token read), tl.load(cu_seqlens_k + b + 1) ->
    tl.load(...) + 1 (the next one's first).  Not the queries' bounds (cu_seqlens_q)."""
    args = positional(node)
    if call_name(node) != "load" or not args or not cumulative_lengths(args[0].value):
        return
    pointer = args[0].value
    if words(pointer) & {"q", "query"}:
        return
    end = isinstance(pointer, cst.BinaryOperation) and isinstance(pointer.operator, cst.Add)
    end = end and literal_int(pointer.right) == 1
    yield cst.BinaryOperation(
        left=node, operator=cst.Add() if end else cst.Subtract(), right=cst.Integer("1")
    )


FAULT = Fault(
    "F24",
    "document boundary leaks by one token (the previous document's last token seen, a cu_seqlens slice)",
    "real",
    ("ATTN-16", "ATTN-4"),
    (
        (cst.Comparison, operator_document_leak),
        (cst.For, operator_varlen_slice_widened),
        (cst.Call, operator_varlen_bound_widened),
    ),
    "the 'documents' capability (packed rows: ATTN-16, and every property on them)",
    evidence=(
        {"cu", "seqlens"},
        {"document"},
        {"documents"},
        {"doc", "ids"},
        {"=seq_ids"},
        {"=sequence_ids"},
    ),
    generic=(bound_toggled, comparison_mirrored),
)
