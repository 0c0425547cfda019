"""The documented faults of the source chapters as domain mutation operators.

Each operator has mutmut's operator shape: a function that takes one libcst node and yields
mutated copies of it, registered as a ``(node type, function)`` pair in mutmut's operator list
(``mutmut.mutation.mutators.mutation_operators``).  mutmut calls it on every node of that type
inside a function or method body of impl/ and turns each yielded node into one mutant.

An operator that only makes sense over several statements (post-norm, RoPE on V) works on a
function's ``IndentedBlock`` and yields a whole new body: mutmut places a mutant by swapping
one node of the function, and the body is the smallest node holding both changes.

This module imports nothing but libcst: the campaign copies it into its workspace, where the
name ``mutants`` belongs to mutmut's output folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m


@dataclass(frozen=True)
class Fault:
    id: str
    description: str
    source: str  # "ch8": course chapter 8; "book": the AttentionBlock chapter
    kills: tuple[str, ...]  # requirement ids (specs/requirements.toml) expected to kill it
    node_type: type[cst.CSTNode]
    operator: Callable[[cst.CSTNode], Iterator[cst.CSTNode]]


# --- small matching helpers --------------------------------------------------------------------


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier used in ``node`` (plain names and attribute names)."""
    return {n.value for n in m.findall(node, m.Name())}


def mentions(node: cst.CSTNode, word: str) -> bool:
    return any(word in name for name in names_in(node))


def func_name(func: cst.BaseExpression) -> str:
    """'f' for f and 'g' for a.b.g; '' for anything else."""
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return ""


def call_name(node: cst.CSTNode) -> str:
    """'f' for f(...) and 'g' for a.b.g(...); '' for anything else."""
    return func_name(node.func) if isinstance(node, cst.Call) else ""


def method_receiver(node: cst.CSTNode) -> cst.BaseExpression | None:
    """``x`` for x.method(...), else None."""
    return node.func.value if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) else None


def int_args(node: cst.Call) -> list[int | None]:
    return [int(a.value.value) if isinstance(a.value, cst.Integer) else None for a in node.args]


def without_comma(arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)


# --- F1 ----------------------------------------------------------------------------------------


def operator_mask_fill_zero(node: cst.UnaryOperation) -> Iterator[cst.CSTNode]:
    """-math.inf (or -torch.inf, -inf) -> 0.0: the mask adds 0 where it must add -inf."""
    if isinstance(node.operator, cst.Minus) and func_name(node.expression) == "inf":
        yield cst.Float("0.0")


# --- F2 ----------------------------------------------------------------------------------------

_MIRRORED = {
    cst.LessThan: cst.GreaterThan,
    cst.GreaterThan: cst.LessThan,
    cst.LessThanEqual: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.LessThanEqual,
}


def operator_flip_triangle(node: cst.Comparison) -> Iterator[cst.CSTNode]:
    """key <= query -> key >= query (and the band bound key > query - W -> key < query - W)."""
    if len(node.comparisons) != 1:
        return
    target = node.comparisons[0]
    mirrored = _MIRRORED.get(type(target.operator))
    left, right = node.left, target.comparator
    key_vs_query = (mentions(left, "key") and mentions(right, "query")) or (
        mentions(left, "query") and mentions(right, "key")
    )
    if mirrored and key_vs_query:
        yield node.with_changes(comparisons=[target.with_changes(operator=mirrored())])


# --- F3 ----------------------------------------------------------------------------------------


