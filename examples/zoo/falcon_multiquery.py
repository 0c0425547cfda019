"""A correct multi-query attention block in the style of Falcon-7B's modeling code.

One fused ``query_key_value`` projection, without bias, whose output per token is the H query heads and
then one key head and one value head (``view(B, T, H + 2, d)``); RoPE with ``rotate_half`` pairs on
queries and keys at positions starting at ``offset``; batch and heads folded into one axis for ``bmm``,
the one key and value head repeated for each query head of its batch element
(``repeat_interleave``); a causal mask of the dtype's most negative number, the softmax in float32 (in
float64 for float64 inputs); the ``dense`` output projection and the residual, after a LayerNorm.

The block has exactly one KV head whatever its size: its ``layer(spec)`` raises ``CannotBuild`` for a
spec with another count, and it declares ``kv_heads = (1,)`` so that the kit never asks for one.  It is
a module target (x (B, T, D) -> (B, T, D)) with its white box; heads are D / H wide (``tied_width``).

Broken twin, ``KV_REPEATED``: the key and value head repeated over the folded batch*heads axis with
``repeat`` instead of ``repeat_interleave``: query head h of batch element b reads the keys of batch
element (b * H + h) % B.  With a batch of one that is the right element, so a single-sequence test
passes; with more, sequences read each other's keys.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class MultiQueryAttention(nn.Module):
    def __init__(self, hidden_size: int = 64, num_heads: int = 4, rope_theta: float = 10000.0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.input_layernorm = nn.LayerNorm(hidden_size)
        self.query_key_value = nn.Linear(hidden_size, hidden_size + 2 * self.head_dim, bias=False)
        self.dense = nn.Linear(hidden_size, hidden_size, bias=False)
        inv_freq = 1.0 / rope_theta ** (
            torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def shared_kv(self, kv: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B * H, T, d): the one KV head for every query head of its batch element."""
        return kv.repeat_interleave(self.num_heads, dim=0)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        batch, seq, _ = x.shape
        fused = self.query_key_value(self.input_layernorm(x)).view(
            batch, seq, self.num_heads + 2, self.head_dim
        )
        query = fused[:, :, :-2].transpose(1, 2)  # (B, H, T, d)
        key, value = fused[:, :, -2], fused[:, :, -1]  # (B, T, d) each: one head

        positions = torch.arange(offset, offset + seq, device=x.device, dtype=self.inv_freq.dtype)
        freqs = positions[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        query = query * cos + rotate_half(query) * sin
        key = key * cos + rotate_half(key) * sin

        query = query.reshape(batch * self.num_heads, seq, self.head_dim)
        key, value = self.shared_kv(key), self.shared_kv(value)
        scores = torch.bmm(query, key.transpose(1, 2)) / math.sqrt(self.head_dim)
        future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        probs = torch.softmax(scores.to(work), dim=-1).to(x.dtype)
        out = torch.bmm(probs, value).view(batch, self.num_heads, seq, self.head_dim)
        out = out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim)
        return x + self.dense(out)


def layer(spec, block: type[MultiQueryAttention] = MultiQueryAttention):
    from attnspec import CannotBuild, Layer, fused_projections, pre_norm, randomize_

    if spec.n_kv_heads != 1:
        raise CannotBuild(f"a multi-query block has one KV head, not {spec.n_kv_heads}")
    module = randomize_(block(spec.d_model, spec.n_heads, spec.base), spec).to(spec.device, spec.dtype).eval()
    return Layer(
        module.forward,
        **fused_projections(module.query_key_value, module.dense, spec),
        **pre_norm(module.input_layernorm),
        residual=True,
    )


CAPABILITIES = {"layer", "gqa", "offset", "float64"}

torch.manual_seed(0)
ATTENTION = MultiQueryAttention()
ATTENTION.capabilities = CAPABILITIES
ATTENTION.layer = layer
ATTENTION.kv_heads = (1,)
ATTENTION.tied_width = True


# --- the broken twin ----------------------------------------------------------------------------------


class KvRepeated(MultiQueryAttention):
    """The KV head repeated with ``repeat``: batch*heads entry i reads the keys of batch element i % B."""

    def shared_kv(self, kv: torch.Tensor) -> torch.Tensor:
        return kv.repeat(self.num_heads, 1, 1)


torch.manual_seed(0)
KV_REPEATED = KvRepeated()
KV_REPEATED.capabilities = CAPABILITIES
KV_REPEATED.layer = lambda spec: layer(spec, KvRepeated)
KV_REPEATED.kv_heads = (1,)
KV_REPEATED.tied_width = True
