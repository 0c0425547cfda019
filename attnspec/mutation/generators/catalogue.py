"""The documented faults of the source chapters as domain mutation operators.

Each operator has mutmut's operator shape: a function that takes one libcst node and yields
mutated copies of it, registered as a ``(node type, function)`` pair in mutmut's operator list
(``mutmut.mutation.mutators.mutation_operators``).  A campaign calls it on every node of that
type inside a function or method body and turns each yielded node into one mutant.

The operators recognise a fault by what the code does, in the idioms attention code is written
in, not by impl/'s own names: a causal comparison is any order comparison between a key-like and
a query-like index (``key_pos <= query_pos``, ``kv_idx <= q_idx``, ``j <= i``), a mask fill is
``-inf`` in any spelling, ``torch.finfo(dtype).min`` or a ``min_dtype``-like variable handed to a
fill call, the scale is ``/ sqrt(d)``, ``* scaling``, ``*= sm_scale``, ``d ** -0.5`` or a
``scale=`` argument, and so on (each operator's docstring lists what it knows).  A fault may
have several operators, one per idiom.

An operator that only makes sense over several statements (post-norm, RoPE on V, sinks dropped
with their column) works on a function's ``IndentedBlock`` and yields a whole new body: a
mutant swaps one node of the function, and the body is the smallest node holding every change.

This module imports nothing but libcst: the campaign copies it into its workspace, where the
name ``mutants`` belongs to mutmut's output folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

Operator = Callable[[cst.CSTNode], Iterator[cst.CSTNode]]


@dataclass(frozen=True)
class Fault:
    id: str
    description: str
    source: str  # "ch8": course chapter 8; "book": the AttentionBlock chapter; "real": seen in real code
    kills: tuple[str, ...]  # requirement ids (specs/requirements.toml) expected to kill it
    operators: tuple[tuple[type[cst.CSTNode], Operator], ...]
    reached_through: str  # what a target must expose for the kit to exercise the fault's sites


# --- small matching helpers --------------------------------------------------------------------


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier used in ``node`` (plain names and attribute names)."""
    return {n.value for n in m.findall(node, m.Name())}


def mentions(node: cst.CSTNode, word: str) -> bool:
    return any(word in name for name in names_in(node))


def words(node: cst.CSTNode) -> set[str]:
    """The lower-case words of every identifier in ``node``: kv_idx -> {kv, idx}, keyPos -> {key, pos}."""
    found: set[str] = set()
    for name in names_in(node):
        found |= name_words(name)
    return found


def name_words(name: str) -> set[str]:
    """The lower-case words of one name or string key: attention_mask -> {attention, mask}."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return {w for w in re.split(r"[^a-z]+", spaced.lower()) if w}


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


def literal_int(node: cst.CSTNode) -> int | None:
    """The value of an integer literal (``-1`` included), else None."""
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_int(node.expression)
        return None if inner is None else -inner
    return None


def literal_float(node: cst.CSTNode) -> float | None:
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_float(node.expression)
        return None if inner is None else -inner
    return None


def int_args(node: cst.Call) -> list[int | None]:
    return [literal_int(a.value) for a in node.args]


def positional(node: cst.Call) -> list[cst.Arg]:
    return [a for a in node.args if a.keyword is None and not a.star]


def keyword(node: cst.Call, *names: str) -> cst.Arg | None:
    return next((a for a in node.args if a.keyword is not None and a.keyword.value in names), None)


def without_comma(arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)


def replace_arg(node: cst.Call, old: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    return node.with_changes(args=[a.with_changes(value=value) if a is old else a for a in node.args])


def drop_args(node: cst.Call, dropped: list[cst.Arg]) -> cst.Call:
    kept = [a for a in node.args if not any(a is d for d in dropped)]
    if kept:
        kept[-1] = without_comma(kept[-1])
    return node.with_changes(args=kept)


def swap_args(args: list[cst.Arg], i: int) -> list[cst.Arg]:
    """args with the values of positions i and i+1 exchanged (commas stay where they were)."""
    swapped = list(args)
    swapped[i] = args[i].with_changes(value=args[i + 1].value)
    swapped[i + 1] = args[i + 1].with_changes(value=args[i].value)
    return swapped


def negated(expr: cst.BaseExpression) -> cst.BaseExpression:
    value = literal_int(expr)
    if value is not None:
        return cst.parse_expression(str(-value))
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return expr.expression
    return cst.UnaryOperation(
        operator=cst.Minus(), expression=expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    )


def plus(expr: cst.BaseExpression, n: int) -> cst.BaseExpression:
    op = cst.Add() if n > 0 else cst.Subtract()
    return cst.BinaryOperation(left=expr, operator=op, right=cst.Integer(str(abs(n))))


ZERO = cst.Float("0.0")
ONE = cst.Float("1.0")

# Identifier words that mark an index or tensor as the key side or the query side of attention.
KEY_WORDS = {"key", "keys", "k", "kv", "j", "col", "cols", "kpos", "kidx", "src"}
QUERY_WORDS = {"query", "queries", "q", "i", "row", "rows", "qpos", "qidx", "tgt"}
WINDOW_WORDS = {"window", "sliding", "win", "band"}


# Words that name a query's position when nothing names a key (position, pos, p, t).
POSITION_WORDS = {"position", "positions", "pos", "p", "t"}
# Comparisons of sizes are not masks (q.shape[2] < k.shape[2]).
SIZE_WORDS = {"shape", "size", "len", "numel", "dim", "ndim"}


def key_like(node: cst.CSTNode) -> bool:
    w = words(node)
    return bool(w & KEY_WORDS) and not w & QUERY_WORDS and not w & SIZE_WORDS


def query_like(node: cst.CSTNode) -> bool:
    w = words(node)
    if w & KEY_WORDS or w & SIZE_WORDS:
        return False
    return bool(w & QUERY_WORDS or w & POSITION_WORDS)


def key_vs_query(left: cst.CSTNode, right: cst.CSTNode) -> bool:
    if (key_like(left) and query_like(right)) or (query_like(left) and key_like(right)):
        return True
    return cache_positions_against(left, right) or cache_positions_against(right, left)


def cache_positions_against(keys: cst.CSTNode, queries: cst.CSTNode) -> bool:
    """Hugging Face's mask builders: the keys' positions as an arange over the key length
    (torch.arange(target_length)) against the queries' absolute positions (cache_position)."""
    aranges = [c for c in m.findall(keys, m.Call()) if call_name(c) == "arange"]
    return bool(aranges) and not words(keys) & {"cache"} and {"cache", "position"} <= words(queries)


def mentions_window(node: cst.CSTNode) -> bool:
    return bool(words(node) & WINDOW_WORDS)


# --- F1: the mask has no effect ------------------------------------------------------------------

FILL_CALLS = {"masked_fill", "masked_fill_", "where", "full", "new_full", "full_like", "fill_", "fill"}
MASK_KEYWORDS = {"attn_mask", "attn_bias"}  # torch SDPA, xformers (attention_mask is often padding)


def is_minus_inf(node: cst.CSTNode) -> bool:
    """-inf, -math.inf, -torch.inf, -float("inf"), float("-inf")."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = node.expression
        if func_name(inner) == "inf":
            return True
        if call_name(inner) == "float" and inner.args and m.matches(inner.args[0].value, m.SimpleString()):
            return inner.args[0].value.evaluated_value.lower() in ("inf", "infinity")
    if call_name(node) == "float" and node.args and m.matches(node.args[0].value, m.SimpleString()):
        return node.args[0].value.evaluated_value.lower() in ("-inf", "-infinity")
    return False


def operator_mask_fill_zero(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The masked value becomes 0: -inf in any spelling, torch.finfo(dtype).min -> 0.0."""
    if is_minus_inf(node):
        yield ZERO
    elif isinstance(node, cst.Attribute) and node.attr.value == "min" and call_name(node.value) == "finfo":
        yield ZERO