def operator_drop_scale(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """a / sqrt(d) -> a, and scores * scale -> scores: the 1/sqrt(d_k) factor is lost."""
    if isinstance(node.operator, cst.Divide) and call_name(node.right) == "sqrt":
        yield node.left
    if isinstance(node.operator, cst.Multiply):
        if m.matches(node.right, m.Name("scale")):
            yield node.left
        elif m.matches(node.left, m.Name("scale")):
            yield node.right


# --- F4 ----------------------------------------------------------------------------------------


def operator_confuse_head_axes(node: cst.Call) -> Iterator[cst.CSTNode]:
    """x.view(B, T, H, d).transpose(1, 2): transpose dropped, or view(B, H, T, d) without it;
    x.transpose(1, 2).reshape(B, T, D): merged without the transpose."""
    inner = method_receiver(node)
    if call_name(node) == "transpose" and int_args(node) == [1, 2]:
        if call_name(inner) in ("view", "reshape") and len(inner.args) == 4:
            yield inner  # split: (B, T, H, d) returned as it is
            a = inner.args
            swapped = [a[0], a[2].with_changes(comma=a[1].comma), a[1].with_changes(comma=a[2].comma), a[3]]
            yield inner.with_changes(args=swapped)  # split: view(B, H, T, d) straight away
    if (
        call_name(node) in ("view", "reshape")
        and call_name(inner) == "transpose"
        and int_args(inner) == [1, 2]
    ):
        yield node.with_changes(func=node.func.with_changes(value=method_receiver(inner)))  # merge


# --- F5 ----------------------------------------------------------------------------------------


def operator_break_residual(node: cst.Return) -> Iterator[cst.CSTNode]:
    """return x + f(...) -> return f(...), and -> return self.norm(x) + f(...)."""
    value = node.value
    if not (m.matches(value, m.BinaryOperation(operator=m.Add(), left=m.Name(), right=m.Call()))):
        return
    yield node.with_changes(value=value.right)
    normed = cst.Call(func=cst.parse_expression("self.norm"), args=[cst.Arg(value.left)])
    yield node.with_changes(value=value.with_changes(left=normed))


# --- F6 and F7: whole-body operators ------------------------------------------------------------


def residual_return(body: cst.IndentedBlock) -> cst.Return | None:
    """The final ``return x + ...`` of a block body, if it ends with one."""
    last = body.body[-1] if body.body else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
        ret = last.body[0]
        if m.matches(ret.value, m.BinaryOperation(operator=m.Add(), left=m.Name())):
            return ret
    return None


def operator_post_norm(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """x + f(norm(x)) -> norm(x + f(x)): the norm moves from the sublayer input to the sum."""
    ret = residual_return(node)
    if ret is None:
        return
    residual = ret.value.left.value
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


def assigned(statement: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """(name, value) for a statement line ``name = value``."""
    if m.matches(
        statement, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Name())])])
    ):
        assign = statement.body[0]
        return assign.targets[0].target.value, assign.value
    return None


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


# --- F8 ----------------------------------------------------------------------------------------


def operator_window_layers(node: cst.Comparison) -> Iterator[cst.CSTNode]:
    """layer_idx % 2 == 0 -> != 0 (window on odd layers) and -> True (window on every layer)."""
    if len(node.comparisons) != 1 or not m.matches(node.left, m.BinaryOperation(operator=m.Modulo())):
        return
    if not any("layer" in name for name in names_in(node.left)):
        return
    target = node.comparisons[0]
    flipped = {cst.Equal: cst.NotEqual, cst.NotEqual: cst.Equal}.get(type(target.operator))
    if flipped:
        yield node.with_changes(comparisons=[target.with_changes(operator=flipped())])
        yield cst.Name("True")


# --- F9 ----------------------------------------------------------------------------------------


def operator_drop_divisibility_check(node: cst.If) -> Iterator[cst.CSTNode]:
    """if cfg.a % cfg.b != 0: raise ValueError(...) -> if False: ... (the check never fires).

    Only checks on configuration fields (``self.n_heads % self.n_kv_heads``, ``self.head_dim % 2``)
    count: the same test on local tensor sizes at call time is ERR-1's business, not F9's.
    """
    divisibility = m.Comparison(
        left=m.BinaryOperation(operator=m.Modulo(), left=m.Attribute()),
        comparisons=[m.ComparisonTarget(operator=m.NotEqual())],
    )
    raises = m.SimpleStatementLine(body=[m.Raise(exc=m.Call(func=m.Name("ValueError")))])
    if node.orelse is None and m.matches(node.test, divisibility) and m.matches(node.body.body[0], raises):
        yield node.with_changes(test=cst.Name("False"))


# --- F10 ---------------------------------------------------------------------------------------


def operator_ignore_sinks(node: cst.Call) -> Iterator[cst.CSTNode]:
    """f(..., sinks=s) -> f(...), and cat([scores, sink_column]) -> scores."""
    sink_args = [a for a in node.args if a.keyword and "sink" in a.keyword.value]
    if sink_args:
        kept = [a for a in node.args if a not in sink_args]
        if kept:
            kept[-1] = without_comma(kept[-1])
        yield node.with_changes(args=kept)
    if call_name(node) == "cat" and node.args and isinstance(node.args[0].value, cst.List):
        elements = node.args[0].value.elements
        kept = [e for e in elements if not any("sink" in n for n in names_in(e.value))]
        if 0 < len(kept) < len(elements):
            yield (
                kept[0].value if len(kept) == 1 else node.with_deep_changes(node.args[0].value, elements=kept)
            )


# --- F11 ---------------------------------------------------------------------------------------


