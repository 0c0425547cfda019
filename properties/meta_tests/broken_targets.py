"""Deliberately broken copies of the torch adapter (and of impl's layer), each with another
legitimate convention: the conformance kit must fail them and name the convention
(meta_tests/test_conformance.py).  WINDOW_IGNORED follows none but drops the window, a bug the kit
names too (never as a window of W+1 keys, which it resembles over 2 keys).  FLOAT32_LAYER follows
no other convention: it claims "float64" but computes its layer in float32, which only a float64
layer property can see; TRANSPOSED returns (B, Tq, Hq, dv), a shape bug.  PARTIAL_ROPE rotates half of
each head without declaring rotary_pct: the kit names the declaration it lacks.

    pytest properties --impl properties.meta_tests.broken_targets:INCLUSIVE_WINDOW
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from attnspec.impl import apply_rope
from attnspec.properties.adapters import impl_target
from attnspec.properties.adapters.torch_sdpa import TARGET, attention
from attnspec.properties.declared import half_split_order
from attnspec.properties.targets import Layer, LayerSpec


def inclusive_window(q, k, v, *, window=None, **kwargs):
    """A window of W+1 keys: query p sees p-W <= j <= p."""
    return attention(q, k, v, window=None if window is None else window + 1, **kwargs)


def tiled_gqa(q, k, v, **kwargs):
    """Query head h reads KV head h % Hkv (k.repeat instead of repeat_interleave)."""
    r = q.shape[1] // k.shape[1]
    return attention(q, k.repeat(1, r, 1, 1), v.repeat(1, r, 1, 1), **kwargs)


def top_left(q, k, v, *, causal=True, window=None, sinks=None, scale=None):
    """torch's is_causal as it is: query i at position i, also when Tq < Tk."""
    if causal and window is None and sinks is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    return attention(q, k, v, causal=causal, window=window, sinks=sinks, scale=scale)


def interleaved_rope(x, positions, base=10000.0):
    """Rotates the pairs (x_2i, x_2i+1): impl's RoPE on the features laid out half-split."""
    order = torch.tensor(half_split_order(x.shape[-1]), device=x.device)
    half_split = torch.empty_like(x)
    half_split[..., order] = x
    return impl_target.rope(half_split, positions, base)[..., order]


def partial_rope(x, positions, base=10000.0):
    """RoPE on the first half of each head only (where that is whole pairs), undeclared: Phi's partial
    rotary, without the rotary_pct that would say so."""
    d = x.shape[-1]
    return apply_rope(x, positions, base=base, rotary_dim=d // 2 if d % 4 == 0 else None)


def interleaved_rope_layer(spec: LayerSpec) -> Layer:
    """A layer that rotates the pairs (x_2i, x_2i+1): impl's block (half-split pairs) whose reported
    q and k rows are permuted per head so that feature 2i is the block's i and 2i+1 its i + d/2."""
    built = impl_target.layer(spec)

    def rows(n_heads: int) -> list[int]:
        return [head * spec.head_dim + j for head in range(n_heads) for j in half_split_order(spec.head_dim)]

    return replace(built, wq=built.wq[rows(spec.n_heads)], wk=built.wk[rows(spec.n_kv_heads)])


def float32_layer(spec: LayerSpec) -> Layer:
    """impl's block built in float32 whatever ``spec.dtype``: the input is cast to float32 and the
    output back, so a float64 layer returns float32 accuracy in a float64 tensor."""
    built = impl_target.layer(replace(spec, dtype=torch.float32))
    return replace(built, forward=lambda x, offset: built.forward(x.float(), offset).to(x.dtype))


INCLUSIVE_WINDOW = replace(TARGET, attention=inclusive_window)
TILED_GQA = replace(TARGET, attention=tiled_gqa)
TOP_LEFT = replace(TARGET, attention=top_left)
INTERLEAVED_ROPE = replace(
    TARGET,
    capabilities=TARGET.capabilities | {"layer", "offset", "rope"},
    layer=interleaved_rope_layer,
    rope=interleaved_rope,
)
PARTIAL_ROPE = replace(TARGET, capabilities=TARGET.capabilities | {"rope"}, rope=partial_rope)
FLOAT32_LAYER = replace(
    TARGET, capabilities=TARGET.capabilities | {"float64", "layer", "offset"}, layer=float32_layer
)


def window_ignored(q, k, v, *, window=None, **kwargs):
    """The window argument accepted and dropped: full causal attention whatever W."""
    return attention(q, k, v, **kwargs)


def transposed(q, k, v, **kwargs):
    """The output in (B, Tq, Hq, dv) layout instead of (B, Hq, Tq, dv): a shape bug, no convention."""
    return attention(q, k, v, **kwargs).transpose(1, 2)


def float32_inside(q, k, v, **kwargs):
    """float64 inputs computed in float32 and the output cast back: float32's accuracy in a float64
    tensor, though the target declares "float64" (it has torch's capabilities)."""
    sinks = kwargs.get("sinks")
    if torch.is_tensor(sinks):
        kwargs["sinks"] = sinks.float()
    return attention(q.float(), k.float(), v.float(), **kwargs).to(q.dtype)


WINDOW_IGNORED = replace(TARGET, attention=window_ignored)
FLOAT32_INSIDE = replace(TARGET, attention=float32_inside)
TRANSPOSED = replace(TARGET, attention=transposed)

# The line the run's diagnosis of each target starts with (properties/diagnosis.py), which every
# property it fails must show (test_conformance.py).
FINDINGS = {
    "INCLUSIVE_WINDOW": "convention mismatch: the target follows a window of W+1 keys",
    "TILED_GQA": "convention mismatch: the target follows tile-style GQA",
    "TOP_LEFT": "convention mismatch: the target follows top-left alignment",
    "INTERLEAVED_ROPE": "convention mismatch: the target follows interleaved RoPE pairs",
    "WINDOW_IGNORED": "window ignored: the target attends as if window=None",
    "PARTIAL_ROPE": "partial rotary: the target rotates only the first",
}
