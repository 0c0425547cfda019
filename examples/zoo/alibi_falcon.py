"""A correct ALiBi attention in the style of Falcon-RW's original modeling code.

The slopes are BLOOM's (geometric from the closest power of two at or below the head count, then the odd
powers of the next one's base), the bias of key j is ``slope * j``, but Falcon adds it to the raw dot
products and scales the sum: ``(q @ k^T + alibi) * inv_norm_factor`` with ``inv_norm_factor =
1/sqrt(head_dim)``.  So its bias is BLOOM's divided by sqrt(head_dim): with heads of 16 features, a
quarter of BLOOM's.  The causal mask fills the future with the dtype's most negative number, the softmax
runs in float32 (float64 for float64 inputs), and batch and heads are folded into one axis for ``bmm``.

Its bias depends on the head size, so it declares the one it is built for (``head_dims = (16,)``) and
its head count (``heads = (4,)``), and as ``score_mod`` the equivalent bias ``slope[h] / 4 * (kv_idx -
q_idx)``.  It returns the weights, takes float64 and autograd; not declared: an explicit scale (it would
scale the bias too), GQA, float16, windows, sinks, documents.

Broken twin, ``declared_as_bloom``: the same attention declared with BLOOM's ALiBi, ``slope[h] * (kv_idx -
q_idx)``, as a port that reads "ALiBi, BLOOM's slopes" in Falcon's config would declare it: the
declaration is four times steeper than what the code computes, which the kit fails.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math

import torch

N_HEADS, HEAD_DIM = 4, 16


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """(n_heads,) float32: 2^(-8/n)^1..n for n, the largest power of two <= n_heads, then the odd powers
    of 2^(-4/n) for the heads beyond n."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = 2.0 ** (-8.0 / closest)
    slopes = [base**power for power in range(1, closest + 1)]
    extra_base = 2.0 ** (-4.0 / closest)
    slopes += [extra_base**power for power in range(1, 2 * (n_heads - closest), 2)]
    return torch.tensor(slopes, dtype=torch.float32)


SLOPES = alibi_slopes(N_HEADS)


def falcon_alibi(score, b, h, q_idx, kv_idx):
    """Falcon's bias as a score_mod: the scaled logit plus slope_h / sqrt(16) * (kv_idx - q_idx)."""
    slope = SLOPES.to(score.device, score.dtype)[h] / math.sqrt(HEAD_DIM)
    return score + slope * (kv_idx - q_idx)


def bloom_alibi(score, b, h, q_idx, kv_idx):
    """BLOOM's bias: slope_h * (kv_idx - q_idx), not divided."""
    return score + SLOPES.to(score.device, score.dtype)[h] * (kv_idx - q_idx)


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """q (B, 4, Tq, 16), k (B, 4, Tk, 16), v (B, 4, Tk, 16) -> (B, 4, Tq, 16) [, weights]."""
    batch, num_heads, q_length, head_dim = q.shape
    kv_length = k.shape[2]
    inv_norm_factor = 1.0 / math.sqrt(head_dim)
    alibi = SLOPES.to(q.device, q.dtype)[:, None] * torch.arange(kv_length, device=q.device, dtype=q.dtype)
    alibi = alibi.repeat(batch, 1).view(batch * num_heads, 1, kv_length)

    query_layer = q.reshape(batch * num_heads, q_length, head_dim)
    key_layer = k.reshape(batch * num_heads, kv_length, head_dim)
    attention_scores = query_layer @ key_layer.transpose(-1, -2)
    attention_scores = (attention_scores + alibi) * inv_norm_factor

    future = torch.ones(q_length, kv_length, dtype=torch.bool, device=q.device).triu(kv_length - q_length + 1)
    attention_scores = attention_scores.view(batch, num_heads, q_length, kv_length)
    attention_scores = attention_scores.masked_fill(future, torch.finfo(attention_scores.dtype).min)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    attention_probs = torch.softmax(attention_scores, dim=-1, dtype=work).to(q.dtype)

    value_layer = v.reshape(batch * num_heads, kv_length, -1)
    out = torch.bmm(attention_probs.view(batch * num_heads, q_length, kv_length), value_layer)
    out = out.view(batch, num_heads, q_length, -1)
    return (out, attention_probs) if return_weights else out


def declared_as_bloom(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """The same attention, declared with BLOOM's bias."""
    return attention(q, k, v, causal=causal, scale=scale, return_weights=return_weights)


for _target, _mod in ((attention, falcon_alibi), (declared_as_bloom, bloom_alibi)):
    _target.capabilities = {"weights", "decode", "float64", "grad"}
    _target.heads = (N_HEADS,)
    _target.head_dims = (HEAD_DIM,)
    _target.score_mod = _mod
