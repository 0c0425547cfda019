"""Attention written the way FlexAttention mask_mod / score_mod code writes it."""

import torch
from torch.nn.attention.flex_attention import and_masks, create_block_mask, flex_attention

WINDOW = 1024


def causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx  # expect: F2


def sliding_window_causal(b, h, q_idx, kv_idx):
    causal = q_idx >= kv_idx  # expect: F2
    window = q_idx - kv_idx < WINDOW  # expect: F16
    return causal & window


def generate_doc_mask_mod(document_ids):
    # document_ids: (S,) integer id of the packed document each token belongs to
    def doc_mask(b, h, q_idx, kv_idx):
        return document_ids[q_idx] == document_ids[kv_idx]  # expect: F24

    return doc_mask


def generate_padding_mask_mod(lengths):
    # lengths: (B,) number of real (right-padded) tokens in each sequence
    def padding_mask(b, h, q_idx, kv_idx):
        return kv_idx < lengths[b]  # expect: F17

    return padding_mask


def generate_tanh_softcap(cap):
    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)  # expect: F22

    return softcap


def generate_alibi_bias(num_heads, device=None):
    exponents = torch.arange(1, num_heads + 1, dtype=torch.float32, device=device)  # expect: F23
    slopes = torch.exp2(-8.0 * exponents / num_heads)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)  # expect: F23

    return alibi


def build_document_block_mask(document_ids):
    seq_len = document_ids.shape[0]
    mask_mod = and_masks(causal_mask, generate_doc_mask_mod(document_ids))
    return create_block_mask(mask_mod, None, None, seq_len, seq_len, device=document_ids.device)


def build_padded_block_mask(lengths, seq_len):
    mask_mod = and_masks(sliding_window_causal, generate_padding_mask_mod(lengths))  # expect: F17
    return create_block_mask(mask_mod, lengths.shape[0], None, seq_len, seq_len, device=lengths.device)


def attention(query, key, value, block_mask, score_mod=None):
    # query: (B, Hq, L, E); key / value: (B, Hkv, S, E) with Hq a multiple of Hkv
    return flex_attention(  # expect: F1 F3
        query, key, value, score_mod=score_mod, block_mask=block_mask, enable_gqa=True
    )


def softcapped_padded_attention(query, key, value, lengths, cap=50.0):
    block_mask = build_padded_block_mask(lengths, query.shape[-2])
    return attention(query, key, value, block_mask, score_mod=generate_tanh_softcap(cap))


def alibi_document_attention(query, key, value, document_ids):
    block_mask = build_document_block_mask(document_ids)
    score_mod = generate_alibi_bias(query.shape[1], device=query.device)
    return attention(query, key, value, block_mask, score_mod=score_mod)
