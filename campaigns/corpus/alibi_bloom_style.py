"""Attention written the way the BLOOM modeling file writes it (ALiBi, fused QKV, baddbmm)."""

import math

import torch
from torch import nn


def build_alibi_tensor(attention_mask, num_heads, dtype):
    # attention_mask: (batch, kv_length) of 0/1 -> alibi: (batch * num_heads, 1, kv_length)
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-8.0 / closest_power_of_2)
    slopes = [base ** (i + 1) for i in range(closest_power_of_2)]  # expect: F23
    if closest_power_of_2 != num_heads:
        # the remaining heads take every other slope of the next power of two
        extra_base = 2.0 ** (-4.0 / closest_power_of_2)
        slopes += [extra_base ** (2 * i + 1) for i in range(num_heads - closest_power_of_2)]  # expect: F23
    slopes = torch.tensor(slopes, device=attention_mask.device, dtype=torch.float32)
    # position of each key among the non-padding tokens; padding positions become 0
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor  # expect: F23
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


def prepare_attn_mask(attention_mask, query_length, past_key_values_length):
    # boolean mask, True where attention is NOT allowed: (batch, 1, query_length, kv_length)
    kv_length = attention_mask.shape[-1]
    causal = torch.ones(query_length, kv_length, dtype=torch.bool, device=attention_mask.device)
    causal = causal.triu(diagonal=past_key_values_length + 1)  # expect: F2
    return causal[None, None, :, :] | ~attention_mask.bool()[:, None, None, :]  # expect: F17


class BloomAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.n_head
        self.head_dim = self.hidden_size // self.num_heads
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)  # expect: F3
        self.query_key_value = nn.Linear(self.hidden_size, 3 * self.hidden_size, bias=True)
        self.dense = nn.Linear(self.hidden_size, self.hidden_size)
        self.attention_dropout = nn.Dropout(config.attention_dropout)

    def _split_heads(self, fused_qkv):
        batch_size, seq_length, _ = fused_qkv.shape
        fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads, 3, self.head_dim)  # expect: F4
        return fused_qkv[..., 0, :], fused_qkv[..., 1, :], fused_qkv[..., 2, :]

    def forward(self, hidden_states, alibi, attention_mask, layer_past=None, use_cache=False):
        batch_size, q_length, _ = hidden_states.shape
        query_layer, key_layer, value_layer = self._split_heads(self.query_key_value(hidden_states))
        # queries/values: (batch * heads, q_length, head_dim); keys: (batch * heads, head_dim, q_length)
        batch_heads = batch_size * self.num_heads
        query_layer = query_layer.transpose(1, 2).reshape(batch_heads, q_length, -1)  # expect: F4
        key_layer = key_layer.permute(0, 2, 3, 1).reshape(batch_heads, -1, q_length)  # expect: F4
        value_layer = value_layer.transpose(1, 2).reshape(batch_heads, q_length, -1)  # expect: F4
        if layer_past is not None:
            past_key, past_value = layer_past  # expect: F13
            key_layer = torch.cat((past_key, key_layer), dim=2)
            value_layer = torch.cat((past_value, value_layer), dim=1)
        present = (key_layer, value_layer) if use_cache else None  # expect: F13
        kv_length = key_layer.shape[-1]

        # alibi * beta + (q @ k) * alpha, in a single fused call
        matmul_result = alibi.baddbmm(  # expect: F3 F23
            batch1=query_layer, batch2=key_layer, beta=1.0, alpha=self.inv_norm_factor
        )
        attention_scores = matmul_result.view(batch_size, self.num_heads, q_length, kv_length)
        input_dtype = attention_scores.dtype
        if input_dtype == torch.float16:
            attention_scores = attention_scores.to(torch.float)
        min_value = torch.finfo(attention_scores.dtype).min  # expect: F1
        attn_weights = torch.masked_fill(attention_scores, attention_mask, min_value)  # expect: F1 F17
        attention_probs = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)  # expect: F14
        attention_probs = self.attention_dropout(attention_probs.to(input_dtype))

        attention_probs_reshaped = attention_probs.view(batch_heads, q_length, kv_length)
        context_layer = torch.bmm(attention_probs_reshaped, value_layer)
        context_layer = context_layer.view(batch_size, self.num_heads, q_length, self.head_dim)
        context_layer = context_layer.permute(0, 2, 1, 3).reshape(batch_size, q_length, -1)  # expect: F4
        return self.dense(context_layer), present


class BloomBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.self_attention = BloomAttention(config)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.mlp = nn.Sequential(
            nn.Linear(config.hidden_size, 4 * config.hidden_size),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * config.hidden_size, config.hidden_size),
        )

    def forward(self, hidden_states, alibi, attention_mask, layer_past=None, use_cache=False):
        layernorm_output = self.input_layernorm(hidden_states)
        attn_output, present = self.self_attention(  # expect: F17 F18
            layernorm_output, alibi, attention_mask, layer_past=layer_past, use_cache=use_cache
        )
        hidden_states = hidden_states + attn_output  # expect: F5 F6
        layernorm_output = self.post_attention_layernorm(hidden_states)
        hidden_states = hidden_states + self.mlp(layernorm_output)  # expect: F5 F6
        return hidden_states, present
