"""F27: q/k norm not applied, or applied after RoPE instead of before it."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import call_unwrapped
from .fault import Fault
from .matchers import call_name, name_words, names_in


def qk_norm_name(name: str) -> bool:
    """q_norm, k_norm, qk_norm, query_norm, key_norm, q_layernorm, k_ln: a per-head q or k norm."""
    w = name_words(name)
    normed = bool(w & {"norm", "layernorm", "ln", "rmsnorm"})
    return normed and bool(w & {"q", "k", "qk", "query", "key"}) and not w & {"v", "value", "qkv"}


def qk_norm_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and qk_norm_name(call_name(node)) and len(node.args) >= 1


def operator_qk_norm_dropped(node: cst.Call) -> Iterator[cst.CSTNode]:
    """self.q_norm(x) -> x: the query's (or key's) per-head norm not applied."""
    if qk_norm_call(node):
        yield node.args[0].value


def rope_call(node: cst.CSTNode) -> bool:
    name = call_name(node)
    w = name_words(name)
    return bool(w & {"rope", "rotary"}) or name in ("apply_rotary_pos_emb", "rotate")


def normalises_in_place(statement: cst.CSTNode) -> bool:
    """``q = self.q_norm(q)``, ``q, k = self.q_norm(q), self.k_norm(k)``, or an ``if`` around such:
    a statement that only normalises names already bound, so that it can move."""
    if (
        isinstance(statement, cst.If)
        and statement.orelse is None
        and isinstance(statement.body, cst.IndentedBlock)
    ):
        return bool(statement.body.body) and all(normalises_in_place(s) for s in statement.body.body)
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return False
    calls = small.value.elements if isinstance(small.value, cst.Tuple) else [small.value]
    targets = small.targets[0].target
    names = targets.elements if isinstance(targets, cst.Tuple) else [targets]
    return len(calls) == len(names) and all(
        qk_norm_call(getattr(c, "value", c))
        and m.matches(getattr(n, "value", n), m.Name())
        and names_in(getattr(c, "value", c).args[0].value) == {getattr(n, "value", n).value}
        for c, n in zip(calls, names, strict=True)
    )


def operator_qk_norm_after_rope(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """The q/k norm statement moved after the RoPE statements that follow it: the rotated heads
    normalised (a norm after RoPE)."""
    body = list(node.body)
    for i, statement in enumerate(body):
        if not normalises_in_place(statement):
            continue
        later = [j for j in range(i + 1, len(body)) if m.findall(body[j], m.MatchIfTrue(rope_call))]
        if not later:
            continue
        last = later[0]
        while last + 1 < len(body) and m.findall(body[last + 1], m.MatchIfTrue(rope_call)):
            last += 1
        moved = body[:i] + body[i + 1 : last + 1] + [statement] + body[last + 1 :]
        yield node.with_changes(body=moved)
        return


FAULT = Fault(
    "F27",
    "q/k norm not applied, or applied after RoPE instead of before it",
    "real",
    ("BLOCK-6", "LAYER-1"),
    ((cst.Call, operator_qk_norm_dropped), (cst.IndentedBlock, operator_qk_norm_after_rope)),
    "a layer (the 'layer' capability) that reports q_norm and k_norm",
    # a per-head norm of q or k by its whole name (q and norm on one line are any pre-norm's projection)
    evidence=tuple(
        {f"={name}"} for name in ("q_norm", "k_norm", "qk_norm", "query_norm", "key_norm", "q_layernorm")
    ),
    generic=(call_unwrapped,),
)