def fill_word(node: cst.CSTNode) -> bool:
    """A variable that holds a fill value: min_dtype, mask_value, neg_inf, large_negative, ..."""
    return isinstance(node, (cst.Name, cst.Attribute)) and bool(
        words(node) & {"min", "inf", "neg", "negative", "fill"}
    )


def operator_mask_not_applied(node: cst.Call) -> Iterator[cst.CSTNode]:
    """A mask that is built but has no effect: masked_fill(m, fill) with a fill variable -> 0.0,
    scores.masked_fill(m, v) -> scores, scores.add_(mask) -> scores, is_causal=True -> False,
    attn_mask=m -> attn_mask=None."""
    name = call_name(node)
    if name in FILL_CALLS:
        for arg in node.args:
            if fill_word(arg.value):
                yield replace_arg(node, arg, ZERO)
    receiver = method_receiver(node)
    positions = receiver is not None and words(receiver) & {"position", "positions", "pos"}
    if name in ("masked_fill", "masked_fill_") and receiver is not None and not positions:
        yield receiver  # (position ids filled where pads are: no mask of scores)
    if (
        name in ("add", "add_")
        and receiver is not None
        and len(node.args) == 1
        and mentions(node.args[0], "mask")
    ):
        yield receiver
    causal = keyword(node, "is_causal")
    if causal is not None and m.matches(causal.value, m.Name("True")):
        yield replace_arg(node, causal, cst.Name("False"))
    mask = keyword(node, *MASK_KEYWORDS)
    if mask is not None and not m.matches(mask.value, m.Name("None")):
        yield replace_arg(node, mask, cst.Name("None"))


def mask_operand(node: cst.CSTNode) -> bool:
    """A mask held in a variable: mask, attention_mask, self.causal_mask, mask[None, None]."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return isinstance(node, (cst.Name, cst.Attribute)) and "mask" in words(node)


def operator_mask_not_added(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """scores + mask -> scores, and the statement scores += mask -> pass."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        if mask_operand(node.right) and not mask_operand(node.left):
            yield node.left
        elif mask_operand(node.left) and not mask_operand(node.right):
            yield node.right
    if (
        isinstance(node, cst.AugAssign)
        and isinstance(node.operator, cst.AddAssign)
        and mask_operand(node.value)
    ):
        yield cst.Pass()


# --- F2 ----------------------------------------------------------------------------------------

_MIRRORED = {
    cst.LessThan: cst.GreaterThan,
    cst.GreaterThan: cst.LessThan,
    cst.LessThanEqual: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.LessThanEqual,
}


def operator_flip_triangle(node: cst.Comparison) -> Iterator[cst.CSTNode]:
    """key <= query -> key >= query, for any key-like and query-like index (kv_idx <= q_idx,
    j <= i, key_pos > query_pos - W): the causal triangle and the band bound mirrored."""
    if len(node.comparisons) != 1:
        return
    target = node.comparisons[0]
    mirrored = _MIRRORED.get(type(target.operator))
    if mirrored and key_vs_query(node.left, target.comparator):
        yield node.with_changes(comparisons=[target.with_changes(operator=mirrored())])


def diagonal_arg(node: cst.Call) -> cst.Arg | None:
    given = keyword(node, "diagonal")
    if given is not None:
        return given
    args = positional(node)
    return args[1] if len(args) > 1 else None


def operator_swap_tril_triu(node: cst.Call) -> Iterator[cst.CSTNode]:
    """tril(x, diagonal=d) <-> triu(x, diagonal=-d): the other triangle is kept or masked."""
    name = call_name(node)
    other = {"tril": "triu", "triu": "tril", "tril_": "triu_", "triu_": "tril_"}.get(name)
    if other is None:
        return
    func = node.func
    func = func.with_changes(attr=cst.Name(other)) if isinstance(func, cst.Attribute) else cst.Name(other)
    diagonal = diagonal_arg(node)
    flipped = node.with_changes(func=func)
    if diagonal is not None:
        flipped = replace_arg(flipped, diagonal, negated(diagonal.value))
    yield flipped


# --- F3 ----------------------------------------------------------------------------------------

SCALE_NAMES = {
    "scale",
    "scaling",
    "sm_scale",
    "softmax_scale",
    "attn_scale",
    "attention_scale",
    "qk_scale",
    "scale_factor",
    "inv_scale",
}
SCALE_KEYWORDS = {"scale", "scaling", "sm_scale", "softmax_scale"}


def scale_like(node: cst.CSTNode) -> bool:
    """A Name or attribute called like a softmax scale (scale, self.scaling, sm_scale, ...)."""
    if isinstance(node, cst.Name):
        return node.value.lower() in SCALE_NAMES
    if isinstance(node, cst.Attribute):
        return node.attr.value.lower() in SCALE_NAMES
    return False


def is_square_root(node: cst.CSTNode) -> bool:
    """sqrt(d), math.sqrt(d), d ** 0.5, d ** (1 / 2)."""
    if call_name(node) == "sqrt":
        return True
    return (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Power)
        and literal_float(node.right) == 0.5
    )


