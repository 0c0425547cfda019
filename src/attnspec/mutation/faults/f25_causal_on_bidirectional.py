"""F25: causal mask left on a bidirectional path (causal=causal forced to True, 'if causal' dropped)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import (
    CAUSAL_KEYWORDS,
    CAUSAL_SWITCH,
    causal_keyword,
    func_name,
    key_like,
    query_like,
    replace_arg,
    words,
)


def causal_flag(node: cst.CSTNode) -> bool:
    """causal, is_causal, self.is_causal, config.causal: the switch of a causal mask (not the mask)."""
    return (
        isinstance(node, (cst.Name, cst.Attribute))
        and "causal" in words(node)
        and not words(node) & {"mask", "masks", "fn", "function", "mod"}
    )


def constexpr_flag(node: cst.CSTNode) -> bool:
    """CAUSAL, IS_CAUSAL: a Triton kernel's causal constexpr (its IfExp picks a loop bound, no mask)."""
    return isinstance(node, cst.Name) and node.value.isupper() and causal_flag(node)


def negated_flag(node: cst.CSTNode) -> bool:
    return m.matches(node, m.UnaryOperation(operator=m.Not())) and causal_flag(node.expression)


def mask_branch(node: cst.CSTNode) -> bool:
    """None, or a mask, a bias or a triangle: what a causal switch chooses between."""
    return m.matches(node, m.Name("None")) or bool(words(node) & {"mask", "tril", "triu", "bias", "causal"})


def full_mask_mod(params: cst.Parameters, returned: cst.BaseExpression | None) -> str | None:
    """'kv <= q' for a mask_mod (b, h, q, kv) that lets every query see every key (returns True)."""
    names = [p.name.value for p in params.params]
    if len(names) != 4 or not m.matches(returned, m.Name("True")):
        return None
    q, kv = cst.Name(names[2]), cst.Name(names[3])
    return f"{names[3]} <= {names[2]}" if query_like(q) and key_like(kv) else None


def operator_causal_mask_left_on(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """A causal mask left on a bidirectional path, F19's reverse: f(..., causal=causal) / is_causal=
    self.is_causal -> True; if causal: -> if True: and if not causal: -> if False:; mask if causal else
    None -> mask; self.is_causal = False -> True; a mask_mod lambda b, h, q, kv: True -> kv <= q; and a
    Triton kernel's: kernel[grid](..., IS_CAUSAL=causal) -> True, hi = (start_m + 1) * BLOCK_M if CAUSAL
    else N_CTX -> the causal bound (a constexpr in capitals picks a loop bound, no mask)."""
    if isinstance(node, cst.Call):
        arg = causal_keyword(node)
        if arg is not None and not m.matches(arg.value, m.Name("True")):
            yield replace_arg(node, arg, cst.Name("True"))
    elif isinstance(node, cst.If):
        if causal_flag(node.test):
            yield node.with_changes(test=cst.Name("True"))
        elif negated_flag(node.test):
            yield node.with_changes(test=cst.Name("False"))
    elif isinstance(node, cst.IfExp) and (
        mask_branch(node.body) or mask_branch(node.orelse) or constexpr_flag(node.test)
    ):
        if causal_flag(node.test):
            yield node.body
        elif negated_flag(node.test):
            yield node.orelse
    elif isinstance(node, cst.Assign) and len(node.targets) == 1:
        if func_name(node.targets[0].target) in CAUSAL_KEYWORDS and m.matches(node.value, m.Name("False")):
            yield node.with_changes(value=cst.Name("True"))
    elif isinstance(node, cst.Lambda):
        causal = full_mask_mod(node.params, node.body)
        if causal is not None:
            yield node.with_changes(body=cst.parse_expression(causal))


def operator_full_mask_mod_made_causal(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """def full(b, h, q_idx, kv_idx): return True, defined in a block -> return kv_idx <= q_idx."""
    for statement in node.body:
        if not isinstance(statement, cst.FunctionDef) or not isinstance(statement.body, cst.IndentedBlock):
            continue
        inner = statement.body.body
        if len(inner) != 1 or not m.matches(inner[0], m.SimpleStatementLine(body=[m.Return()])):
            continue
        causal = full_mask_mod(statement.params, inner[0].body[0].value)
        if causal is not None:
            returned = inner[0].body[0].with_changes(value=cst.parse_expression(causal))
            yield node.deep_replace(inner[0].body[0], returned)


FAULT = Fault(
    "F25",
    "causal mask left on a bidirectional path (causal=causal forced to True, 'if causal' dropped)",
    "real",
    ("ATTN-4", "ATTN-7", "MOD-12"),
    (
        (cst.Call, operator_causal_mask_left_on),
        (cst.If, operator_causal_mask_left_on),
        (cst.IfExp, operator_causal_mask_left_on),
        (cst.Assign, operator_causal_mask_left_on),
        (cst.Lambda, operator_causal_mask_left_on),
        (cst.IndentedBlock, operator_full_mask_mod_made_causal),
    ),
    "the 'non_causal' capability (causal=False), a module whose code forwards the causal flag, or an "
    "encoder that declares its all-visible mask_mod (MOD-12)",
    evidence=CAUSAL_SWITCH,
)