def operator_evict_off_by_one(node: cst.Call) -> Iterator[cst.CSTNode]:
    """min(length, window) -> min(length, window + 1) and window - 1: a windowed layer's cache
    holds one position too many or too few."""
    if call_name(node) != "min" or len(node.args) != 2:
        return
    if not any(mentions(a.value, "length") for a in node.args):
        return
    for i, arg in enumerate(node.args):
        if func_name(arg.value) == "window" or m.matches(arg.value, m.Name("window")):
            for op in (cst.Add(), cst.Subtract()):
                off = cst.BinaryOperation(left=arg.value, operator=op, right=cst.Integer("1"))
                args = list(node.args)
                args[i] = arg.with_changes(value=off)
                yield node.with_changes(args=args)


# --- F12: whole-body operator ------------------------------------------------------------------


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
        kept = [a for a in call.args if not rope_offset_arg(a)]
        kept[-1] = without_comma(kept[-1])
        return call.with_changes(args=kept)

    yield m.replace(node, rope_with_offset, drop_offset)


# --- F13 ---------------------------------------------------------------------------------------


def operator_swap_cached_kv(node: cst.Call) -> Iterator[cst.CSTNode]:
    """cache.update(k, v, ...) / self.write(k, v) -> (v, k, ...): keys and values swapped on
    their way into the cache."""
    if call_name(node) not in ("update", "write") or len(node.args) < 2:
        return
    first, second = node.args[0], node.args[1]
    if m.matches(first.value, m.Name("k")) and m.matches(second.value, m.Name("v")):
        swapped = [first.with_changes(value=second.value), second.with_changes(value=first.value)]
        yield node.with_changes(args=[*swapped, *node.args[2:]])


FAULTS: tuple[Fault, ...] = (
    Fault(
        "F1",
        "mask adds 0 instead of -inf (additive_mask fill value)",
        "ch8",
        ("MASK-3", "ATTN-2", "ATTN-9"),
        cst.UnaryOperation,
        operator_mask_fill_zero,
    ),
    Fault(
        "F2",
        "upper/lower triangle flipped (causal comparison and band bound mirrored)",
        "ch8",
        ("MASK-1", "MASK-2", "ATTN-2", "ATTN-9"),
        cst.Comparison,
        operator_flip_triangle,
    ),
    Fault(
        "F3",
        "missing 1/sqrt(d_k) scale (default scale 1, or the * scale dropped)",
        "ch8",
        ("ATTN-6", "ATTN-4"),
        cst.BinaryOperation,
        operator_drop_scale,
    ),
    Fault(
        "F4",
        "head and sequence axes confused in split_heads / merge_heads",
        "ch8",
        ("HEAD-1", "BLOCK-1"),
        cst.Call,
        operator_confuse_head_axes,
    ),
    Fault(
        "F5",
        "residual branch dropped, or added to the normalised input",
        "ch8",
        ("BLOCK-1", "BLOCK-2"),
        cst.Return,
        operator_break_residual,
    ),
    Fault(
        "F6",
        "post-norm instead of pre-norm (norm after the residual sum)",
        "book",
        ("BLOCK-1", "BLOCK-2"),
        cst.IndentedBlock,
        operator_post_norm,
    ),
    Fault(
        "F7",
        "RoPE applied to V as well as Q and K",
        "book",
        ("ROPE-4", "BLOCK-1"),
        cst.IndentedBlock,
        operator_rope_on_v,
    ),
    Fault(
        "F8",
        "sliding window on the wrong layers (odd layers, or every layer)",
        "book",
        ("MASK-4", "RF-2"),
        cst.Comparison,
        operator_window_layers,
    ),
    Fault(
        "F9",
        "n_heads % n_kv_heads and even head_dim checks removed",
        "book",
        ("ERR-2",),
        cst.If,
        operator_drop_divisibility_check,
    ),
    Fault(
        "F10",
        "sinks ignored (not passed, or the sink column dropped before the softmax)",
        "book",
        ("BLOCK-5", "SINK-2"),
        cst.Call,
        operator_ignore_sinks,
    ),
    Fault(
        "F11",
        "KV cache eviction off by one (a windowed layer's cache holds W+1 or W-1 positions)",
        "book",
        ("CACHE-2",),
        cst.Call,
        operator_evict_off_by_one,
    ),
    Fault(
        "F12",
        "RoPE offset not applied in decode (every chunk rotated from position 0)",
        "book",
        ("CACHE-1", "CACHE-2"),
        cst.IndentedBlock,
        operator_rope_offset_ignored,
    ),
    Fault(
        "F13",
        "K and V swapped when written to the KV cache",
        "book",
        ("CACHE-1", "CACHE-2"),
        cst.Call,
        operator_swap_cached_kv,
    ),
)

FAULTS_BY_ID = {fault.id: fault for fault in FAULTS}
