"""Attention written the way Mistral / Gemma-2 modeling files write it, with gpt-oss style attention sinks."""

import torch
from torch import nn


class MistralConfig:
    def __init__(self, hidden_size=1024, num_attention_heads=16, num_key_value_heads=4, num_hidden_layers=8):
        self.hidden_size, self.num_hidden_layers = hidden_size, num_hidden_layers
        self.num_attention_heads, self.num_key_value_heads = num_attention_heads, num_key_value_heads
        self.head_dim = hidden_size // num_attention_heads
        self.sliding_window, self.attn_logit_softcapping = 4096, 50.0
        self.rope_theta, self.attention_dropout = 10000.0, 0.0
        self.layer_types = [  # expect: F8
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_hidden_layers)
        ]


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)  # expect: F7


def repeat_kv(hidden_states, n_rep):
    batch, num_kv_heads, slen, head_dim = hidden_states.shape
    hidden_states = hidden_states[:, :, None, :, :].expand(-1, -1, n_rep, -1, -1)  # expect: F15
    return hidden_states.reshape(batch, num_kv_heads * n_rep, slen, head_dim)


def rotary_position_embeddings(config, seq_len, past_key_values=None, device=None, dtype=torch.float32):
    past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0  # expect: F12
    cache_position = torch.arange(past_seen_tokens, past_seen_tokens + seq_len, device=device)  # expect: F12
    dim = config.head_dim
    inv_freq = 1.0 / config.rope_theta ** (torch.arange(0, dim, 2, device=device) / dim)
    emb = (cache_position[None, :, None].float() * inv_freq).repeat(1, 1, 2)
    return (emb.cos().to(dtype), emb.sin().to(dtype)), cache_position


def sliding_window_causal_mask(cache_position, kv_length, sliding_window, dtype):
    q_pos = cache_position[:, None]
    kv_pos = torch.arange(kv_length, device=cache_position.device)[None, :]
    allowed = kv_pos <= q_pos  # expect: F2
    if sliding_window is not None:
        allowed = allowed & (q_pos - kv_pos < sliding_window)  # expect: F16
    mask = torch.zeros(allowed.shape, dtype=dtype, device=cache_position.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]  # expect: F1


class MistralAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        if config.num_attention_heads % config.num_key_value_heads != 0:  # expect: F9
            raise ValueError("num_attention_heads must be divisible by num_key_value_heads")
        if config.head_dim % 2 != 0:  # expect: F9
            raise ValueError("head_dim must be even to apply rotary embeddings")
        self.config, self.layer_idx, self.head_dim = config, layer_idx, config.head_dim
        is_sliding = config.layer_types[layer_idx] == "sliding_attention"  # expect: F8
        self.sliding_window = config.sliding_window if is_sliding else None  # expect: F8
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = config.head_dim**-0.5  # expect: F3
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)
        self.sinks = nn.Parameter(torch.zeros(config.num_attention_heads))

    def forward(self, hidden_states, position_embeddings, cache_position, past_key_value=None):
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
        softcap = self.config.attn_logit_softcapping
        if softcap is not None:
            attn_weights = attn_weights / softcap  # expect: F22
            attn_weights = torch.tanh(attn_weights)  # expect: F22
            attn_weights = attn_weights * softcap  # expect: F22
        attention_mask = sliding_window_causal_mask(  # expect: F8
            cache_position, key_states.shape[-2], self.sliding_window, attn_weights.dtype
        )
        attn_weights = attn_weights + attention_mask  # expect: F1

        # one learned sink logit per head, softmaxed together with the real keys and then discarded
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(query_states.shape[0], -1, query_states.shape[-2], -1)
        combined_logits = torch.cat([attn_weights, sinks.to(attn_weights.dtype)], dim=-1)  # expect: F10
        probs = nn.functional.softmax(combined_logits, dim=-1, dtype=torch.float32)  # expect: F14
        attn_weights = probs[..., :-1]  # expect: F10
        attn_weights = nn.functional.dropout(  # expect: F21
            attn_weights, p=self.config.attention_dropout, training=self.training
        )
        attn_output = torch.matmul(attn_weights.to(value_states.dtype), value_states)
        attn_output = attn_output.transpose(1, 2).reshape(*hidden_shape[:-2], -1).contiguous()  # expect: F4
        return self.o_proj(attn_output)
