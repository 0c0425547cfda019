"""A correct T5-style encoder self-attention sublayer: a learned relative-position bias, no scale.

As T5's modeling code writes it: an RMS norm without mean or bias (the variance of the features, a
learned gain), q, k, v and o projections without bias, heads of ``d_kv`` features whatever the width;
each head's bias read from an ``nn.Embedding(num_buckets, n_heads)`` at the bucket of the distance
``memory_position - context_position`` (keys after the query in the upper half of the buckets; in each
half, short distances one bucket each, longer ones logarithmically up to ``max_distance``, then the
last); the bias added to the raw dot products, which T5 never scales; every token seeing every other;
the output projection and the residual.

Its white box reports the bias as a ``Layer.score_mod`` read from the sublayer's own table (the table
is a parameter: each layer built has its own), the scale 1.0, and the module declares its mask_mod all-
visible.  It is a module target (x (B, T, D) -> (B, T, D)) that computes in float64 too.

Broken twins, each a bug T5 ports ship:

- ``FLIPPED_BUCKETS``: the distance taken as ``context_position - memory_position``: every key before the
  query gets the bias learned for the key as far after it, and the reverse;
- ``SCALED_BEFORE_THE_BIAS``: the attention handed to ``F.scaled_dot_product_attention`` with the bias as
  its float mask, which scales the dot products by 1/sqrt(d_kv) before adding it (T5 does not scale).

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def relative_position_bucket(relative_position: torch.Tensor, num_buckets: int, max_distance: int):
    """The bucket of each distance key - query (bidirectional)."""
    num_buckets //= 2
    buckets = (relative_position > 0).to(torch.long) * num_buckets
    relative_position = torch.abs(relative_position)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return buckets + torch.where(is_small, relative_position, if_large)


class T5SelfAttention(nn.Module):
    def __init__(
        self,
        d_model: int = 64,
        n_heads: int = 4,
        d_kv: int = 16,
        num_buckets: int = 16,
        max_distance: int = 32,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.n_heads, self.d_kv = n_heads, d_kv
        self.num_buckets, self.max_distance, self.eps = num_buckets, max_distance, eps
        self.layer_norm_weight = nn.Parameter(torch.ones(d_model))
        inner = n_heads * d_kv
        self.q = nn.Linear(d_model, inner, bias=False)
        self.k = nn.Linear(d_model, inner, bias=False)
        self.v = nn.Linear(d_model, inner, bias=False)
        self.o = nn.Linear(inner, d_model, bias=False)
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    def relative_position(self, query_length: int, key_length: int, device) -> torch.Tensor:
        context_position = torch.arange(query_length, device=device)[:, None]
        memory_position = torch.arange(key_length, device=device)[None, :]
        return memory_position - context_position

    def compute_bias(self, query_length: int, key_length: int, device) -> torch.Tensor:
        relative = self.relative_position(query_length, key_length, device)
        bucket = relative_position_bucket(relative, self.num_buckets, self.max_distance)
        values = self.relative_attention_bias(bucket)  # (query, key, heads)
        return values.permute(2, 0, 1).unsqueeze(0)  # (1, heads, query, key)

    def attend(self, query, key, value, position_bias):
        scores = torch.matmul(query, key.transpose(3, 2)) + position_bias
        work = torch.float64 if query.dtype == torch.float64 else torch.float32
        weights = F.softmax(scores.to(work), dim=-1).to(query.dtype)
        return torch.matmul(weights, value)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = hidden_states.shape
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        normed = self.layer_norm_weight * (hidden_states * torch.rsqrt(variance + self.eps))

        def shape(states):
            return states.view(batch, -1, self.n_heads, self.d_kv).transpose(1, 2)

        query, key, value = shape(self.q(normed)), shape(self.k(normed)), shape(self.v(normed))
        out = self.attend(query, key, value, self.compute_bias(seq, seq, hidden_states.device))
        out = out.transpose(1, 2).reshape(batch, seq, self.n_heads * self.d_kv)
        return hidden_states + self.o(out)


def layer(spec, sublayer: type[T5SelfAttention] = T5SelfAttention):
    from attnspec import Layer, projections, randomize_

    module = randomize_(sublayer(spec.d_model, spec.n_heads, spec.head_dim), spec).to(spec.device, spec.dtype)
    module.eval()
    table = module.relative_attention_bias.weight  # (buckets, heads): this layer's own

    def t5_bias(score, b, h, q_idx, kv_idx):
        bucket = relative_position_bucket(kv_idx - q_idx, module.num_buckets, module.max_distance)
        return (
            score + table.detach().to(score.device, score.dtype)[bucket.to(score.device), h.to(score.device)]
        )

    t5_bias.__qualname__ = f"t5_bias({module.num_buckets} buckets up to {module.max_distance})"
    return Layer(
        lambda x, offset: module(x),
        **projections(module.q, module.k, module.v, module.o),
        norm_weight=module.layer_norm_weight,
        norm="rms",
        eps=module.eps,
        residual=True,
        rope=False,
        scale=1.0,
        score_mod=t5_bias,
    )


def all_visible(b, h, q_idx, kv_idx):
    return kv_idx >= 0


def declared(module: T5SelfAttention, sublayer: type[T5SelfAttention]) -> T5SelfAttention:
    module.capabilities = {"layer", "float64"}
    module.layer = lambda spec: layer(spec, sublayer)
    module.mask_mod = all_visible
    return module


torch.manual_seed(0)
ATTENTION = declared(T5SelfAttention(), T5SelfAttention)


# --- the broken twins ---------------------------------------------------------------------------------


class FlippedBuckets(T5SelfAttention):
    """The distance query - key: the bias of a key before the query is the one learned for after it."""

    def relative_position(self, query_length: int, key_length: int, device) -> torch.Tensor:
        return -super().relative_position(query_length, key_length, device)


class ScaledBeforeTheBias(T5SelfAttention):
    """SDPA with the bias as its float mask: the dot products scaled by 1/sqrt(d_kv), then the bias."""

    def attend(self, query, key, value, position_bias):
        return F.scaled_dot_product_attention(query, key, value, attn_mask=position_bias.to(query.dtype))


torch.manual_seed(0)
FLIPPED_BUCKETS = declared(FlippedBuckets(), FlippedBuckets)
torch.manual_seed(0)
SCALED_BEFORE_THE_BIAS = declared(ScaledBeforeTheBias(), ScaledBeforeTheBias)
