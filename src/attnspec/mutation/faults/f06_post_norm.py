"""F6: post-norm instead of pre-norm (norm after the residual sum)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .fault import Fault
from .matchers import assigned, func_name

RESIDUAL_SUM = m.BinaryOperation(operator=m.Add(), left=m.Name()) | m.BinaryOperation(
    operator=m.Add(), left=~m.Name(), right=m.Name()
)


def residual_of(total: cst.BinaryOperation) -> str:
    """The residual of ``x + f(...)``, or of ``f(...) + x`` (litgpt writes the residual last)."""
    return total.left.value if isinstance(total.left, cst.Name) else total.right.value


def residual_return(body: cst.IndentedBlock) -> cst.Return | None:
    """The final ``return x + ...`` (or ``return ... + x``) of a block body, if it ends with one."""
    last = body.body[-1] if body.body else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
        ret = last.body[0]
        if m.matches(ret.value, RESIDUAL_SUM):
            return ret
    return None


def is_norm_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and "norm" in func_name(node.func).lower()


def operator_post_norm(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """x + f(norm(x)) -> norm(x + f(x)) (and f(norm(x)) + x): the norm moves from the sublayer input to
    the sum."""
    ret = residual_return(node)
    if ret is None:
        return
    residual = residual_of(ret.value)
    is_norm_of_residual = m.Call(
        func=m.MatchIfTrue(lambda func: "norm" in func_name(func).lower()),
        args=[m.Arg(value=m.Name(residual))],
    )
    norm_calls = m.findall(node, is_norm_of_residual)
    if not norm_calls:
        return
    norm_func = norm_calls[0].func
    body = m.replace(node, is_norm_of_residual, lambda call, _: call.args[0].value)  # norm(x) -> x
    new_ret = residual_return(body)
    post = new_ret.with_changes(value=cst.Call(func=norm_func, args=[cst.Arg(new_ret.value)]))
    yield body.deep_replace(new_ret, post)


def operator_post_norm_statements(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """h = norm(x); ...; y = r + h -> h = x; ...; y = norm(r + h) (also y = f(h) + x): the first
    sublayer of a decoder layer written statement by statement (Hugging Face, gpt-oss, litgpt)
    becomes post-norm."""
    statements = list(node.body)
    for i, statement in enumerate(statements):
        first = assigned(statement)
        if not first or not is_norm_call(first[1]) or len(first[1].args) != 1:
            continue
        if not isinstance(first[1].args[0].value, cst.Name):
            continue
        normed = first[1].args[0].value.value
        sum_with_residual = m.BinaryOperation(operator=m.Add(), left=m.Name()) | m.BinaryOperation(
            operator=m.Add(), right=m.Name(normed)
        )
        for later in statements[i + 1 :]:
            second = assigned(later)
            if second and m.matches(second[1], sum_with_residual):
                unnormed = statement.deep_replace(first[1], first[1].args[0].value)
                post = later.deep_replace(second[1], first[1].with_changes(args=[cst.Arg(second[1])]))
                body = [unnormed if s is statement else post if s is later else s for s in statements]
                yield node.with_changes(body=body)
                return
        return


FAULT = Fault(
    "F6",
    "post-norm instead of pre-norm (norm after the residual sum)",
    "book",
    ("BLOCK-1", "BLOCK-2"),
    ((cst.IndentedBlock, operator_post_norm), (cst.IndentedBlock, operator_post_norm_statements)),
    "a layer with its pre-norm (a 'layer' with norm_weight), or a decoder layer",
    evidence=({"norm", "attn"}, {"norm", "attention"}, {"ln"}, {"layernorm"}, {"norm", "hidden"}),
)
