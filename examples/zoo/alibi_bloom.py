"""A correct ALiBi attention in the style of BLOOM's modeling code.

The bias is built once per call as BLOOM builds it: one slope per head, geometric from the closest power
of two at or below the head count (2^(-8/n), its powers 1..n), and when the heads are more than that,
the odd powers of the next power of two's base for the rest; the bias of key j is ``slope * j``, a row of
its own per head.  The scores are ``baddbmm(alibi, q, k^T, alpha=1/sqrt(d))``: the bias that BLOOM
writes relative to the key alone differs from ``slope * (j - i)`` by ``slope * i``, the same for every
key of a row, which the softmax ignores (in float32 it rounds the logits near the diagonal at slope * i,
up to ~135 over 190 keys: the kit's float32 bound does not allow for that yet, test_zoo.FALSE_FAILURES).
The causal mask fills the future with the dtype's most
negative number, and the softmax runs in float32 (float64 for float64 inputs).  Batch and heads are
folded into one axis, as BLOOM's ``bmm`` calls do.

The slopes are per head, so it declares its model's head count (``heads = (12,)``: 8 slopes of the
power of two, 4 extra) and, as ``score_mod``, the equivalent bias ``slope[h] * (kv_idx - q_idx)``, a
closure over the same float32 slopes.  It returns the weights, takes a value head size of its own, an
explicit scale, float64 and autograd.  Not declared: GQA (BLOOM has none), float16 (BLOOM rounds the
probabilities to the input dtype before the product with V), windows, sinks, documents.

Broken twin, ``flipped_sign``: the bias ``slope * (i - j)`` (``-slope * j`` in BLOOM's form), as public
example code has shipped it: distant keys are rewarded instead of penalised.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math

import torch

N_HEADS = 12


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """(n_heads,) float32: 2^(-8/n)^1..n for n, the largest power of two <= n_heads, then the odd powers
    1, 3, 5, ... of 2^(-4/n) for the heads beyond n."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = torch.tensor(2.0 ** (-8.0 / closest), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, closest + 1, dtype=torch.int32))
    if closest < n_heads:
        extra_base = torch.tensor(2.0 ** (-4.0 / closest), dtype=torch.float32)
        extra = torch.arange(1, 2 * (n_heads - closest), 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra)])
    return slopes


SLOPES = alibi_slopes(N_HEADS)


def alibi(score, b, h, q_idx, kv_idx):
    """The bias as a score_mod: the scaled logit plus slope_h * (kv_idx - q_idx)."""
    return score + SLOPES.to(score.device, score.dtype)[h] * (kv_idx - q_idx)


def build_alibi_tensor(slopes, batch, seq_len, dtype, device):
    """(batch * heads, 1, seq_len): slope_h * j for every key j, the same for every query."""
    positions = torch.arange(seq_len, device=device, dtype=dtype)
    bias = slopes.to(device, dtype)[:, None] * positions[None, :]
    return bias.repeat(batch, 1).view(batch * len(slopes), 1, seq_len)


def _attention(q, k, v, scale, return_weights, slopes):
    batch, n_heads, tq, head_dim = q.shape
    tk, work = k.shape[2], torch.float64 if q.dtype == torch.float64 else torch.float32
    inv_norm_factor = 1.0 / math.sqrt(head_dim) if scale is None else scale
    fused_q = q.reshape(batch * n_heads, tq, head_dim)
    fused_k = k.reshape(batch * n_heads, tk, head_dim).transpose(1, 2)
    alibi_bias = build_alibi_tensor(slopes, batch, tk, q.dtype, q.device)
    scores = alibi_bias.baddbmm(batch1=fused_q, batch2=fused_k, beta=1.0, alpha=inv_norm_factor)
    future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(tk - tq + 1)
    scores = scores.view(batch, n_heads, tq, tk).masked_fill(future, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=work).to(q.dtype)
    out = torch.bmm(probs.view(batch * n_heads, tq, tk), v.reshape(batch * n_heads, tk, -1))
    out = out.view(batch, n_heads, tq, -1)
    return (out, probs) if return_weights else out


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """q (B, 12, Tq, d), k (B, 12, Tk, d), v (B, 12, Tk, dv) -> (B, 12, Tq, dv) [, weights]."""
    return _attention(q, k, v, scale, return_weights, SLOPES)


def flipped_sign(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    """The same attention with the bias of the opposite sign: slope * (q_idx - kv_idx)."""
    return _attention(q, k, v, scale, return_weights, -SLOPES)


for _target in (attention, flipped_sign):
    _target.capabilities = {"weights", "decode", "value_dim", "scale", "float64", "grad"}
    _target.heads = (N_HEADS,)
    _target.score_mod = alibi
