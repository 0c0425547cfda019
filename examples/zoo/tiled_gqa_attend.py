"""A correct attention core in the style of x-transformers' ``Attend``, with tile-style grouped KV heads.

An ``Attend`` module without parameters: einsum scores ``b h i d, b h j d -> b h i j`` times the scale, a
causal mask ``ones(i, j).triu(j - i + 1)`` (bottom-right: the last query sees the last key) filled with
the dtype's most negative finite number, a softmax over the keys, an einsum with the values, and the
intermediates (the scores before and the weights after the softmax) returned beside the output.  Fewer KV
heads than query heads are repeated with ``k.repeat`` over the head axis: query head h reads KV head
h % Hkv, where Hugging Face, gpt-oss and torch's ``enable_gqa`` read h // (Hq / Hkv).  A model trained
this way keeps its heads in that order, so the target declares it (``conventions = {"gqa-tile"}``) and
the kit checks it under that convention.  Weights, non-causal calls, a value head size of its own, an
explicit scale, float64 and autograd; not fp16/bf16 (scored in the input dtype), windows or sinks, and no
query may see nothing (a finite fill averages every value).

Broken twin, ``interleaved_groups``: the same module after KV heads were repeated with
``repeat_interleave`` (Hugging Face's ``repeat_kv`` grouping, h // r), still declared "gqa-tile": every
query head of a group reads another KV head than the checkpoint's.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import einsum, nn


class Intermediates(NamedTuple):
    pre_softmax_attn: torch.Tensor
    post_softmax_attn: torch.Tensor


class Attend(nn.Module):
    def __init__(self, *, causal: bool = False, scale: float | None = None) -> None:
        super().__init__()
        self.causal = causal
        self.scale = scale

    def repeat_kv(self, t: torch.Tensor, heads: int) -> torch.Tensor:
        """(b, kv_heads, n, d) -> (b, heads, n, d): the KV heads tiled, query head h reads h % kv_heads."""
        return t.repeat(1, heads // t.shape[1], 1, 1)

    def forward(self, q, k, v):
        heads, kv_heads = q.shape[1], k.shape[1]
        if kv_heads != heads:
            k, v = self.repeat_kv(k, heads), self.repeat_kv(v, heads)
        scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        sim = einsum("b h i d, b h j d -> b h i j", q, k) * scale
        i, j = sim.shape[-2:]
        if self.causal:
            causal_mask = torch.ones((i, j), dtype=torch.bool, device=q.device).triu(j - i + 1)
            sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1)
        out = einsum("b h i j, b h j d -> b h i d", attn, v)
        return out, Intermediates(sim, attn)


class AttendInterleaved(Attend):
    def repeat_kv(self, t: torch.Tensor, heads: int) -> torch.Tensor:
        return t.repeat_interleave(heads // t.shape[1], dim=1)


def _call(attend, q, k, v, return_weights):
    out, intermediates = attend(q, k, v)
    return (out, intermediates.post_softmax_attn) if return_weights else out


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> (B, Hq, Tq, dv) [, weights]."""
    return _call(Attend(causal=causal, scale=scale), q, k, v, return_weights)


def interleaved_groups(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    return _call(AttendInterleaved(causal=causal, scale=scale), q, k, v, return_weights)


for _target in (attention, interleaved_groups):
    _target.capabilities = {"weights", "gqa", "decode", "non_causal", "value_dim", "scale", "float64", "grad"}
    _target.conventions = {"gqa-tile"}
