"""Attention written the way the GPT-NeoX modeling file writes it."""

import math

import torch
from torch import nn


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    q_embed = (q * cos) + (rotate_half(q) * sin)  # expect: F7
    k_embed = (k * cos) + (rotate_half(k) * sin)  # expect: F7
    return q_embed, k_embed


class GPTNeoXRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, seq_len, offset=0):
        t = torch.arange(offset, offset + seq_len, device=x.device, dtype=self.inv_freq.dtype)  # expect: F12
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[None, None].to(x.dtype), emb.sin()[None, None].to(x.dtype)


class GPTNeoXAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.hidden_size = config.hidden_size
        self.head_size = self.hidden_size // self.num_attention_heads
        self.norm_factor = math.sqrt(self.head_size)  # expect: F3
        self.rotary_emb = GPTNeoXRotaryEmbedding(self.head_size, base=config.rotary_emb_base)
        self.query_key_value = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_dropout = nn.Dropout(config.attention_dropout)
        max_positions = config.max_position_embeddings
        bias = torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool))  # expect: F2
        self.register_buffer("bias", bias.view(1, 1, max_positions, max_positions), persistent=False)

    def forward(self, hidden_states, attention_mask=None, layer_past=None, use_cache=False):
        batch_size, seq_len, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states)
        # [batch, seq_len, (num_heads * 3 * head_size)] -> per-head [q | k | v]
        qkv = qkv.view(batch_size, seq_len, self.num_attention_heads, 3 * self.head_size)  # expect: F4
        query, key, value = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)  # expect: F4

        offset = layer_past[0].shape[-2] if layer_past is not None else 0  # expect: F12
        cos, sin = self.rotary_emb(value, seq_len, offset=offset)  # expect: F12
        query, key = apply_rotary_pos_emb(query, key, cos, sin)  # expect: F7

        if layer_past is not None:
            past_key, past_value = layer_past  # expect: F13
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value) if use_cache else None  # expect: F13

        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
        attn_scores = torch.matmul(query, key.transpose(-1, -2)) / self.norm_factor  # expect: F3
        mask_value = torch.finfo(attn_scores.dtype).min  # expect: F1
        attn_scores = torch.where(causal_mask, attn_scores, mask_value)  # expect: F1 F2
        if attention_mask is not None:
            attn_scores = attn_scores + attention_mask  # expect: F1 F17
        attn_weights = nn.functional.softmax(attn_scores, dim=-1, dtype=torch.float32)  # expect: F14
        attn_weights = self.attention_dropout(attn_weights.to(value.dtype))
        attn_output = torch.matmul(attn_weights, value)

        attn_output = attn_output.permute(0, 2, 1, 3).reshape(batch_size, seq_len, -1)  # expect: F4
        return self.dense(attn_output), present


class GPTNeoXLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = GPTNeoXAttention(config)
        self.mlp = nn.Sequential(
            nn.Linear(config.hidden_size, config.intermediate_size),
            nn.GELU(),
            nn.Linear(config.intermediate_size, config.hidden_size),
        )

    def forward(self, hidden_states, attention_mask=None, layer_past=None, use_cache=False):
        attn_output, present = self.attention(  # expect: F17 F18
            self.input_layernorm(hidden_states), attention_mask, layer_past=layer_past, use_cache=use_cache
        )
        mlp_output = self.mlp(self.post_attention_layernorm(hidden_states))
        # parallel residual: attention and MLP both read the same layer input
        hidden_states = hidden_states + attn_output + mlp_output  # expect: F5 F6
        return hidden_states, present
