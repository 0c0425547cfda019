"""F22: soft-capping misplaced: after the mask (hidden keys capped to -cap get weight) or before the scale."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import operand_dropped
from .fault import Fault
from .matchers import (
    call_name,
    fill_word,
    is_minus_inf,
    is_square_root,
    mask_operand,
    mentions,
    method_receiver,
    name_words,
    names_in,
    scale_like,
)


def capping_name(name: str) -> bool:
    """softcap, attn_logit_softcapping, logit_cap, cap: a soft-cap's value (not capacity)."""
    return any(w.endswith(("cap", "capping")) for w in name_words(name))


def mentions_cap(node: cst.CSTNode) -> bool:
    return any(capping_name(name) for name in names_in(node))


def statement_target(statement: cst.CSTNode) -> str | None:
    """X for a statement line ``X = ...`` or ``X op= ...`` (one plain name assigned)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
    ):
        return small.targets[0].target.value
    if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
        return small.target.value
    return None


def tanh_assigned(statement: cst.CSTNode) -> str | None:
    """X for ``X = ... tanh(...) ...``."""
    target = statement_target(statement)
    if target is None or not m.findall(statement, m.MatchIfTrue(lambda n: call_name(n) == "tanh")):
        return None
    return target


def cap_unit(body: list[cst.BaseStatement]) -> tuple[int, int, str] | None:
    """(first, last, X): the statements body[first..last] that soft-cap the logits X, the first such in
    the block: ``if softcap is not None:`` around them, ``X = cap * tanh(X / cap)`` alone, or the
    run ``X = X / cap; X = tanh(X); X = X * cap``.  A tanh without a cap (GELU's) is none."""
    for i, statement in enumerate(body):
        if (
            isinstance(statement, cst.If)
            and statement.orelse is None
            and mentions_cap(statement.test)
            and isinstance(statement.body, cst.IndentedBlock)
        ):
            capped = [x for x in map(tanh_assigned, statement.body.body) if x]
            if capped:
                return i, i, capped[-1]
        target = tanh_assigned(statement)
        if target is None:
            continue
        first, last = i, i
        while first > 0 and statement_target(body[first - 1]) == target and mentions_cap(body[first - 1]):
            first -= 1
        while (
            last + 1 < len(body)
            and statement_target(body[last + 1]) == target
            and mentions_cap(body[last + 1])
        ):
            last += 1
        if any(mentions_cap(s) for s in body[first : last + 1]):
            return first, last, target
    return None


def finfo_min(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value == "min" and call_name(node.value) == "finfo"


def applies_mask(statement: cst.CSTNode, x: str) -> bool:
    """The statement masks the logits X: X + mask, X += mask, X.masked_fill(m, v),
    X[..., lo:].add_(additive_mask(m)), torch.where(m, X, -inf)."""
    for node in m.findall(
        statement, m.MatchIfTrue(lambda n: isinstance(n, (cst.BinaryOperation, cst.AugAssign, cst.Call)))
    ):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            if (mask_operand(node.right) and x in names_in(node.left)) or (
                mask_operand(node.left) and x in names_in(node.right)
            ):
                return True
        elif isinstance(node, cst.AugAssign):
            if (
                isinstance(node.operator, cst.AddAssign)
                and x in names_in(node.target)
                and mask_operand(node.value)
            ):
                return True
        elif isinstance(node, cst.Call):
            name, receiver = call_name(node), method_receiver(node)
            on_x = receiver is not None and x in names_in(receiver)
            if name in ("masked_fill", "masked_fill_") and on_x:
                return True
            if name in ("add", "add_") and on_x and any(mentions(a.value, "mask") for a in node.args):
                return True
            values = [a.value for a in node.args]
            if name == "where" and any(x in names_in(v) for v in values):
                if any(is_minus_inf(v) or finfo_min(v) or fill_word(v) for v in values):
                    return True
    return False


def scale_moved(
    statement: cst.SimpleStatementLine, x: str
) -> tuple[cst.BaseStatement | None, cst.BaseStatement] | None:
    """(the statement without the softmax scale, or None when it was the scaling alone; the statement
    that scales X afterwards) for a statement that scales the logits X: X *= sm_scale,
    X = q @ k.T * scaling, X = matmul(q * scale, k.T), X = q @ k.T / sqrt(d)."""
    small = statement.body[0]
    if isinstance(small, cst.AugAssign):
        if (isinstance(small.operator, cst.MultiplyAssign) and scale_like(small.value)) or (
            isinstance(small.operator, cst.DivideAssign) and is_square_root(small.value)
        ):
            return None, statement
        return None
    code = cst.Module([]).code_for_node
    for op in m.findall(small.value, m.BinaryOperation()):
        if isinstance(op.operator, cst.Multiply) and (scale_like(op.right) or scale_like(op.left)):
            kept, factor = (op.left, op.right) if scale_like(op.right) else (op.right, op.left)
            return statement.deep_replace(op, kept), cst.parse_statement(f"{x} = {x} * {code(factor)}")
        if isinstance(op.operator, cst.Divide) and is_square_root(op.right):
            return statement.deep_replace(op, op.left), cst.parse_statement(f"{x} = {x} / {code(op.right)}")
    return None


def operator_softcap_misplaced(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """Soft-capping in the wrong place.  After the mask: the cap moves below the statement that masks
    the logits (scores + mask, masked_fill, add_(additive_mask(m))), so a -inf or finfo.min fill is
    capped to -cap and hidden keys get weight.  Before the scale: the scale leaves the statement that
    scales the logits (X = q @ k.T * scaling, matmul(q * scale, ...), X *= sm_scale) for a statement
    X = X * scale after the cap, which then caps the unscaled q.k.  A cap with neither in its block
    (a FlexAttention score_mod, a model's final-logit cap) has no site."""
    body = list(node.body)
    unit = cap_unit(body)
    if unit is None:
        return
    first, last, x = unit
    capping = body[first : last + 1]
    for j in range(last + 1, len(body)):
        if applies_mask(body[j], x):
            if not m.matches(body[j], m.SimpleStatementLine(body=[m.Return()])):
                yield node.with_changes(
                    body=[*body[:first], *body[last + 1 : j + 1], *capping, *body[j + 1 :]]
                )
            break
    for j in range(first - 1, -1, -1):
        if statement_target(body[j]) != x:
            continue
        moved = scale_moved(body[j], x)
        if moved is not None:
            unscaled, scaling = moved
            kept = [] if unscaled is None else [unscaled]
            yield node.with_changes(
                body=[*body[:j], *kept, *body[j + 1 : last + 1], scaling, *body[last + 1 :]]
            )
            break
        small = body[j].body[0]
        if isinstance(small, cst.Assign) and x not in names_in(small.value):
            break  # X starts here: a scale before it was applied to something else


FAULT = Fault(
    "F22",
    "soft-capping misplaced: after the mask (hidden keys capped to -cap get weight) or before the scale",
    "real",
    ("ATTN-14", "ATTN-4"),
    ((cst.IndentedBlock, operator_softcap_misplaced),),
    "soft-capped logits: impl's softcap, or a target that declares its cap as a score_mod (ATTN-4)",
    evidence=({"softcap"}, {"soft", "cap"}, {"logit", "cap"}),
    generic=(operand_dropped,),
)
