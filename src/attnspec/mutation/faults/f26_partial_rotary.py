"""F26: partial rotary rotating the wrong features (the share dropped: all of d; or the two slices
swapped)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import operand_dropped
from .fault import Fault
from .matchers import call_name, name_words, names_in, words


def rotary_width_name(name: str) -> bool:
    """rotary_dim, rotary_ndims, rot_dim, rotated, rotary_emb_dim, rope_n_elem (litgpt): how many features
    RoPE rotates."""
    w = name_words(name)
    return bool(w & {"rotary", "rot", "rotated", "rope"}) and (
        bool(w & {"dim", "ndims", "dims", "width", "elem"}) or "rotated" in w
    )


def partial_factor_name(name: str) -> bool:
    """partial_rotary_factor, rotary_pct, rotary_percentage: the share of a head RoPE rotates."""
    w = name_words(name)
    return "partial" in w or bool(w & {"rotary", "rot"} and w & {"pct", "percentage", "fraction", "factor"})


def names_partial_factor(node: cst.CSTNode) -> bool:
    """The expression reads a partial-rotary share: a name, or a string key (config["rotary_pct"])."""
    keys = [k.evaluated_value for k in m.findall(node, m.SimpleString()) if isinstance(k, cst.SimpleString)]
    return any(
        partial_factor_name(name) for name in [*names_in(node), *(k for k in keys if isinstance(k, str))]
    )


def operator_partial_factor_dropped(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """head_dim * partial_rotary_factor -> head_dim: the share dropped, every feature rotated."""
    if not isinstance(node.operator, cst.Multiply):
        return
    for factor, other in ((node.right, node.left), (node.left, node.right)):
        if names_partial_factor(factor) and not names_partial_factor(other):
            yield other.with_changes(lpar=[], rpar=[]) if isinstance(other, cst.BinaryOperation) else other
            return


def operator_rotary_width_full(node: cst.IfExp) -> Iterator[cst.CSTNode]:
    """head_dim if rotary_dim is None else rotary_dim -> head_dim: the rotary width ignored."""
    if any(rotary_width_name(name) for name in names_in(node.test)) and any(
        rotary_width_name(name) for name in names_in(node.orelse)
    ):
        if not any(rotary_width_name(name) for name in names_in(node.body)):
            yield node.body


def rotary_slice(node: cst.Subscript) -> tuple[int, cst.Slice] | None:
    """(index, slice) of the one slice ``:r`` or ``r:`` in x[..., :r] / x[..., r:] whose bound names a
    rotary width."""
    found = None
    for i, element in enumerate(node.slice):
        piece = element.slice
        if not isinstance(piece, cst.Slice) or piece.step is not None:
            continue
        bound = piece.upper if piece.lower is None else piece.lower if piece.upper is None else None
        if bound is not None and any(rotary_width_name(name) for name in names_in(bound)):
            if found is not None:
                return None
            found = (i, piece)
    return found


def operator_rotary_slice_swapped(node: cst.Subscript) -> Iterator[cst.CSTNode]:
    """x[..., :rotary_dim] <-> x[..., rotary_dim:]: the pass-through features rotated, the rotated ones
    passed (with r = d/2 the shapes still agree)."""
    found = rotary_slice(node)
    if found is None:
        return
    i, piece = found
    swapped = piece.with_changes(lower=piece.upper, upper=piece.lower)
    elements = list(node.slice)
    elements[i] = elements[i].with_changes(slice=swapped)
    yield node.with_changes(slice=elements)


def operator_rotary_concat_swapped(node: cst.Call) -> Iterator[cst.CSTNode]:
    """torch.cat([rotated, x_pass], dim=-1) -> torch.cat([x_pass, rotated], dim=-1): the rotated
    features put back after the passed ones (GPT-NeoX's and Phi's q_embed, impl's concatenation)."""
    if call_name(node) not in ("cat", "concat", "concatenate") or not node.args:
        return
    parts = node.args[0].value
    if not isinstance(parts, (cst.List, cst.Tuple)) or len(parts.elements) < 2:
        return
    passed = [i for i, e in enumerate(parts.elements) if words(e.value) & {"pass", "passed", "passthrough"}]
    if len(passed) != 1 or passed[0] not in (0, len(parts.elements) - 1):
        return
    i = passed[0]
    elements = list(parts.elements)
    moved = elements.pop(i)
    elements.insert(len(elements) if i == 0 else 0, moved)
    commas = [e.comma for e in parts.elements]
    elements = [e.with_changes(comma=c) for e, c in zip(elements, commas, strict=True)]
    yield node.with_changes(
        args=[node.args[0].with_changes(value=parts.with_changes(elements=elements)), *node.args[1:]]
    )


FAULT = Fault(
    "F26",
    "partial rotary rotating the wrong features (the share dropped: all of d; or the two slices swapped)",
    "real",
    ("ROPE-5", "LAYER-1", "ROPE-3"),
    (
        (cst.BinaryOperation, operator_partial_factor_dropped),
        (cst.IfExp, operator_rotary_width_full),
        (cst.Subscript, operator_rotary_slice_swapped),
        (cst.Call, operator_rotary_concat_swapped),
    ),
    "a rope() that declares rotary_pct, or a layer (the 'layer' capability) that reports rotary_dim",
    evidence=(
        {"partial", "rotary"},
        {"rotary", "dim"},
        {"rotary", "ndims"},
        {"rotary", "pct"},
        {"rot", "dim"},
        {"rope", "elem"},
    ),
    needs="F7",
    generic=(operand_dropped,),
)
