"""Attention written the way Llama-family modeling files write it."""

import torch
from torch import nn


class LlamaConfig:
    def __init__(self, hidden_size=512, intermediate_size=1376, num_attention_heads=8, num_key_value_heads=2):
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.num_attention_heads, self.num_key_value_heads = num_attention_heads, num_key_value_heads
        self.head_dim = hidden_size // num_attention_heads


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(hidden_size)), eps

    def forward(self, hidden_states):
        variance = hidden_states.float().pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states.float() * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(self.weight.dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2) / dim), persistent=False)

    def forward(self, x, position_ids):
        emb = (position_ids[:, :, None].float() * self.inv_freq[None, None, :]).repeat(1, 1, 2)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin  # expect: F7


def repeat_kv(hidden_states, n_rep):
    batch, num_kv_heads, slen, head_dim = hidden_states.shape
    hidden_states = hidden_states[:, :, None].expand(-1, -1, n_rep, -1, -1)  # expect: F15
    return hidden_states.reshape(batch, num_kv_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx, self.head_dim = layer_idx, config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5  # expect: F3
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask, position_embeddings, past_key_value=None):
        hidden_shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)  # expect: F4
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)  # expect: F4
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)  # expect: F4
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)  # expect: F7
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(  # expect: F13
                key_states, value_states, self.layer_idx
            )
        key_states = repeat_kv(key_states, self.num_key_value_groups)  # expect: F15
        value_states = repeat_kv(value_states, self.num_key_value_groups)  # expect: F15
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling  # expect: F3
        attn_weights = attn_weights + attention_mask  # expect: F1
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)  # expect: F14
        attn_output = torch.matmul(attn_weights.to(query_states.dtype), value_states)
        attn_output = attn_output.transpose(1, 2).reshape(*hidden_shape[:-2], -1).contiguous()  # expect: F4
        return self.o_proj(attn_output)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx)
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size)

    def forward(self, hidden_states, attention_mask, **kwargs):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, attention_mask, **kwargs)  # expect: F18
        hidden_states = residual + hidden_states  # expect: F5 F6
        residual = hidden_states
        x = self.post_attention_layernorm(hidden_states)
        hidden_states = self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))
        return residual + hidden_states  # expect: F5 F6


def prepare_decoder_inputs(inputs_embeds, rotary_emb, past_key_values=None):
    seq_len, device, dtype = inputs_embeds.shape[1], inputs_embeds.device, inputs_embeds.dtype
    past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0  # expect: F12
    cache_position = torch.arange(past_seen_tokens, past_seen_tokens + seq_len, device=device)  # expect: F12
    min_value = torch.finfo(dtype).min  # expect: F1
    shape = (seq_len, past_seen_tokens + seq_len)
    causal_mask = torch.full(shape, min_value, dtype=dtype, device=device)  # expect: F1
    causal_mask = torch.triu(causal_mask, diagonal=past_seen_tokens + 1)  # expect: F2
    return causal_mask[None, None, :, :], rotary_emb(inputs_embeds, cache_position.unsqueeze(0))
