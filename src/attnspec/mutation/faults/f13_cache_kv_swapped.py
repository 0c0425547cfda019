"""F13: K and V swapped when written to the KV cache."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .edits import first_args_swapped
from .fault import Fault
from .matchers import CACHE_WORDS, call_name, key_like, name_words, swap_args, swapped, value_like, words


def operator_swap_cached_kv(node: cst.Call) -> Iterator[cst.CSTNode]:
    """cache.update(k, v, ...) / self.write(key_states, value_states) -> (v, k, ...), and a cache
    called with them after other arguments (litgpt's self.kv_cache(input_pos, k, v) -> (input_pos,
    v, k)): keys and values swapped on their way into the cache."""
    name = call_name(node)
    writes = name in ("update", "write", "append", "store")
    if not writes and not name_words(name) & CACHE_WORDS or len(node.args) < 2:
        return
    for i in range(len(node.args) - 1) if not writes else (0,):
        first, second = node.args[i], node.args[i + 1]
        if first.keyword or second.keyword or first.star or second.star:
            continue
        key_words = words(first.value) & {"k", "key", "keys"}
        value_words = words(second.value) & {"v", "value", "values"}
        if key_words and value_words:
            yield node.with_changes(args=swap_args(list(node.args), i))
            return


def cache_like(node: cst.CSTNode) -> bool:
    """layer_past, past_key_value, present, self.key_cache[i]: something read from or kept in a cache."""
    return bool(words(node) & {"past", "cache", "present", "cached"})


def twins(first: cst.BaseExpression, second: cst.BaseExpression) -> bool:
    """ck and cv, pk and pv: two names alike but for a k where the other has a v."""
    if not (isinstance(first, cst.Name) and isinstance(second, cst.Name)):
        return False
    if len(first.value) != len(second.value):
        return False
    differ = [(a, b) for a, b in zip(first.value.lower(), second.value.lower(), strict=True) if a != b]
    return differ == [("k", "v")]


def key_value_pair(pair: cst.BaseExpression) -> cst.Tuple | None:
    """(k, v) of keys then values, as a tuple of two (also cached ones named alike: ck, cv)."""
    if isinstance(pair, cst.Tuple) and len(pair.elements) == 2:
        first, second = (e.value for e in pair.elements)
        if key_like(first) and value_like(second) and not value_like(first) and not key_like(second):
            return pair
        if twins(first, second):
            return pair
    return None


def operator_cached_pair_swapped(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Keys and values swapped on their way into or out of a cache kept as a pair:
    present = (key, value) if use_cache else None -> (value, key); past_key, past_value = layer_past
    -> past_value, past_key (ck, cv = cache -> cv, ck); return self.key_cache[i], self.value_cache[i]
    -> the other way round."""
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


FAULT = Fault(
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
    evidence=({"cache", "k", "v"}, {"cache", "key", "value"}, {"past", "key", "value"}),
    generic=(first_args_swapped,),
)
