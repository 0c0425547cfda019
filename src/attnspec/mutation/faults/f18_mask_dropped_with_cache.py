"""F18: mask dropped once a cache is attached (the layer gets no mask when decoding)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from .edits import keyword_nulled
from .fault import Fault
from .matchers import CACHE_WORDS, name_words, replace_arg, words

MASK_NAMES = {"mask", "masks"}


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


FAULT = Fault(
    "F18",
    "mask dropped once a cache is attached (the layer gets no mask when decoding)",
    "real",
    ("MOD-7", "MOD-10"),
    ((cst.Call, operator_mask_dropped_with_cache), (cst.Dict, operator_mask_dropped_with_cache)),
    "a model or module that decodes in chunks (the 'chunks' capability: MOD-7, MOD-10)",
    evidence=({"mask", "cache"}, {"mask", "past"}),
    generic=(keyword_nulled,),
)
