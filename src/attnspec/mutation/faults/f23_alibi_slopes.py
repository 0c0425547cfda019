"""F23: ALiBi slopes with the sign flipped (m * (q - kv) rewards distant keys) or in the wrong head order."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import operands_swapped
from .fault import Fault
from .matchers import (
    SIZE_WORDS,
    base_of,
    broadcast_axis,
    call_name,
    key_vs_query,
    negated,
    words,
)

SLOPE_WORDS = {"slope", "slopes"}


DISTANCE_WORDS = {"distance", "distances", "dist", "relative", "rel", "arange", "bias", "alibi"}


def slope_like(node: cst.CSTNode) -> bool:
    w = words(node)
    return bool(w & SLOPE_WORDS) and not w & SIZE_WORDS


def is_distance(node: cst.CSTNode) -> bool:
    """key - query in any spelling: key_pos - query_pos, kv_idx - q_idx, j - i, and the broadcast
    pair pos[None, :] - pos[:, None] (either order)."""
    if not m.matches(node, m.BinaryOperation(operator=m.Subtract())):
        return False
    left, right = node.left, node.right
    if key_vs_query(left, right):
        return True
    axes = {broadcast_axis(left), broadcast_axis(right)}
    code = cst.Module([]).code_for_node
    same = (
        base_of(left) is not None
        and base_of(right) is not None
        and code(base_of(left)) == code(base_of(right))
    )
    return axes == {"query", "key"} and same


def alibi_product(node: cst.BinaryOperation) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(slopes, distance) for slopes * distance: a slope per head times key - query positions
    (slopes[:, None, None] * (key_pos - query_pos), slopes[h] * (kv_idx - q_idx)), or times the
    key positions alone (BLOOM: slopes[..., None] * arange_tensor, MPT: alibi_bias * slopes)."""
    if not isinstance(node.operator, cst.Multiply):
        return None
    for slopes, other in ((node.left, node.right), (node.right, node.left)):
        if not slope_like(slopes) or m.findall(slopes, m.MatchIfTrue(is_distance)):
            continue
        distance = bool(m.findall(other, m.MatchIfTrue(is_distance)))
        if distance or call_name(other) == "arange" or words(other) & DISTANCE_WORDS:
            return slopes, other
    return None


def flipped_heads(slopes: cst.BaseExpression) -> cst.BaseExpression | None:
    """slopes[:, None, None] -> slopes.flip(-1)[:, None, None] (a per-head table indexed or reshaped;
    a bare slope is one head's and has no order)."""
    base = base_of(slopes)
    if base is None or base is slopes or not slope_like(base):
        return None
    flipped = cst.parse_expression(f"{cst.Module([]).code_for_node(base)}.flip(-1)")
    return slopes.deep_replace(base, flipped)


def operator_alibi_flipped(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """ALiBi's bias with the sign flipped, m * (q - kv), which rewards distant keys: key_pos - query_pos
    -> query_pos - key_pos inside slopes * (...), and slopes * positions -> slopes * -(positions); and
    with the heads' slopes in the reverse order: slopes[h] -> slopes.flip(-1)[h]."""
    found = alibi_product(node)
    if found is None:
        return
    slopes, other = found
    distances = m.findall(other, m.MatchIfTrue(is_distance))
    if distances:
        d = distances[0]
        swapped = d.with_changes(left=d.right, right=d.left)
        flipped_sign = other.deep_replace(d, swapped) if d is not other else swapped
    else:
        flipped_sign = negated(other)
    yield node.deep_replace(other, flipped_sign)
    heads = flipped_heads(slopes)
    if heads is not None:
        yield node.deep_replace(slopes, heads)


def makes_slopes(node: cst.CSTNode) -> bool:
    return any(call_name(c) and words(c.func) & SLOPE_WORDS for c in m.findall(node, m.Call()))


def operator_slopes_reordered(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The slopes of a head count that is not a power of two put together in the wrong order, so heads
    read other heads' slopes: torch.cat([slopes, extra]) -> torch.cat([extra, slopes]), and
    get_slopes_power_of_2(p) + get_slopes(2 * p)[0::2][: n - p] -> the two lists swapped."""
    if call_name(node) in ("cat", "concat", "concatenate") and node.args:
        listed = node.args[0].value
        if isinstance(listed, (cst.List, cst.Tuple)) and len(listed.elements) == 2:
            first, second = listed.elements
            if any(slope_like(e.value) for e in listed.elements):
                elements = [first.with_changes(value=second.value), second.with_changes(value=first.value)]
                yield node.with_deep_changes(listed, elements=elements)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        if makes_slopes(node.left) and makes_slopes(node.right):
            yield node.with_changes(left=node.right, right=node.left)


FAULT = Fault(
    "F23",
    "ALiBi slopes with the sign flipped (m * (q - kv) rewards distant keys) or in the wrong head order",
    "real",
    ("ATTN-15", "ATTN-4"),
    (
        (cst.BinaryOperation, operator_alibi_flipped),
        (cst.Call, operator_slopes_reordered),
        (cst.BinaryOperation, operator_slopes_reordered),
    ),
    "ALiBi: impl's alibi_slopes, or a target that declares its ALiBi bias as a score_mod (ATTN-4)",
    evidence=({"alibi"}, {"slopes"}),
    generic=(operands_swapped,),
)
