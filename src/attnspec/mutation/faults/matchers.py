"""What the fault modules share: small matchers over libcst nodes (names, calls, literals, the words
of identifiers), the word sets that say what a name is about (a key, a query, a window, a scale, a
cache), and the evidence word sets several faults use.  A matcher used by one fault lives in that
fault's module."""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m


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


# Identifier words that mark an index or tensor as the key side or the query side of attention.
KEY_WORDS = {"key", "keys", "k", "kv", "j", "col", "cols", "kpos", "kidx", "src"}


QUERY_WORDS = {"query", "queries", "q", "i", "row", "rows", "qpos", "qidx", "tgt"}


WINDOW_WORDS = {"window", "sliding", "win", "band"}


# Words that name a query's position when nothing names a key (position, pos, p, t).
POSITION_WORDS = {"position", "positions", "pos", "p", "t"}


# Comparisons of sizes are not masks (q.shape[2] < k.shape[2]).
SIZE_WORDS = {"shape", "size", "len", "numel", "dim", "ndim"}


# Triton's tile offsets: offs_m, start_m (a query block's rows) and offs_n, start_n (a key block's columns)
TILE_WORDS = {"offs", "offset", "offsets", "start"}


def tile_axis(w: set[str]) -> str | None:
    """'query' for the words of offs_m / start_m, 'key' for offs_n / start_n + offs_n, else None."""
    if not w & TILE_WORDS or {"m", "n"} <= w:
        return None
    return "query" if "m" in w else "key" if "n" in w else None


def key_like(node: cst.CSTNode) -> bool:
    w = words(node)
    keys = bool(w & KEY_WORDS) or tile_axis(w) == "key"
    return keys and not w & QUERY_WORDS and not w & SIZE_WORDS and tile_axis(w) != "query"


def query_like(node: cst.CSTNode) -> bool:
    w = words(node)
    if w & KEY_WORDS or w & SIZE_WORDS or tile_axis(w) == "key":
        return False
    return bool(w & QUERY_WORDS or w & POSITION_WORDS) or tile_axis(w) == "query"


def key_vs_query(left: cst.CSTNode, right: cst.CSTNode) -> bool:
    if (words(left) | words(right)) & {"heads"}:  # num_query_heads > num_kv_heads counts heads
        return False
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


def fill_word(node: cst.CSTNode) -> bool:
    """A variable that holds a fill value: min_dtype, mask_value, neg_inf, large_negative, ..."""
    return isinstance(node, (cst.Name, cst.Attribute)) and bool(
        words(node) & {"min", "inf", "neg", "negative", "fill"}
    )


def mask_operand(node: cst.CSTNode) -> bool:
    """A mask held in a variable: mask, attention_mask, self.causal_mask, mask[None, None]."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return isinstance(node, (cst.Name, cst.Attribute)) and "mask" in words(node)


def diagonal_arg(node: cst.Call) -> cst.Arg | None:
    given = keyword(node, "diagonal")
    if given is not None:
        return given
    args = positional(node)
    return args[1] if len(args) > 1 else None


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


def heads_like(node: cst.CSTNode) -> bool:
    """n_heads, num_key_value_heads, self.n_head, H (not head_dim)."""
    w = words(node)
    return (
        bool(w & {"heads", "nh"})
        or ("head" in w and not w & {"dim", "size", "d"})
        or m.matches(node, m.Name("H"))
    )


def assigned(statement: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """(name, value) for a statement line ``name = value``."""
    if m.matches(
        statement, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Name())])])
    ):
        assign = statement.body[0]
        return assign.targets[0].target.value, assign.value
    return None


def swapped(pair: cst.Tuple) -> cst.Tuple:
    first, second = pair.elements
    return pair.with_changes(
        elements=[first.with_changes(value=second.value), second.with_changes(value=first.value)]
    )


CACHE_WORDS = {"cache", "past", "cached"}


CAUSAL_KEYWORDS = ("is_causal", "causal")


def causal_keyword(node: cst.Call) -> cst.Arg | None:
    """The causal flag a call is handed: causal= / is_causal=, or a Triton launch's constexpr in any
    case (kernel[grid](..., IS_CAUSAL=causal))."""
    arg = keyword(node, *CAUSAL_KEYWORDS)
    if arg is None and triton_launch(node):
        arg = next((a for a in node.args if a.keyword and a.keyword.value.lower() in CAUSAL_KEYWORDS), None)
    return arg


def dim_arg(node: cst.Call, position: int) -> cst.Arg | None:
    given = keyword(node, "dim", "axis")
    if given is not None:
        return given
    args = positional(node)
    return args[position] if len(args) > position else None


TENSOR_LIBRARIES = {"torch", "F", "functional", "nn", "special"}


def triton_launch(node: cst.CSTNode) -> bool:
    """kernel[grid](...): a Triton kernel launched over its grid."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Subscript)


def is_method_call(node: cst.Call) -> bool:
    """x.f(...) on a tensor, not torch.f(...) or F.f(...)."""
    receiver = method_receiver(node)
    return receiver is not None and func_name(receiver) not in TENSOR_LIBRARIES


VALUE_WORDS = {"v", "value", "values", "val", "vals"}


def value_like(node: cst.CSTNode) -> bool:
    w = words(node)
    return bool(w & VALUE_WORDS) and not w & QUERY_WORDS and not w & SIZE_WORDS


def keys_or_values(node: cst.CSTNode) -> bool:
    """k, key_states, v, value_states, self.v_cache: a tensor of keys or values."""
    return key_like(node) or value_like(node)


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


# --- evidence several faults share (each a set of words that must all be on one line of code)
# A word is a lower-case part of an identifier (catalogue.name_words: attention_mask -> attention, mask),
# after "=", a whole identifier (=attention_mask), or one of the operators "+", "%", "//" and "(" (a call).
ROTATION = ({"rope"}, {"rotary"}, {"rotate"}, {"cos", "sin"}, {"freqs", "cis"})
WINDOW = ({"window"}, {"sliding"})
WINDOWED_CACHE = ({"cache", "window"}, {"cache", "sliding"})
# a causal switch (is_causal, a flag named causal, a bidirectional path), not a causal mask's name
CAUSAL_SWITCH = ({"is", "causal"}, {"=causal"}, {"bidirectional"}, {"non", "causal"})


# --- online-softmax kernels (F29, F31)
EXP_CALLS = {"exp", "exp2"}
# a key split's own statistics in split-K / flash-decoding: m_split, lse_part, partial maxima
SPLIT_WORDS = {"split", "splits", "part", "parts", "partial", "partials", "chunk", "chunks"}


def exp_of_difference(node: cst.CSTNode) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(a, b) for exp(a - b), torch.exp(a - b), tl.math.exp2(a - b); else None."""
    args = positional(node) if isinstance(node, cst.Call) else []
    if call_name(node) not in EXP_CALLS or len(args) != 1:
        return None
    inner = args[0].value
    if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Subtract):
        return inner.left, inner.right
    return None
