"""What a counterfactual computes on: an attention call (``AttentionCase``), a layer (``LayerCase``) or RoPE
alone (``RopeCase``),
the ``Counterfactual`` itself, and the oracle on either with some of what it asks for changed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from ..oracle import Call, attention_layer_oracle, attention_oracle

# what a layer's attention takes of the layer's keywords (attention_layer_oracle), the rest its
# projections, positions and output; and what only a call of attention has
ATTENTION_KEYWORDS = {"n_heads", "n_kv_heads", "window", "sinks", "gqa", "score_mod", "mask_mod", "scale"}
PER_CALL = {"document_ids", "padding_mask"}


@dataclass(frozen=True)
class AttentionCase:
    """An attention call: q, k, v and what it asks for."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    call: Call


@dataclass(frozen=True)
class LayerCase:
    """A layer over ``x``: ``layer`` holds the keywords of attention_layer_oracle (its parameters,
    sizes, window, RoPE...); ``chunks``: the sizes it was decoded in through its cache, None for one
    forward pass."""

    x: torch.Tensor
    layer: dict
    chunks: tuple[int, ...] | None = None


@dataclass(frozen=True)
class RopeCase:
    """RoPE alone on ``x`` (..., T, d) at ``positions``, rotating its first ``rotary_dim`` features of
    each head (None: all d)."""

    x: torch.Tensor
    positions: list[int]
    base: float
    rotary_dim: int | None


@dataclass(frozen=True)
class Counterfactual:
    fault: str  # the catalogue's id ("F22"); "" for a cause the catalogue has no fault for
    behaves: str  # what the code does, in words
    fix: str  # what to change (for a convention: how to declare it)
    attention: Callable[[AttentionCase], torch.Tensor | None] | None = None
    layer: Callable[[LayerCase], torch.Tensor | None] | None = None
    rope: Callable[[RopeCase], torch.Tensor | None] | None = None

    def says(self) -> str:
        named = f" ({self.fault})" if self.fault else ""
        return f"{self.behaves}{named}: {self.fix}"


def call_fields(call: Call) -> dict:
    return {f.name: getattr(call, f.name) for f in fields(Call)}


def oracle(case: AttentionCase, **change) -> torch.Tensor:
    return attention_oracle(case.q, case.k, case.v, **{**call_fields(case.call), **change})[0]


def layer_call(layer: dict) -> Call:
    """The Call a layer's attention makes: causal unless its mask_mod says otherwise."""
    return Call(
        window=layer.get("window"),
        sinks=layer.get("sinks"),
        scale=layer.get("scale"),
        score_mod=layer.get("score_mod"),
        mask_mod=layer.get("mask_mod"),
    )


def layer_oracle(case: LayerCase, **change) -> torch.Tensor:
    return attention_layer_oracle(case.x, **{**case.layer, **change})
