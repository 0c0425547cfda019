"""A correct attention layer in the style of Meta's original Llama code: RoPE through complex numbers.

The rotary embedding views each head's features as d/2 complex numbers (x_2i + i x_2i+1) and
multiplies them by unit complex numbers e^(i p theta_i) from a precomputed table (``torch.polar``):
it rotates the interleaved pairs (x_2i, x_2i+1), a neighbour of attnspec's half-split pairs, and the
target declares it (``conventions = {"rope-interleaved"}``), so the kit checks it under that
convention.  Projections without biases, KV heads repeated for GQA, a causal mask of -inf above the
diagonal (with zeros before it for the cached positions), the softmax in float32 unless the layer is
float64, and a preallocated KV cache written at ``start_pos``.  No pre-norm and no residual inside
the attention module (the transformer block adds them).

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math
import types

import torch
from torch import nn


def rotation_table(head_dim: int, positions: torch.Tensor, base: float, dtype: torch.dtype) -> torch.Tensor:
    """e^(i p theta_i) for every position p and pair i, theta_i = base^(-2i/d): (T, d/2), complex."""
    real = torch.float64 if dtype == torch.float64 else torch.float32
    even = torch.arange(0, head_dim, 2, device=positions.device)[: head_dim // 2].to(real)
    freqs = 1.0 / (base ** (even / head_dim))
    angles = torch.outer(positions.to(real), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def rotate(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x (..., T, d) times the table (T, d/2), pair by pair, through complex numbers."""
    real = torch.float64 if x.dtype == torch.float64 else torch.float32
    pairs = torch.view_as_complex(x.to(real).reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(pairs * table).flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, head_dim: int, base: float) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim, self.base = n_heads, n_kv_heads, head_dim, base
        self.wq = nn.Linear(dim, n_heads * head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * head_dim, bias=False)
        self.wo = nn.Linear(n_heads * head_dim, dim, bias=False)
        self.cache_k: torch.Tensor | None = None
        self.cache_v: torch.Tensor | None = None

    def new_cache(self, batch: int, max_len: int, like: torch.Tensor) -> None:
        shape = (batch, max_len, self.n_kv_heads, self.head_dim)
        self.cache_k, self.cache_v = like.new_zeros(shape), like.new_zeros(shape)

    def forward(self, x: torch.Tensor, start_pos: int, use_cache: bool = False) -> torch.Tensor:
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        positions = torch.arange(start_pos, start_pos + seqlen, device=x.device)
        table = rotation_table(self.head_dim, positions, self.base, x.dtype)  # (T, d/2)
        xq = rotate(xq.transpose(1, 2), table)  # (B, H, T, d)
        xk = rotate(xk.transpose(1, 2), table).transpose(1, 2)
        keys, values = xk, xv
        if use_cache:
            self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
            self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv
            keys, values = self.cache_k[:bsz, : start_pos + seqlen], self.cache_v[:bsz, : start_pos + seqlen]
        out = attention(xq, keys.transpose(1, 2), values.transpose(1, 2))
        return self.wo(out.transpose(1, 2).contiguous().view(bsz, seqlen, -1))


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """Meta-style causal attention: KV heads repeated, a -inf upper triangle with zeros for the cached
    positions before it, softmax in float32 (float64 for float64 inputs)."""
    n_rep = q.shape[1] // k.shape[1]
    k, v = torch.repeat_interleave(k, n_rep, dim=1), torch.repeat_interleave(v, n_rep, dim=1)
    seqlen, total = q.shape[2], k.shape[2]
    scores = q @ k.transpose(2, 3) / math.sqrt(q.shape[-1])
    mask = torch.full((seqlen, seqlen), float("-inf"), device=q.device).triu(1)
    mask = torch.hstack([torch.zeros(seqlen, total - seqlen, device=q.device), mask])
    soft = torch.float64 if q.dtype == torch.float64 else torch.float32
    probs = torch.softmax(scores.to(soft) + mask.to(soft), dim=-1).type_as(q)
    return probs @ v


def rope(x, positions, base=10000.0):
    return rotate(x, rotation_table(x.shape[-1], positions, base, x.dtype))


def layer(spec):
    from attnspec import Layer, randomize_

    module = Attention(spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.base)
    module = randomize_(module, spec).to(spec.device, spec.dtype)

    def decode(x, chunks):
        module.new_cache(x.shape[0], x.shape[1], x)
        outputs, start = [], 0
        for size in chunks:
            outputs.append(module(x[:, start : start + size], start, use_cache=True))
            start += size
        return torch.cat(outputs, dim=1)

    return Layer(
        lambda x, offset: module(x, offset),
        wq=module.wq.weight, wk=module.wk.weight, wv=module.wv.weight, wo=module.wo.weight, decode=decode,
    )


attention.capabilities = {"gqa", "decode", "float64", "grad", "rope", "layer", "offset", "cache"}
attention.conventions = {"rope-interleaved"}
attention.rope = rope
attention.layer = layer

# The same layer without its declaration: the kit then holds it to half-split pairs, and it fails with a
# diagnosis that names the interleaved pairs (tests/targets/test_zoo.py).
UNDECLARED = types.SimpleNamespace(
    attention=attention, capabilities=attention.capabilities, rope=rope, layer=layer
)
