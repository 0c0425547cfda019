"""The implementation under test: impl/ by default, another one with --impl NAME.

A target is any object with

    attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False)
        q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> out (B, Hq, Tq, dv),
        or (out, weights (B, Hq, Tq, Tk)) with return_weights=True
    capabilities
        the names (CAPABILITIES) of what else it supports; an argument it does not support is
        never passed to it, and a property that needs a missing capability is skipped

NAME is a built-in adapter (ADAPTERS) or ``package.module:object`` for your own code, where the
object is such a target or a bare attention function (which then has no capability beyond
causal self-attention unless it carries a ``capabilities`` attribute).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

CAPABILITIES = {
    "weights": "returns the attention weights (return_weights=True)",
    "window": "sliding windows (window=W: query p sees keys p-W < j <= p)",
    "sinks": "per-head sink logits (an extra softmax column)",
    "gqa": "fewer KV heads than query heads (KV head g serves query heads g*r .. g*r+r-1)",
    "decode": "fewer queries than keys, aligned bottom-right (query i at position Tk-Tq+i)",
    "blind": "more queries than keys: the first Tq-Tk see no key and output exactly 0",
    "non_causal": "causal=False",
    "scale": "an explicit scale instead of 1/sqrt(d)",
    "float64": "float64 inputs computed in float64 (not through a float32 softmax)",
    "float16": "fp16/bf16 inputs scored in float32",
    "impl": "the rest of impl/: errors, masks, RoPE, positions, layers, block, stack, KV cache, paths",
}

# Built-in adapters: NAME -> "module:object" (imported only when chosen).
ADAPTERS = {
    "impl": "properties.adapters.impl_target:TARGET",
    "torch": "properties.adapters.torch_sdpa:TARGET",
    "hf-llama": "properties.adapters.hf_eager:LLAMA",
    "hf-mistral": "properties.adapters.hf_eager:MISTRAL",
    "hf-gptoss": "properties.adapters.hf_eager:GPTOSS",
}
ENV = "ATTNSPEC_IMPL"


@dataclass(frozen=True)
class Target:
    name: str
    attention: Callable
    capabilities: frozenset[str]
    about: str = ""

    def supports(self, *names: str) -> bool:
        return set(names) <= self.capabilities


def as_target(name: str, obj: object) -> Target:
    """A Target from an adapter object or a bare attention function."""
    if isinstance(obj, Target):
        return replace(obj, name=name)
    attention = getattr(obj, "attention", obj)
    if not callable(attention):
        raise TypeError(f"{obj!r} has no callable attention(q, k, v, ...)")
    capabilities: Iterable[str] = getattr(obj, "capabilities", ())
    unknown = set(capabilities) - set(CAPABILITIES)
    if unknown:
        raise ValueError(f"unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}")
    return Target(name, attention, frozenset(capabilities), getattr(obj, "__doc__", "") or "")


def load(name: str) -> Target:
    """The target called ``name``: a built-in adapter or "package.module:object"."""
    spec = ADAPTERS.get(name, name)
    if ":" not in spec:
        raise ValueError(f"neither a built-in adapter ({', '.join(ADAPTERS)}) nor package.module:object")
    module_name, _, attribute = spec.partition(":")
    obj = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return as_target(name, obj)


_current: Target | None = None


def current() -> Target:
    """The target of this run (``$ATTNSPEC_IMPL``, which --impl sets; impl/ by default)."""
    global _current
    name = os.environ.get(ENV, "impl") or "impl"
    if _current is None or _current.name != name:
        _current = load(name)
    return _current
