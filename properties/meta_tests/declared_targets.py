"""Correct targets that follow a neighbouring convention on purpose and declare it: the broken copies
of broken_targets.py that are neighbours, not bugs, with their ``conventions``.  Declared, each passes
the whole kit (test_declared.py); undeclared, each fails it and is named (test_conformance.py).

Then targets whose attention is not the causal softmax and that declare what it is with a mask_mod
(CONVENTIONS.md: "Declaring what the attention computes"), written on torch's SDPA with a boolean mask
as model code does: a packed bidirectional encoder and Llama-4-style chunked attention, each with a
broken twin (a causal mask left on the encoder, a chunk edge one key off).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from attnspec.properties.meta_tests import broken_targets

INCLUSIVE_WINDOW = replace(broken_targets.INCLUSIVE_WINDOW, conventions=frozenset({"window-inclusive"}))
# top-left alignment leaves no query without a key, so it takes no "blind" cases
TOP_LEFT = replace(
    broken_targets.TOP_LEFT,
    capabilities=broken_targets.TOP_LEFT.capabilities - {"blind"},
    conventions=frozenset({"top-left"}),
)
INTERLEAVED_ROPE = replace(broken_targets.INTERLEAVED_ROPE, conventions=frozenset({"rope-interleaved"}))
TILED_GQA = replace(broken_targets.TILED_GQA, conventions=frozenset({"gqa-tile"}))


def encoder_attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, document_ids=None):
    """A packed encoder batch (BERT-style packing): every token attends every token of its own sequence,
    before and after it.  ``causal`` is ignored: the mask_mod says what the mask is."""
    same_sequence = document_ids[:, :, None] == document_ids[:, None, :]  # (B, T, T)
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=same_sequence[:, None], scale=scale, enable_gqa=gqa
    )


def bidirectional(b, h, q_idx, kv_idx):
    return kv_idx >= 0


encoder_attention.mask_mod = bidirectional
encoder_attention.capabilities = frozenset({"gqa", "value_dim", "scale", "float64", "grad", "documents"})


def encoder_attention_causal(q, k, v, *, causal=True, window=None, sinks=None, scale=None, document_ids=None):
    """The encoder with the decoder's causal mask left on (the bug: is_causal copied from a decoder)."""
    same_sequence = document_ids[:, :, None] == document_ids[:, None, :]
    earlier = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    gqa = q.shape[1] != k.shape[1]
    mask = (same_sequence & earlier)[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


encoder_attention_causal.mask_mod = bidirectional
encoder_attention_causal.capabilities = encoder_attention.capabilities

CHUNK = 4  # Llama 4 uses 8192; a small chunk makes the edges show on short sequences


def chunked_attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, edge=0):
    """Chunked local attention (Llama 4's attention_chunk_size): causal within chunks of CHUNK positions;
    a decode step's queries keep their positions (bottom-right).  ``edge`` moves the keys' chunk edges."""
    q_pos = torch.arange(k.shape[2] - q.shape[2], k.shape[2], device=q.device)[:, None]
    k_pos = torch.arange(k.shape[2], device=q.device)[None, :]
    mask = (k_pos <= q_pos) & (q_pos // CHUNK == (k_pos + edge) // CHUNK)
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


def chunked_causal(b, h, q_idx, kv_idx):
    return (kv_idx <= q_idx) & (q_idx // CHUNK == kv_idx // CHUNK)


chunked_attention.mask_mod = chunked_causal
chunked_attention.capabilities = frozenset({"gqa", "decode", "value_dim", "scale", "float64", "grad"})


def chunk_edge_one_key_late(q, k, v, **kwargs):
    """The chunked mask with each chunk's edge one key late: a chunk's first query still sees the last
    key of the chunk before (and loses its own last)."""
    return chunked_attention(q, k, v, edge=1, **kwargs)


chunk_edge_one_key_late.mask_mod = chunked_causal
chunk_edge_one_key_late.capabilities = chunked_attention.capabilities
