"""F7: RoPE applied to V as well as Q and K, or not applied at all."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import call_unwrapped, operand_dropped
from .fault import Fault
from .matchers import ROTATION, assigned, call_name, mentions, words

ROPE_WORDS = {"rope", "rotary", "rotate", "rot"}


def operator_rope_on_v(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """v = split(v) -> v = rope(split(v), ...): V rotated exactly the way K is."""
    assignments = [a for a in map(assigned, node.body) if a]
    k_rope = [
        value for name, value in assignments if name in ("k", "key", "keys") and "rope" in call_name(value)
    ]
    v_values = [
        value
        for name, value in assignments
        if name in ("v", "value", "values") and not mentions(value, "rope")
    ]
    if not k_rope or not v_values:
        return
    rope, v_value = k_rope[-1], v_values[-1]
    rotated = rope.with_changes(args=[rope.args[0].with_changes(value=v_value), *rope.args[1:]])
    yield node.deep_replace(v_value, rotated)


def is_rotation(func: cst.CSTNode) -> bool:
    """rope, apply_rope, self.rotary, apply_rotary_pos_emb, ..."""
    return bool(words(func) & ROPE_WORDS) or {"pos", "emb"} <= words(func)


def pair_rotation(statement: cst.CSTNode) -> tuple[cst.Assign, cst.Call] | None:
    """``q, k = rope(q, k, ...)`` (any rotary call on two tensors that it rotates in place)."""
    pattern = m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(target=m.Tuple(elements=[m.Element(m.Name()), m.Element(m.Name())]))]
            )
        ]
    )
    if not m.matches(statement, pattern):
        return None
    assign = statement.body[0]
    call = assign.value
    if not (isinstance(call, cst.Call) and is_rotation(call.func)):
        return None
    targets = [e.value.value for e in assign.targets[0].target.elements]
    args = [a.value.value if isinstance(a.value, cst.Name) else None for a in call.args[:2]]
    return (assign, call) if targets == args else None


def value_name(body: cst.IndentedBlock) -> str | None:
    """The name the body keeps its values in (v, value, values, value_states, V, ...)."""
    names = [a[0] for a in map(assigned, body.body) if a]
    for name in names:
        if name in ("v", "V", "value", "values") or name.startswith(("value_", "v_")):
            return name
    return None


def operator_rope_on_v_pair(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """q, k = rope(q, k, *rest) -> the same, then v, _ = rope(v, v, *rest): V rotated too."""
    v = value_name(node)
    if v is None:
        return
    for i, statement in enumerate(node.body):
        found = pair_rotation(statement)
        if found:
            _, call = found
            rotated = call.with_changes(
                args=[
                    call.args[0].with_changes(value=cst.Name(v)),
                    call.args[1].with_changes(value=cst.Name(v)),
                    *call.args[2:],
                ]
            )
            extra = cst.SimpleStatementLine(
                body=[cst.Assign(targets=[cst.AssignTarget(cst.parse_expression(f"{v}, _"))], value=rotated)]
            )
            body = list(node.body)
            body.insert(i + 1, extra)
            yield node.with_changes(body=body)
            return


def operator_drop_rope(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """RoPE not applied: q, k = rope(q, k, ...) -> pass, and q = rope(x, ...) -> q = x."""
    changed = False
    body = []
    for statement in node.body:
        if pair_rotation(statement):
            body.append(cst.SimpleStatementLine(body=[cst.Pass()]))
            changed = True
            continue
        found = assigned(statement)
        if found and isinstance(found[1], cst.Call) and is_rotation(found[1].func) and found[1].args:
            body.append(statement.deep_replace(found[1], found[1].args[0].value))
            changed = True
            continue
        body.append(statement)
    if changed:
        yield node.with_changes(body=body)


def product_with(node: cst.CSTNode, word: str) -> cst.BaseExpression | None:
    """``x`` for ``x * cos`` or ``cos * x`` (any name holding the word), else None."""
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply)):
        return None
    for this, other in ((node.left, node.right), (node.right, node.left)):
        if word in words(other) and word not in words(this):
            return this
    return None


def rotates(node: cst.CSTNode) -> bool:
    """rotate_half(x), self.rotate(x), rot(x): a call of a rotation on one tensor."""
    return isinstance(node, cst.Call) and is_rotation(node.func)


def operator_rotate_half_dropped(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """x * cos + rotate_half(x) * sin -> x (and the same with ``-``): RoPE written inline, not applied."""
    if not isinstance(node.operator, (cst.Add, cst.Subtract)):
        return
    x = product_with(node.left, "cos")
    rotated = product_with(node.right, "sin")
    if x is not None and rotated is not None and rotates(rotated):
        yield x.with_changes(lpar=[], rpar=[])


FAULT = Fault(
    "F7",
    "RoPE applied to V as well as Q and K, or not applied at all",
    "book",
    ("ROPE-4", "BLOCK-1", "LAYER-1"),
    (
        (cst.IndentedBlock, operator_rope_on_v),
        (cst.IndentedBlock, operator_rope_on_v_pair),
        (cst.IndentedBlock, operator_drop_rope),
        (cst.BinaryOperation, operator_rotate_half_dropped),
    ),
    "a layer (the 'layer' capability) that applies RoPE",
    evidence=ROTATION,
    generic=(call_unwrapped, operand_dropped),
)
