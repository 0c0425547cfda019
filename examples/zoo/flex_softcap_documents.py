"""A correct attention written on PyTorch's FlexAttention: Gemma-2-style soft-capping over packed documents.

The score_mod caps each scaled logit at ``SOFTCAP * tanh(score / SOFTCAP)``; the block mask is built on
every call from the ``document_ids`` the collator packed the batch with, ``and_masks`` of a causal
mask_mod and a same-document one.  FlexAttention numbers queries from 0 in q, so with fewer queries than
keys (a decode step) the caller shifts q_idx by Tk - Tq itself.  ``flex_attention`` runs eagerly here
(uncompiled it warns that it is: the warning is silenced around the call).  GQA through ``enable_gqa`` (query
head h reads KV head h // (Hq / Hkv)), an explicit scale, a value head size of its own, float64.

It declares what it computes in FlexAttention's own vocabulary: ``score_mod`` the soft-cap, ``mask_mod``
the causal mask, and the "documents" capability.  Not declared: weights (flex returns none), sinks and
windows, grad (flex has no backward on the CPU), float16 (the eager path rounds the probabilities to the
input dtype before the product with V), queries before the keys (a mask_mod is the whole mask).

Broken twin, ``cap_after_mask``: the document mask written into the score_mod as a -inf fill, capped
after it, so a hidden key gets the finite logit -SOFTCAP instead of none: it leaks weight across
documents and from the future (the public bug class "soft-cap applied after the mask").

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import warnings

import torch
from torch.nn.attention.flex_attention import and_masks, create_block_mask, flex_attention

SOFTCAP = 20.0  # Gemma 2 caps attention logits at 50.0; a smaller cap bends more of the drawn logits


def soft_cap(score, b, h, q_idx, kv_idx):
    return SOFTCAP * torch.tanh(score / SOFTCAP)


def causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def shifted(mask_mod, offset):
    """mask_mod with the queries moved to the end of the keys: flex's q_idx i is position offset + i."""

    def at_the_end(b, h, q_idx, kv_idx):
        return mask_mod(b, h, q_idx + offset, kv_idx)

    return at_the_end


def same_document(document_ids):
    def document(b, h, q_idx, kv_idx):
        return document_ids[b, q_idx] == document_ids[b, kv_idx]

    return document


def _flex(q, k, v, score_mod, block_mask, scale):
    gqa = k.shape[1] != q.shape[1]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, score_mod, block_mask, scale=scale, enable_gqa=gqa)


def attention(
    q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False, document_ids=None
):
    """q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv), document_ids (B, Tk) -> (B, Hq, Tq, dv)."""
    batch, _, tq, _ = q.shape
    tk = k.shape[2]
    mask_mod = and_masks(causal_mask, same_document(document_ids))
    block_mask = create_block_mask(shifted(mask_mod, tk - tq), batch, None, tq, tk, device=q.device)
    return _flex(q, k, v, soft_cap, block_mask, scale)


def cap_after_mask(
    q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False, document_ids=None
):
    """The same attention with its mask moved into the score_mod, before the soft-cap."""
    offset = k.shape[2] - q.shape[2]

    def masked_soft_cap(score, b, h, q_idx, kv_idx):
        position = q_idx + offset
        seen = (kv_idx <= position) & (document_ids[b, position] == document_ids[b, kv_idx])
        score = torch.where(seen, score, -float("inf"))
        return SOFTCAP * torch.tanh(score / SOFTCAP)

    return _flex(q, k, v, masked_soft_cap, None, scale)


for _target in (attention, cap_after_mask):
    _target.capabilities = {"documents", "gqa", "decode", "value_dim", "scale", "float64"}
    _target.score_mod = soft_cap
    _target.mask_mod = causal_mask