def operator_drop_scale(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """The 1/sqrt(d_k) factor is lost: a / sqrt(d) -> a, a / d ** 0.5 -> a, scores * scale ->
    scores (any softmax-scale name), d ** -0.5 -> 1.0."""
    if isinstance(node.operator, cst.Divide) and is_square_root(node.right):
        yield node.left
    if isinstance(node.operator, cst.Multiply):
        if scale_like(node.right):
            yield node.left
        elif scale_like(node.left):
            yield node.right
    if isinstance(node.operator, cst.Power) and literal_float(node.right) == -0.5:
        yield ONE


def operator_drop_scale_statement(node: cst.AugAssign) -> Iterator[cst.CSTNode]:
    """scores *= sm_scale -> pass, scores /= sqrt(d) -> pass."""
    if isinstance(node.operator, cst.MultiplyAssign) and scale_like(node.value):
        yield cst.Pass()
    if isinstance(node.operator, cst.DivideAssign) and is_square_root(node.value):
        yield cst.Pass()


def operator_unit_scale_argument(node: cst.Call) -> Iterator[cst.CSTNode]:
    """f(..., scale=s) -> f(..., scale=1.0) (also scaling=, sm_scale=, softmax_scale=)."""
    arg = keyword(node, *SCALE_KEYWORDS)
    if arg is not None and not m.matches(arg.value, m.Name("None")) and literal_float(arg.value) != 1.0:
        yield replace_arg(node, arg, ONE)


# --- F4 ----------------------------------------------------------------------------------------

SWAPS_HEADS_AND_TOKENS = ([1, 2], [2, 1], [-2, -3], [-3, -2])
SEQUENCE_WORDS = {"t", "seq", "len", "tokens", "slen", "seqlen", "length", "tq", "tk", "time"}


def heads_like(node: cst.CSTNode) -> bool:
    """n_heads, num_key_value_heads, self.n_head, H (not head_dim)."""
    w = words(node)
    return (
        bool(w & {"heads", "nh"})
        or ("head" in w and not w & {"dim", "size", "d"})
        or m.matches(node, m.Name("H"))
    )


def tokens_like(node: cst.CSTNode) -> bool:
    return literal_int(node) == -1 or bool(words(node) & SEQUENCE_WORDS) or m.matches(node, m.Name("T"))


def operator_confuse_head_axes(node: cst.Call) -> Iterator[cst.CSTNode]:
    """Head and token axes confused.  Split: x.view(...).transpose(1, 2) -> x.view(...);
    view(B, T, H, d) -> view(B, H, T, d) and view(T, H, d) -> view(H, T, d).  Merge:
    x.transpose(1, 2).reshape(...) (or .contiguous(), .view(...)) without the transpose;
    x.permute(0, 2, 1, 3) -> x."""
    inner = method_receiver(node)
    name = call_name(node)
    if name == "transpose" and int_args(node) in SWAPS_HEADS_AND_TOKENS:
        if call_name(inner) in ("view", "reshape"):
            yield inner  # split: (B, T, H, d) returned as it is
    if name in ("view", "reshape", "contiguous", "flatten") and call_name(inner) == "transpose":
        if int_args(inner) in SWAPS_HEADS_AND_TOKENS:
            yield node.with_changes(func=node.func.with_changes(value=method_receiver(inner)))  # merge
    if name == "permute" and int_args(node) == [0, 2, 1, 3]:
        yield inner
    if name in ("view", "reshape") and not any(a.keyword or a.star for a in node.args):
        args = list(node.args)
        for i in range(len(args) - 2):  # the last axis is the head size
            if tokens_like(args[i].value) and heads_like(args[i + 1].value) and not heads_like(args[i].value):
                yield node.with_changes(args=swap_args(args, i))


# --- F5 ----------------------------------------------------------------------------------------

RESIDUAL_NAMES = {"x", "h", "residual", "shortcut", "skip", "identity", "inputs", "hidden_states", "hidden"}


def operator_break_residual(node: cst.Return) -> Iterator[cst.CSTNode]:
    """return x + f(...) -> return f(...), and -> return self.norm(x) + f(...)."""
    value = node.value
    if not (m.matches(value, m.BinaryOperation(operator=m.Add(), left=m.Name(), right=m.Call()))):
        return
    yield node.with_changes(value=value.right)
    normed = cst.Call(func=cst.parse_expression("self.norm"), args=[cst.Arg(value.left)])
    yield node.with_changes(value=value.with_changes(left=normed))


def residual_name(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and (node.value in RESIDUAL_NAMES or "residual" in node.value)


def operator_drop_residual_sum(node: cst.Assign) -> Iterator[cst.CSTNode]:
    """h = residual + h -> h = h, t = x + t -> t = t, h = residual + dropout(a) -> h = dropout(a):
    the residual branch is dropped from a sum written as an assignment."""
    value = node.value
    if not m.matches(value, m.BinaryOperation(operator=m.Add())):
        return
    left, right = value.left, value.right
    if m.matches(left, m.Name()) and m.matches(right, m.Name()) and left.value == right.value:
        return
    if residual_name(left) and not residual_name(right):
        yield node.with_changes(value=right)
    elif residual_name(right) and not residual_name(left):
        yield node.with_changes(value=left)
    elif residual_name(left) and residual_name(right):  # h = residual + h: the saved input is the residual
        kept = right if "residual" in left.value or left.value == "x" else left
        yield node.with_changes(value=kept)


# --- F6 and F7: whole-body operators ------------------------------------------------------------


def residual_return(body: cst.IndentedBlock) -> cst.Return | None:
    """The final ``return x + ...`` of a block body, if it ends with one."""
    last = body.body[-1] if body.body else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
        ret = last.body[0]
        if m.matches(ret.value, m.BinaryOperation(operator=m.Add(), left=m.Name())):
            return ret
    return None


def is_norm_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and "norm" in func_name(node.func).lower()


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


def operator_post_norm_statements(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """h = norm(x); ...; y = r + h -> h = x; ...; y = norm(r + h): the first sublayer of a
    decoder layer written statement by statement (Hugging Face, gpt-oss) becomes post-norm."""
    statements = list(node.body)
    for i, statement in enumerate(statements):
        first = assigned(statement)
        if not first or not is_norm_call(first[1]) or len(first[1].args) != 1:
            continue
        if not isinstance(first[1].args[0].value, cst.Name):
            continue
        for later in statements[i + 1 :]:
            second = assigned(later)
            if second and m.matches(second[1], m.BinaryOperation(operator=m.Add(), left=m.Name())):
                unnormed = statement.deep_replace(first[1], first[1].args[0].value)
                post = later.deep_replace(second[1], first[1].with_changes(args=[cst.Arg(second[1])]))
                body = [unnormed if s is statement else post if s is later else s for s in statements]
                yield node.with_changes(body=body)
                return
        return


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


# --- F8 ----------------------------------------------------------------------------------------


def operator_window_layers(node: cst.Comparison) -> Iterator[cst.CSTNode]:
    """layer_idx % 2 == 0 -> != 0 (window on odd layers) and -> True (window on every layer);
    layer_type == "sliding_attention" -> != and -> True."""
    if len(node.comparisons) != 1:
        return
    target = node.comparisons[0]
    flipped = {cst.Equal: cst.NotEqual, cst.NotEqual: cst.Equal}.get(type(target.operator))
    if not flipped:
        return
    parity = m.matches(node.left, m.BinaryOperation(operator=m.Modulo())) and "layer" in words(node.left)
    sliding = any(
        isinstance(side, cst.SimpleString) and "sliding" in side.evaluated_value
        for side in (node.left, target.comparator)
    )
    if parity or sliding:
        yield node.with_changes(comparisons=[target.with_changes(operator=flipped())])
        yield cst.Name("True")


def layer_types_lookup(node: cst.CSTNode) -> bool:
    """config.layer_types[i] (any receiver): the schedule's entry for layer i."""
    return (
        isinstance(node, cst.Subscript)
        and isinstance(node.value, cst.Attribute | cst.Name)
        and "layer_types" in names_in(node.value)
        and len(node.slice) == 1
    )


def operator_schedule_lookup(node: cst.Subscript) -> Iterator[cst.CSTNode]:
    """masks[config.layer_types[i]] -> masks["full_attention"] (the window reaches no layer) and ->
    masks[config.layer_types[i - 1]] (each layer gets its predecessor's kind): how a model picks each
    layer's mask from its schedule (transformers' causal_mask_mapping)."""
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return
    entry = node.slice[0].slice.value
    if not layer_types_lookup(entry):
        return
    yield node.with_changes(
        slice=[node.slice[0].with_changes(slice=cst.Index(cst.SimpleString('"full_attention"')))]
    )
    index = entry.slice[0].slice
    if isinstance(index, cst.Index):
        shifted = entry.with_changes(
            slice=[entry.slice[0].with_changes(slice=cst.Index(plus(index.value, -1)))]
        )
        yield node.with_changes(slice=[node.slice[0].with_changes(slice=cst.Index(shifted))])


def operator_window_choice_dropped(node: cst.IfExp) -> Iterator[cst.CSTNode]:
    """A if config.sliding_window is None else B -> A (and B if w is not None else A -> A): the choice of
    the windowed mask (or path) dropped, as if no window were configured."""
    test = node.test
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and mentions_window(test.left)):
        return
    target = test.comparisons[0]
    if not m.matches(target.comparator, m.Name("None")):
        return
    if isinstance(target.operator, cst.Is):
        yield node.body
    elif isinstance(target.operator, cst.IsNot):
        yield node.orelse


def operator_window_not_passed(node: cst.Call) -> Iterator[cst.CSTNode]:
    """f(..., window=w) -> f(..., window=None) (also sliding_window=): the window never arrives."""
    arg = keyword(node, "window", "sliding_window", "window_size")
    if arg is not None and not m.matches(arg.value, m.Name("None")):
        yield replace_arg(node, arg, cst.Name("None"))


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
        yield drop_args(node, sink_args)
    if call_name(node) == "cat" and node.args and isinstance(node.args[0].value, cst.List):
        elements = node.args[0].value.elements
        kept = [e for e in elements if not any("sink" in n for n in names_in(e.value))]
        if 0 < len(kept) < len(elements):
            yield (
                kept[0].value if len(kept) == 1 else node.with_deep_changes(node.args[0].value, elements=kept)
            )


def last_column_concat(node: cst.CSTNode) -> cst.BaseExpression | None:
    """``scores`` for cat([scores, extra], dim=-1) / cat((scores, extra), -1), else None."""
    if call_name(node) not in ("cat", "concat", "concatenate") or not node.args:
        return None
    listed = node.args[0].value
    if not isinstance(listed, (cst.List, cst.Tuple)) or len(listed.elements) != 2:
        return None
    dim = keyword(node, "dim", "axis") or (positional(node)[1] if len(positional(node)) > 1 else None)
    return listed.elements[0].value if dim is not None and literal_int(dim.value) == -1 else None


def drops_last_column(node: cst.CSTNode) -> bool:
    """x[..., :-1]"""
    return m.matches(
        node,
        m.Subscript(
            slice=[
                m.SubscriptElement(m.Index(m.Ellipsis())),
                m.SubscriptElement(
                    m.Slice(lower=None, upper=m.UnaryOperation(operator=m.Minus(), expression=m.Integer("1")))
                ),
            ]
        ),
    )


def operator_sink_column_dropped(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """s = cat([scores, sinks], dim=-1); ...; w = p[..., :-1] -> s = scores; ...; w = p: the sink
    column never enters the softmax (whatever the sinks are called)."""
    concats = m.findall(node, m.MatchIfTrue(lambda n: last_column_concat(n) is not None))
    drops = m.findall(node, m.MatchIfTrue(drops_last_column))
    if len(concats) != 1 or not drops:
        return
    body = m.replace(
        node, m.MatchIfTrue(lambda n: last_column_concat(n) is not None), lambda n, _: last_column_concat(n)
    )
    yield m.replace(body, m.MatchIfTrue(drops_last_column), lambda n, _: n.value)


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
            for n in (1, -1):
                args = list(node.args)
                args[i] = arg.with_changes(value=plus(arg.value, n))
                yield node.with_changes(args=args)


# --- F12 ---------------------------------------------------------------------------------------


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


def operator_positions_from_zero(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """arange(T) + past_seen_tokens -> arange(T): new tokens numbered from 0 in decode."""
    if not isinstance(node.operator, cst.Add):
        return
    for this, other in ((node.left, node.right), (node.right, node.left)):
        if call_name(this) == "arange" and words(other) & OFFSET_WORDS:
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
CACHE_WORDS = {"past", "cache", "cached", "layer", "seen", "seq", "length", "len"}


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


# --- F13 ---------------------------------------------------------------------------------------


def operator_swap_cached_kv(node: cst.Call) -> Iterator[cst.CSTNode]:
    """cache.update(k, v, ...) / self.write(key_states, value_states) -> (v, k, ...): keys and
    values swapped on their way into the cache."""
    if call_name(node) not in ("update", "write", "append", "store") or len(node.args) < 2:
        return
    first, second = node.args[0], node.args[1]
    if first.keyword or second.keyword:
        return
    key_words = words(first.value) & {"k", "key", "keys"}
    value_words = words(second.value) & {"v", "value", "values"}
    if key_words and value_words:
        yield node.with_changes(args=swap_args(list(node.args), 0))


def cache_like(node: cst.CSTNode) -> bool:
    """layer_past, past_key_value, present, self.key_cache[i]: something read from or kept in a cache."""
    return bool(words(node) & {"past", "cache", "present", "cached"})


def key_value_pair(pair: cst.BaseExpression) -> cst.Tuple | None:
    """(k, v) of keys then values, as a tuple of two."""
    if isinstance(pair, cst.Tuple) and len(pair.elements) == 2:
        first, second = (e.value for e in pair.elements)
        if key_like(first) and value_like(second) and not value_like(first) and not key_like(second):
            return pair
    return None


def swapped(pair: cst.Tuple) -> cst.Tuple:
    first, second = pair.elements
    return pair.with_changes(
        elements=[first.with_changes(value=second.value), second.with_changes(value=first.value)]
    )


def operator_cached_pair_swapped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Keys and values swapped on their way into or out of a cache kept as a pair:
    present = (key, value) if use_cache else None -> (value, key); past_key, past_value = layer_past
    -> past_value, past_key; return self.key_cache[i], self.value_cache[i] -> the other way round."""
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        target, value = node.targets[0].target, node.value
        pair = key_value_pair(target)
        if pair is not None and cache_like(value) and not isinstance(value, cst.Call):  # update(): above
            yield node.with_changes(targets=[node.targets[0].with_changes(target=swapped(pair))])
        body = value.body if isinstance(value, cst.IfExp) else value
        pair = key_value_pair(body)
        if pair is not None and cache_like(target):
            new = swapped(pair)
            yield node.with_changes(value=value.with_changes(body=new) if body is not value else new)
    if isinstance(node, cst.Return) and node.value is not None:
        pair = key_value_pair(node.value)
        if pair is not None and all(cache_like(e.value) for e in pair.elements):
            yield node.with_changes(value=swapped(pair))


# --- F17..F21: the plumbing between a model and its attention ------------------------------------


PADDING_WORDS = {"padding", "pad", "pads"}


def padding_like(node: cst.CSTNode) -> bool:
    """A padding mask, or something read from one: padding_mask, key_padding_mask[b], pads[:, lo:hi]."""
    return bool(words(node) & PADDING_WORDS)


def operator_padding_ignored(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The padding mask never reaches the scores: f(..., padding_mask=m) -> padding_mask=None,
    and_masks(causal, padding_mask_function(m)) -> and_masks(causal), allowed & pads[...] -> allowed."""
    if isinstance(node, cst.Call):
        for arg in node.args:
            if (
                arg.keyword is not None
                and padding_like(arg.keyword)
                and not m.matches(arg.value, m.Name("None"))
            ):
                yield replace_arg(node, arg, cst.Name("None"))
        args = positional(node)
        if len(args) >= 2 and words(node.func) & {"and", "combine"}:
            for arg in args:
                if padding_like(arg.value):
                    yield drop_args(node, [arg])
    elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitAnd):
        if users_mask_like(node.right) and not users_mask_like(node.left):
            yield node.left
        elif users_mask_like(node.left) and not users_mask_like(node.right):
            yield node.right


def users_mask_like(node: cst.CSTNode) -> bool:
    """A padding mask, or the ``attention_mask`` a model's caller passes (which marks the pads)."""
    return padding_like(node) or "attention_mask" in names_in(node)


def operator_padding_inverted(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pads taken for real tokens and real tokens for pads: padding_mask[b, kv] -> ~padding_mask[b, kv],
    attention_mask == 1 -> attention_mask == 0 (and != 0 -> != 1)."""
    if (
        isinstance(node, cst.Subscript)
        and isinstance(node.value, (cst.Name, cst.Attribute))
        and padding_like(node.value)
    ):
        yield cst.UnaryOperation(operator=cst.BitInvert(), expression=node)
    elif isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        target = node.comparisons[0]
        value = literal_int(target.comparator)
        if value in (0, 1) and isinstance(target.operator, (cst.Equal, cst.NotEqual)):
            named = words(node.left)
            if "mask" in named and named & {"attention", "padding", "pad"} and not named & SIZE_WORDS:
                flipped = target.with_changes(comparator=cst.Integer(str(1 - value)))
                yield node.with_changes(comparisons=[flipped])


MASK_NAMES = {"mask", "masks"}
CACHE_WORDS = {"cache", "past", "cached"}


def mask_name(name: str) -> bool:
    """attention_mask, padding_mask, attn_mask, mask: a mask itself (not or_mask_function, a mask's maker)."""
    named = name_words(name)
    return bool(named & MASK_NAMES) and not named & {"function", "fn", "factory"}


def dict_key(element: cst.BaseDictElement) -> str:
    """The key of {"key": value} when it is a plain string literal, else ''."""
    key = element.key if isinstance(element, cst.DictElement) else None
    value = key.evaluated_value if isinstance(key, cst.SimpleString) else None
    return value if isinstance(value, str) else ""


def cache_expression(node: cst.Call | cst.Dict) -> cst.BaseExpression | None:
    """The cache handed on with a mask: cache=..., past_key_values=..., or a positional layer_cache."""
    if isinstance(node, cst.Dict):
        for element in node.elements:
            if name_words(dict_key(element)) & CACHE_WORDS:
                return element.value
        return None
    for arg in node.args:
        named = arg.keyword is not None and words(arg.keyword) & CACHE_WORDS
        if named or (arg.keyword is None and words(arg.value) & CACHE_WORDS):
            return arg.value
    return None


def dropped_with(cache: cst.BaseExpression, value: cst.BaseExpression) -> cst.BaseExpression:
    """``None if cache is not None else value``; a cache expression that is not a name, an attribute, a
    subscript or a call is parenthesised (T5 hands over ``cache=c if use_cache else None``, which would
    otherwise read as a conditional inside the test)."""
    if not isinstance(cache, cst.Name | cst.Attribute | cst.Subscript | cst.Call) and not cache.lpar:
        cache = cache.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    test = cst.Comparison(left=cache, comparisons=[cst.ComparisonTarget(cst.IsNot(), cst.Name("None"))])
    return cst.IfExp(test=test, body=cst.Name("None"), orelse=value.with_changes(lpar=[], rpar=[]))


def operator_mask_dropped_with_cache(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """layer(x, attention_mask=m, cache=c) -> attention_mask=(None if c is not None else m), and the
    same for a {"attention_mask": m, "cache": c} of keyword arguments: once a cache is attached, the
    mask is skipped (the chunk sees its own future, the pads are attended)."""
    if not isinstance(node, (cst.Call, cst.Dict)):
        return
    cache = cache_expression(node)
    if cache is None:
        return
    if isinstance(node, cst.Call):
        for arg in node.args:
            if arg.keyword is not None and mask_name(arg.keyword.value):
                if not m.matches(arg.value, m.Name("None")):
                    yield replace_arg(node, arg, dropped_with(cache, arg.value))
        return
    for element in node.elements:
        if mask_name(dict_key(element)):
            changed = element.with_changes(value=dropped_with(cache, element.value))
            yield node.with_changes(elements=[changed if e is element else e for e in node.elements])


CAUSAL_KEYWORDS = ("is_causal", "causal")


def operator_causal_flag_lost(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The causal flag lost on its way: f(..., causal=causal) / is_causal=self.is_causal / causal=True
    -> False, and self.is_causal = True -> False (F1 has the literal is_causal=True of a call)."""
    if isinstance(node, cst.Call):
        arg = keyword(node, *CAUSAL_KEYWORDS)
        if arg is None or m.matches(arg.value, m.Name("False")):
            return
        if arg.keyword.value == "is_causal" and m.matches(arg.value, m.Name("True")):
            return  # F1's
        yield replace_arg(node, arg, cst.Name("False"))
    elif isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
        if (
            func_name(target) in CAUSAL_KEYWORDS
            and isinstance(node.value, (cst.Name, cst.Attribute, cst.UnaryOperation))
            and not m.matches(node.value, m.Name("False"))
        ):  # a flag (True, config.is_decoder, not bidirectional), not a mask named causal
            yield node.with_changes(value=cst.Name("False"))


def window_attribute(node: cst.CSTNode) -> cst.Attribute | None:
    """The first self.<window> (self.window, self.sliding_window) a block mentions."""
    for found in m.findall(node, m.Attribute(value=m.Name("self"))):
        if words(found.attr) & WINDOW_WORDS:
            return found
    return None


def concat_dim(node: cst.CSTNode) -> int | None:
    """The axis of cat([...], dim=d) / cat([...], d) with a literal d, else None."""
    if call_name(node) not in ("cat", "concat", "concatenate"):
        return None
    arg = dim_arg(node, 1)
    return None if arg is None else literal_int(arg.value)


def last_positions(expr: cst.BaseExpression, dim: int, window: cst.Attribute) -> cst.BaseExpression:
    """expr[..., -W:, :] (dim -2) or expr[:, :, -W:] (dim 2): the last W positions along dim."""
    code = cst.Module([]).code_for_node
    keep = f"-{code(window)}:"
    index = ", ".join(["...", keep] + [":"] * (-dim - 1)) if dim < 0 else ", ".join([":"] * dim + [keep])
    return cst.parse_expression(f"({code(expr)})[{index}]")


def operator_cache_trimmed_early(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """A windowed cache that hands the chunk only what it keeps: return torch.cat([old_k, k], dim=2), ...
    -> each trimmed to the last self.window positions, and self.keys = full[..., -w + 1:, :] ...
    return full, ... -> return self.keys, ...: the first queries of a chunk of several tokens lose
    keys their window still covers."""
    window = window_attribute(node)
    if window is None:
        return
    kept: dict[str, cst.BaseExpression] = {}  # returned name -> the self attribute that keeps a slice of it
    for statement in node.body:
        line = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(line, cst.Assign) and len(line.targets) == 1 and isinstance(line.value, cst.Subscript):
            target, source = line.targets[0].target, line.value.value
            if isinstance(target, cst.Attribute) and isinstance(source, cst.Name):
                kept[source.value] = target
        if not isinstance(line, cst.Return) or line.value is None:
            continue
        returned = line.value.elements if isinstance(line.value, cst.Tuple) else None
        values = [e.value for e in returned] if returned else [line.value]
        if all(isinstance(v, cst.Name) and v.value in kept for v in values):
            trimmed = [kept[v.value] for v in values]
        elif all(concat_dim(v) is not None for v in values):
            trimmed = [last_positions(v, concat_dim(v), window) for v in values]
        else:
            continue
        value = cst.Tuple([cst.Element(v) for v in trimmed], lpar=[], rpar=[]) if returned else trimmed[0]
        new_line = statement.with_changes(body=[line.with_changes(value=value)])
        yield node.with_changes(body=[new_line if s is statement else s for s in node.body])


def operator_dropout_left_on(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Dropout not switched off in eval: dropout(x, p, training=self.training) -> training=True, and
    0.0 if not self.training else p -> p (p if self.training else 0 -> p)."""
    if isinstance(node, cst.Call) and "dropout" in call_name(node):
        arg = keyword(node, "training", "train")
        if arg is None and len(positional(node)) >= 3:
            arg = positional(node)[2]
        if arg is not None and not m.matches(arg.value, m.Name("True")):
            yield replace_arg(node, arg, cst.Name("True"))
    elif isinstance(node, cst.IfExp) and "training" in words(node.test):
        negative = isinstance(node.test, cst.UnaryOperation) and isinstance(node.test.operator, cst.Not)
        yield node.orelse if negative else node.body


# --- F14, F15, F16: siblings of the chapters' faults that real code shows -------------------------


def dim_arg(node: cst.Call, position: int) -> cst.Arg | None:
    given = keyword(node, "dim", "axis")
    if given is not None:
        return given
    args = positional(node)
    return args[position] if len(args) > position else None


TENSOR_LIBRARIES = {"torch", "F", "functional", "nn", "special"}
# What attention code calls the logits it normalises (scores, attn_weights, QK, combined_logits, ...).
SCORE_WORDS = {
    "scores",
    "score",
    "logits",
    "logit",
    "attn",
    "attention",
    "weights",
    "qk",
    "att",
    "sim",
    "dots",
}


def is_method_call(node: cst.Call) -> bool:
    """x.f(...) on a tensor, not torch.f(...) or F.f(...)."""
    receiver = method_receiver(node)
    return receiver is not None and func_name(receiver) not in TENSOR_LIBRARIES


def operator_softmax_axis(node: cst.Call) -> Iterator[cst.CSTNode]:
    """softmax(scores, dim=-1) -> softmax(scores, dim=-2) (also s.softmax(-1), dim=3 -> 2):
    normalised over the queries instead of the keys.  Only the softmax of attention logits
    (named scores, logits, attn_weights, QK, ...): a router's softmax is not attention."""
    if call_name(node) == "sum" and is_method_call(node) and exponentials(method_receiver(node)):
        yield from normalised_over_queries(node, dim_arg(node, 0))  # a softmax written out: e / e.sum(-1)
        return
    if call_name(node) not in ("softmax", "log_softmax", "_softmax", "safe_softmax"):
        return
    operand = method_receiver(node) if is_method_call(node) else (node.args[0].value if node.args else None)
    if operand is None or not words(operand) & SCORE_WORDS:  # a router's or a sampler's softmax
        return
    yield from normalised_over_queries(node, dim_arg(node, 0 if is_method_call(node) else 1))


def exponentials(node: cst.CSTNode) -> bool:
    """exps, p, torch.exp(...): what a written-out softmax sums."""
    return call_name(node) == "exp" or bool(words(node) & {"exp", "exps", "p", "probs", "numerator", "e"})


def normalised_over_queries(node: cst.Call, arg: cst.Arg | None) -> Iterator[cst.CSTNode]:
    value = None if arg is None else literal_int(arg.value)
    if value == -1:
        yield replace_arg(node, arg, cst.parse_expression("-2"))
    elif value is not None and value >= 1:
        yield replace_arg(node, arg, cst.Integer(str(value - 1)))


def operator_gqa_tile_order(node: cst.Call) -> Iterator[cst.CSTNode]:
    """KV heads repeated in tile order (h -> h mod Hkv) instead of interleaved (h -> h // r):
    repeat_interleave(x, r, dim=d) -> cat([x] * r, dim=d); x[:, :, None].expand(B, Hkv, r, ...)
    -> x[:, None].expand(B, r, Hkv, ...); view(..., Hkv, r, ...) -> view(..., r, Hkv, ...);
    einops' repeat(x, "b h n d -> b (h r) n d", r=g) -> "(r h)"."""
    name = call_name(node)
    yield from einops_regrouped(node, interleaved=True)
    if name == "repeat_interleave":
        receiver = method_receiver(node)
        args = positional(node)
        if is_method_call(node):
            tensor, repeats = receiver, args[0].value if args else None
        else:
            tensor, repeats = (args[0].value if args else None), (args[1].value if len(args) > 1 else None)
        dim = keyword(node, "dim")
        if tensor is not None and repeats is not None and dim is not None:
            yield cst.parse_expression("torch.cat([__tensor__] * (__repeats__), dim=__dim__)").visit(
                _Fill({"__tensor__": tensor, "__repeats__": repeats, "__dim__": dim.value})
            )
    if name == "expand":
        receiver = method_receiver(node)
        if isinstance(receiver, cst.Subscript):
            elements = list(receiver.slice)
            spots = [
                i for i, e in enumerate(elements) if m.matches(e, m.SubscriptElement(m.Index(m.Name("None"))))
            ]
            args = list(node.args)
            # x[:, :, None].expand(b, h, r, t, d): the dims after the last index are implicit
            if len(spots) == 1 and spots[0] >= 1 and len(args) >= len(elements):
                p = spots[0]
                moved = list(elements)
                moved[p - 1], moved[p] = (
                    elements[p].with_changes(comma=elements[p - 1].comma),
                    elements[p - 1].with_changes(comma=elements[p].comma),
                )
                yield node.with_changes(
                    func=node.func.with_changes(value=receiver.with_changes(slice=moved)),
                    args=swap_args(args, p - 1),
                )
    if name in ("view", "reshape") and not any(a.keyword or a.star for a in node.args):
        args = list(node.args)
        for i in range(len(args) - 1):
            kv = words(args[i].value) & {"kv"} or {"key", "value"} <= words(args[i].value)
            group = isinstance(args[i + 1].value, cst.BinaryOperation) and isinstance(
                args[i + 1].value.operator, cst.FloorDivide
            )
            group = group or bool(words(args[i + 1].value) & {"mult", "rep", "group", "groups", "repeats"})
            if kv and group:
                yield node.with_changes(args=swap_args(args, i))


VALUE_WORDS = {"v", "value", "values", "val", "vals"}


def value_like(node: cst.CSTNode) -> bool:
    w = words(node)
    return bool(w & VALUE_WORDS) and not w & QUERY_WORDS and not w & SIZE_WORDS


def keys_or_values(node: cst.CSTNode) -> bool:
    """k, key_states, v, value_states, self.v_cache: a tensor of keys or values."""
    return key_like(node) or value_like(node)


EINOPS_GROUP = re.compile(r"\(\s*(\w+)\s+(\w+)\s*\)")


def einops_regrouped(node: cst.Call, interleaved: bool) -> Iterator[cst.CSTNode]:
    """An einops repeat of the head axis in the other order: in "b h n d -> b (h r) n d" with r=g
    given by keyword, (h r) repeats each head r times in a row (interleaved), (r h) the r copies of
    every head one after another (tile order).  Yields (h r) -> (r h) when ``interleaved``, else
    (r h) -> (h r)."""
    args = positional(node)
    if call_name(node) != "repeat" or len(args) < 2 or not isinstance(args[1].value, cst.SimpleString):
        return
    pattern = args[1].value
    opening = len(pattern.prefix) + len(pattern.quote)
    text = pattern.value[opening : -len(pattern.quote)]
    source, arrow, target = text.partition("->")
    counts = {a.keyword.value for a in node.args if a.keyword is not None}
    axes = set(re.findall(r"\w+", source))
    for match in EINOPS_GROUP.finditer(target):
        head, count = match.groups() if interleaved else reversed(match.groups())
        if arrow and head in axes and count in counts and count not in axes:
            regrouped = f"{target[: match.start()]}({match.group(2)} {match.group(1)}){target[match.end() :]}"
            quoted = f"{pattern.value[:opening]}{source}{arrow}{regrouped}{pattern.quote}"
            yield replace_arg(node, args[1], cst.SimpleString(quoted))


def operator_gqa_interleaved_order(node: cst.Call) -> Iterator[cst.CSTNode]:
    """KV heads repeated interleaved (h -> h // r) where the code groups them in tile order (h -> h
    mod Hkv), F15's other direction: k.repeat(1, r, 1, 1) -> k.repeat_interleave(r, dim=1);
    torch.cat([k] * r, dim=1) -> torch.repeat_interleave(k, r, dim=1); einops' "(r h)" -> "(h r)".
    Only keys and values are regrouped: a mask repeated over heads is the same in either order."""
    yield from einops_regrouped(node, interleaved=False)
    name = call_name(node)
    receiver = method_receiver(node)
    if name == "repeat" and is_method_call(node) and keys_or_values(receiver):
        args = positional(node)
        counted = [i for i, a in enumerate(args) if literal_int(a.value) != 1]
        if len(args) >= 3 and len(args) == len(node.args) and len(counted) == 1 and counted[0] >= 1:
            axis = counted[0]
            yield cst.parse_expression(f"__tensor__.repeat_interleave(__repeats__, dim={axis})").visit(
                _Fill({"__tensor__": receiver, "__repeats__": args[axis].value})
            )
    if name in ("cat", "concat", "concatenate") and node.args:
        listed, dim = node.args[0].value, dim_arg(node, 1)
        if dim is None or not m.matches(listed, m.BinaryOperation(operator=m.Multiply())):
            return
        for copies, repeats in ((listed.left, listed.right), (listed.right, listed.left)):
            if isinstance(copies, cst.List) and len(copies.elements) == 1:
                tensor = copies.elements[0].value
                if keys_or_values(tensor):
                    yield cst.parse_expression(
                        "torch.repeat_interleave(__tensor__, __repeats__, dim=__dim__)"
                    ).visit(_Fill({"__tensor__": tensor, "__repeats__": repeats, "__dim__": dim.value}))


HEAD_INDEX_WORDS = {"h", "head", "hq"}
GROUP_WORDS = {"rep", "reps", "repeats", "group", "groups", "mult"}


def head_index_like(node: cst.CSTNode) -> bool:
    """h, head, head_idx, q_head: the index of a query head (not a count of heads, not head_dim)."""
    w = words(node)
    return bool(w & HEAD_INDEX_WORDS) and not w & (SIZE_WORDS | {"heads", "kv", "n", "num", "d"})


def kv_heads_like(node: cst.CSTNode) -> bool:
    """n_kv_heads, self.num_key_value_heads, Hkv, n_kv: the number of KV heads."""
    w = words(node)
    kv = bool(w & {"kv", "hkv", "nkv"}) or {"key", "value"} <= w
    return kv and not w & (SIZE_WORDS | {"idx", "index", "pos", "cache", "proj"})


class _Operands(cst.CSTVisitor):
    """The names and dotted names (self.n_rep, as a whole) of a node, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[cst.BaseExpression] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self.found.append(node)
        return False

    def visit_Name(self, node: cst.Name) -> bool:
        self.found.append(node)
        return False


def group_size(block: cst.IndentedBlock, kv_heads: cst.BaseExpression) -> cst.BaseExpression | None:
    """The query heads per KV head, as the block names it: a name assigned Hq // Hkv, a name like
    n_rep, num_key_value_groups or q_mult, or else (Hq // Hkv) from a count of query heads."""
    for assign in m.findall(block, m.Assign(targets=[m.AssignTarget(target=m.Name() | m.Attribute())])):
        value = assign.value
        if m.matches(value, m.BinaryOperation(operator=m.FloorDivide())) and kv_heads_like(value.right):
            return assign.targets[0].target
    operands = _Operands()
    block.visit(operands)
    for operand in operands.found:
        if words(operand) & GROUP_WORDS and not words(operand) & SIZE_WORDS:
            return operand
    for operand in operands.found:
        if heads_like(operand) and not kv_heads_like(operand) and not words(operand) & {"idx", "index"}:
            return cst.BinaryOperation(
                left=operand,
                operator=cst.FloorDivide(),
                right=kv_heads,
                lpar=[cst.LeftParen()],
                rpar=[cst.RightParen()],
            )
    return None


def operator_gqa_head_modulo(node: cst.IndentedBlock) -> Iterator[cst.CSTNode]:
    """kv_head = h % n_kv_heads -> h // n_rep: a query head's KV head read interleaved where the code
    reads it in tile order (the group size as the block names it, see group_size)."""
    for statement in node.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for found in m.findall(statement, m.BinaryOperation(operator=m.Modulo())):
            if not (head_index_like(found.left) and kv_heads_like(found.right)):
                continue
            group = group_size(node, found.right)
            if group is not None:
                yield node.deep_replace(found, found.with_changes(operator=cst.FloorDivide(), right=group))


def operator_gqa_group_divide(node: cst.BinaryOperation) -> Iterator[cst.CSTNode]:
    """kv_head = h // (H // H_KV) -> h % H_KV: a query head's KV head read in tile order where the
    code reads it interleaved, with the group size written out as Hq // Hkv."""
    group = node.right
    if not (isinstance(node.operator, cst.FloorDivide) and isinstance(group, cst.BinaryOperation)):
        return
    grouped = isinstance(group.operator, cst.FloorDivide) and kv_heads_like(group.right)
    if grouped and head_index_like(node.left):
        yield node.with_changes(operator=cst.Modulo(), right=group.right.with_changes(lpar=[], rpar=[]))


class _Fill(cst.CSTTransformer):
    """Puts expressions in place of placeholder names in a parsed template."""

    def __init__(self, fills: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self.fills = fills

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.fills.get(original.value, updated)


def window_bound_toggled(target: cst.ComparisonTarget) -> cst.ComparisonTarget | None:
    toggled = {
        cst.LessThan: cst.LessThanEqual,
        cst.LessThanEqual: cst.LessThan,
        cst.GreaterThan: cst.GreaterThanEqual,
        cst.GreaterThanEqual: cst.GreaterThan,
    }.get(type(target.operator))
    return target.with_changes(operator=toggled()) if toggled else None


def operator_window_bound(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The window's bound off by one (W+1 keys: an inclusive bound, or W-1):
    kv_idx > q_idx - W -> kv_idx >= q_idx - W; tril(x, diagonal=-W) -> diagonal=-W - 1 and -W + 1."""
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        target = node.comparisons[0]
        left, right = node.left, target.comparator
        indices = (words(left) | words(right)) & (KEY_WORDS | QUERY_WORDS) or key_vs_query(left, right)
        if (mentions_window(left) or mentions_window(right)) and indices:
            toggled = window_bound_toggled(target)
            if toggled is not None:
                yield node.with_changes(comparisons=[toggled])
    if call_name(node) in ("tril", "triu", "tril_", "triu_"):
        diagonal = diagonal_arg(node)
        if diagonal is not None and mentions_window(diagonal.value):
            for n in (-1, 1):
                yield replace_arg(node, diagonal, plus(diagonal.value, n))


# --- F22..F25: the faults the declared attention variants ship with ----------------------------


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


SLOPE_WORDS = {"slope", "slopes"}
DISTANCE_WORDS = {"distance", "distances", "dist", "relative", "rel", "arange", "bias", "alibi"}


def slope_like(node: cst.CSTNode) -> bool:
    w = words(node)
    return bool(w & SLOPE_WORDS) and not w & SIZE_WORDS


def broadcast_axis(node: cst.CSTNode) -> str | None:
    """'query' for x[:, None] / x[:, :, None] / x.unsqueeze(-1) (a column: one entry per query), 'key'
    for x[None, :] / x[:, None, :] / x.unsqueeze(0) (a row along the last axis: one per key)."""
    if isinstance(node, cst.Subscript) and len(node.slice) >= 2:
        last = node.slice[-1].slice
        nones = [
            isinstance(e.slice, cst.Index) and m.matches(e.slice.value, m.Name("None")) for e in node.slice
        ]
        if nones[-1]:
            return "query"
        if any(nones) and m.matches(last, m.Slice(lower=None, upper=None, step=None)):
            return "key"
    if call_name(node) == "unsqueeze" and node.args:
        dim = literal_int(node.args[0].value)
        return {-1: "query", 1: "query", 0: "key", -2: "key"}.get(dim) if dim is not None else None
    return None


def base_of(node: cst.CSTNode) -> cst.BaseExpression | None:
    """The tensor a subscript or method chain starts from: ids for ids[:, None, :], slopes for
    slopes.view(-1, 1, 1), self.slopes for self.slopes[h]."""
    while True:
        if isinstance(node, cst.Subscript):
            node = node.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            node = node.func.value
        else:
            return node if isinstance(node, (cst.Name, cst.Attribute)) else None


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


def causal_flag(node: cst.CSTNode) -> bool:
    """causal, is_causal, self.is_causal, config.causal: the switch of a causal mask (not the mask)."""
    return (
        isinstance(node, (cst.Name, cst.Attribute))
        and "causal" in words(node)
        and not words(node) & {"mask", "masks", "fn", "function", "mod"}
    )


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
    None -> mask; self.is_causal = False -> True; a mask_mod lambda b, h, q, kv: True -> kv <= q."""
    if isinstance(node, cst.Call):
        arg = keyword(node, *CAUSAL_KEYWORDS)
        if arg is not None and not m.matches(arg.value, m.Name("True")):
            yield replace_arg(node, arg, cst.Name("True"))
    elif isinstance(node, cst.If):
        if causal_flag(node.test):
            yield node.with_changes(test=cst.Name("True"))
        elif negated_flag(node.test):
            yield node.with_changes(test=cst.Name("False"))
    elif isinstance(node, cst.IfExp) and (mask_branch(node.body) or mask_branch(node.orelse)):
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


# --- F26, F27: the layer variants' faults ----------------------------------------------------------


def rotary_width_name(name: str) -> bool:
    """rotary_dim, rotary_ndims, rot_dim, rotated, rotary_emb_dim: how many features RoPE rotates."""
    w = name_words(name)
    return bool(w & {"rotary", "rot", "rotated"}) and (
        bool(w & {"dim", "ndims", "dims", "width"}) or "rotated" in w
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


CORE = "the attention core (every target has it)"
FAULTS: tuple[Fault, ...] = (
    Fault(
        "F1",
        "mask adds 0 instead of -inf (fill value 0, or the mask built but never applied)",
        "ch8",
        ("MASK-3", "ATTN-2", "ATTN-9"),
        (
            (cst.UnaryOperation, operator_mask_fill_zero),
            (cst.Call, operator_mask_fill_zero),
            (cst.Attribute, operator_mask_fill_zero),
            (cst.Call, operator_mask_not_applied),
            (cst.BinaryOperation, operator_mask_not_added),
            (cst.AugAssign, operator_mask_not_added),
        ),
        CORE,
    ),
    Fault(
        "F2",
        "upper/lower triangle flipped (causal comparison, band bound or tril/triu mirrored)",
        "ch8",
        ("MASK-1", "MASK-2", "ATTN-2", "ATTN-9"),
        ((cst.Comparison, operator_flip_triangle), (cst.Call, operator_swap_tril_triu)),
        CORE,
    ),
    Fault(
        "F3",
        "missing 1/sqrt(d_k) scale (default scale 1, or the * scale dropped)",
        "ch8",
        ("ATTN-6", "ATTN-4"),
        (
            (cst.BinaryOperation, operator_drop_scale),
            (cst.AugAssign, operator_drop_scale_statement),
            (cst.Call, operator_unit_scale_argument),
        ),
        CORE + ", or a layer (the 'layer' capability) for a scale set at construction",
    ),
    Fault(
        "F4",
        "head and sequence axes confused in the head split or merge",
        "ch8",
        ("HEAD-1", "BLOCK-1", "LAYER-1"),
        ((cst.Call, operator_confuse_head_axes),),
        "a layer (the 'layer' capability), or the core where it reshapes heads",
    ),
    Fault(
        "F5",
        "residual branch dropped, or added to the normalised input",
        "ch8",
        ("BLOCK-1", "BLOCK-2"),
        ((cst.Return, operator_break_residual), (cst.Assign, operator_drop_residual_sum)),
        "a layer with its residual (a 'layer' with residual=True), or a decoder layer",
    ),
    Fault(
        "F6",
        "post-norm instead of pre-norm (norm after the residual sum)",
        "book",
        ("BLOCK-1", "BLOCK-2"),
        ((cst.IndentedBlock, operator_post_norm), (cst.IndentedBlock, operator_post_norm_statements)),
        "a layer with its pre-norm (a 'layer' with norm_weight), or a decoder layer",
    ),
    Fault(
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
    ),
    Fault(
        "F8",
        "sliding window on the wrong layers (odd layers, every layer, or never passed on)",
        "book",
        ("MASK-4", "RF-2"),
        (
            (cst.Comparison, operator_window_layers),
            (cst.Call, operator_window_not_passed),
            (cst.Subscript, operator_schedule_lookup),
            (cst.IfExp, operator_window_choice_dropped),
        ),
        "a stack or a model with windowed layers (MOD-5 through each layer's output, MOD-7)",
    ),
    Fault(
        "F9",
        "n_heads % n_kv_heads and even head_dim checks removed",
        "book",
        ("ERR-2", "LAYER-2"),
        ((cst.If, operator_drop_divisibility_check),),
        "a layer that declares 'sizes' (LAYER-2: layer(spec) refuses sizes it cannot compute), or impl's "
        "constructor checks (ERR-2)",
    ),
    Fault(
        "F10",
        "sinks ignored (not passed, or the sink column dropped before the softmax)",
        "book",
        ("BLOCK-5", "SINK-2"),
        ((cst.Call, operator_ignore_sinks), (cst.IndentedBlock, operator_sink_column_dropped)),
        "the 'sinks' capability",
    ),
    Fault(
        "F11",
        "KV cache eviction off by one (a windowed layer's cache holds W+1 or W-1 positions)",
        "book",
        ("CACHE-2",),
        ((cst.Call, operator_evict_off_by_one),),
        "a KV cache (impl's CACHE properties)",
    ),
    Fault(
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
    ),
    Fault(
        "F13",
        "K and V swapped when written to the KV cache",
        "book",
        ("CACHE-1", "CACHE-2"),
        (
            (cst.Call, operator_swap_cached_kv),
            (cst.Assign, operator_cached_pair_swapped),
            (cst.Return, operator_cached_pair_swapped),
        ),
        "a KV cache (impl's CACHE properties)",
    ),
    Fault(
        "F14",
        "softmax over the wrong axis (the queries instead of the keys)",
        "real",
        ("ATTN-1", "ATTN-4"),
        ((cst.Call, operator_softmax_axis),),
        CORE,
    ),
    Fault(
        "F15",
        "GQA heads grouped in the other order: tile (KV head h mod Hkv) for interleaved (h // r) or back",
        "real",
        ("GQA-1", "ATTN-4"),
        (
            (cst.Call, operator_gqa_tile_order),
            (cst.Call, operator_gqa_interleaved_order),
            (cst.IndentedBlock, operator_gqa_head_modulo),
            (cst.BinaryOperation, operator_gqa_group_divide),
        ),
        "the 'gqa' capability",
    ),
    Fault(
        "F16",
        "window bound off by one (W+1 keys, an inclusive bound, or W-1)",
        "real",
        ("MASK-2", "ATTN-2"),
        ((cst.Comparison, operator_window_bound), (cst.Call, operator_window_bound)),
        "the 'window' capability",
    ),
    Fault(
        "F17",
        "padding mask ignored or inverted (never passed on, dropped from the mask, or pads taken for tokens)",
        "real",
        ("MOD-9", "MOD-10", "ATTN-13"),
        (
            (cst.Call, operator_padding_ignored),
            (cst.BinaryOperation, operator_padding_ignored),
            (cst.Subscript, operator_padding_inverted),
            (cst.Comparison, operator_padding_inverted),
        ),
        "a model or module with a padding mask (the 'padding' capability: MOD-9, MOD-10)",
    ),
    Fault(
        "F18",
        "mask dropped once a cache is attached (the layer gets no mask when decoding)",
        "real",
        ("MOD-7", "MOD-10"),
        ((cst.Call, operator_mask_dropped_with_cache), (cst.Dict, operator_mask_dropped_with_cache)),
        "a model or module that decodes in chunks (the 'chunks' capability: MOD-7, MOD-10)",
    ),
    Fault(
        "F19",
        "causal flag lost on the way to attention (causal=causal or self.is_causal set to False)",
        "real",
        ("MOD-1", "BLOCK-3", "ATTN-2"),
        ((cst.Call, operator_causal_flag_lost), (cst.Assign, operator_causal_flag_lost)),
        "a module or layer whose code forwards the causal flag (SDPA's is_causal read from it)",
    ),
    Fault(
        "F20",
        "windowed cache trimmed to what it keeps before the chunk is attended",
        "real",
        ("CACHE-1", "MOD-7"),
        ((cst.IndentedBlock, operator_cache_trimmed_early),),
        "a windowed layer's cache, decoded in chunks of several tokens (CACHE-1, MOD-7)",
    ),
    Fault(
        "F21",
        "dropout not switched off in eval mode (training=True, or the eval guard on p dropped)",
        "real",
        ("MOD-4", "LM-2"),
        ((cst.Call, operator_dropout_left_on), (cst.IfExp, operator_dropout_left_on)),
        "a model or module with dropout, p > 0 in its config (MOD-4)",
    ),
    Fault(
        "F22",
        "soft-capping misplaced: after the mask (hidden keys capped to -cap get weight) or before the scale",
        "real",
        ("ATTN-14", "ATTN-4"),
        ((cst.IndentedBlock, operator_softcap_misplaced),),
        "soft-capped logits: impl's softcap, or a target that declares its cap as a score_mod (ATTN-4)",
    ),
    Fault(
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
    ),
    Fault(
        "F24",
        "document boundary leaks by one token (the previous document's last token seen, a cu_seqlens slice)",
        "real",
        ("ATTN-16", "ATTN-4"),
        ((cst.Comparison, operator_document_leak), (cst.For, operator_varlen_slice_widened)),
        "the 'documents' capability (packed rows: ATTN-16, and every property on them)",
    ),
    Fault(
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
    ),
    Fault(
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
    ),
    Fault(
        "F27",
        "q/k norm not applied, or applied after RoPE instead of before it",
        "real",
        ("BLOCK-6", "LAYER-1"),
        ((cst.Call, operator_qk_norm_dropped), (cst.IndentedBlock, operator_qk_norm_after_rope)),
        "a layer (the 'layer' capability) that reports q_norm and k_norm",
    ),
)

FAULTS_BY_ID = {fault.id: fault for fault in FAULTS}


def operator_table() -> list[tuple[type[cst.CSTNode], str, Operator]]:
    """(node type, fault id, operator) for every operator of every fault, in catalogue order."""
    return [(node_type, fault.id, op) for fault in FAULTS for node_type, op in fault.operators]
