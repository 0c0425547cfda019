"""Layers and targets that exercise what a target can declare of its layer: sizes it cannot be built
with (a multi-query layer: one KV head), a q/k norm the oracle cannot take, a declared score_mod its
attention ignores.  Each is impl's own block or torch's SDPA adapter with one thing changed.

- ``MQA_CANNOT_BUILD``: builds only with one KV head and raises attnspec.CannotBuild for any other: the
  kit checks it on the specs it takes (passes);
- ``MQA_DECLARED``: the same layer raising a plain ValueError, with ``kv_heads = (1,)`` declared (passes);
- ``MQA_UNDECLARED``: the same, undeclared: a "refused" line that says what to declare (NOT CHECKED);
- ``QK_NORM_OF_ANOTHER_SHAPE``: reports a q norm gain of d + 1 features: refused, what it could not take;
- ``CAP_IGNORED``: torch's SDPA adapter declaring soft_cap(5), which its attention never applies: fails
  SCORE-1, "the target ignores its declared score_mod".
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnspec.properties.adapters import impl_target, torch_sdpa
from attnspec.properties.targets import CannotBuild, Layer, LayerSpec, Target
from attnspec.specs.mods import soft_cap

LAYER_CAPABILITIES = frozenset({"layer", "gqa", "window", "sinks", "offset", "cache"})


def multi_query(spec: LayerSpec) -> Layer:
    """impl's block, which a multi-query model can only build with one KV head."""
    if spec.n_kv_heads != 1:
        raise CannotBuild(f"a multi-query layer has one KV head, not {spec.n_kv_heads}")
    return impl_target.layer(spec)


def multi_query_refusing(spec: LayerSpec) -> Layer:
    """The same, refusing other KV head counts as model code does: a plain ValueError."""
    if spec.n_kv_heads != 1:
        raise ValueError(f"multi_query=True: num_kv_heads must be 1, got {spec.n_kv_heads}")
    return impl_target.layer(spec)


def odd_qk_norm(spec: LayerSpec) -> Layer:
    """impl's block reporting a q/k norm gain one feature longer than a head: no form the oracle takes."""
    built = impl_target.layer(spec)
    gain = torch.ones(spec.head_dim + 1, dtype=spec.dtype)
    return replace(built, q_norm=gain, k_norm=gain)


def layer_target(name: str, layer, **declared) -> Target:
    about = f"{name}: impl's block, one thing changed"
    return Target(name, None, LAYER_CAPABILITIES, about, layer, **declared)


MQA_CANNOT_BUILD = layer_target("MQA_CANNOT_BUILD", multi_query)
MQA_DECLARED = layer_target("MQA_DECLARED", multi_query_refusing, kv_heads=(1,))
MQA_UNDECLARED = layer_target("MQA_UNDECLARED", multi_query_refusing)
QK_NORM_OF_ANOTHER_SHAPE = layer_target("QK_NORM_OF_ANOTHER_SHAPE", odd_qk_norm)
CAP_IGNORED = replace(torch_sdpa.TARGET, name="CAP_IGNORED", score_mod=soft_cap(5.0))
