"""Attention the way Qwen3 modeling files write it (per-head q/k RMSNorm), with Phi-style partial rotary."""

import torch
from torch import nn


class Qwen3RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        x32 = x.to(torch.float32)
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)).to(x.dtype)


class PhiPartialRotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.rotary_dim = int(config.head_dim * config.partial_rotary_factor)  # expect: F26
        if self.rotary_dim % 2 != 0:  # expect: F9
            raise ValueError("the rotated share of head_dim must have an even number of features")
        exponents = torch.arange(0, self.rotary_dim, 2, dtype=torch.float32) / self.rotary_dim  # expect: F26
        self.register_buffer("inv_freq", 1.0 / config.rope_theta**exponents, persistent=False)

    def forward(self, x, position_ids):
        emb = (position_ids[:, :, None].float() * self.inv_freq[None, None, :]).repeat(1, 1, 2)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]  # expect: F26
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]  # expect: F26
    q_embed = torch.cat([q_rot * cos + rotate_half(q_rot) * sin, q_pass], dim=-1)  # expect: F26
    k_embed = torch.cat([k_rot * cos + rotate_half(k_rot) * sin, k_pass], dim=-1)  # expect: F26
    return q_embed, k_embed


def repeat_kv(kv, n_rep):
    batch, num_kv_heads, seq_len, head_dim = kv.shape
    kv = kv[:, :, None, :, :].expand(batch, num_kv_heads, n_rep, seq_len, head_dim)  # expect: F15
    return kv.reshape(batch, num_kv_heads * n_rep, seq_len, head_dim)


class Qwen3Attention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        if config.num_attention_heads % config.num_key_value_heads != 0:  # expect: F9
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        self.layer_idx, self.head_dim = layer_idx, config.head_dim
        self.attention_dropout = config.attention_dropout
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5  # expect: F3
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask=None, past_key_value=None):
        hidden_shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape)  # expect: F4
        key_states = self.k_proj(hidden_states).view(hidden_shape)  # expect: F4
        # per-head RMSNorm over head_dim, before the rotary embedding
        query_states = self.q_norm(query_states).transpose(1, 2)  # expect: F4 F27
        key_states = self.k_norm(key_states).transpose(1, 2)  # expect: F4 F27
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
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]  # expect: F1 F17
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)  # expect: F14
        dropout_p = self.attention_dropout if self.training else 0.0  # expect: F21
        attn_weights = nn.functional.dropout(attn_weights, p=dropout_p, training=self.training)  # expect: F21
        attn_output = torch.matmul(attn_weights.to(value_states.dtype), value_states)
        attn_output = attn_output.transpose(1, 2).reshape(*hidden_shape[:-2], -1).contiguous()  # expect: F4
        return self.o_proj(attn_output)


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = Qwen3Attention(config, layer_idx)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask=None, past_key_value=None):
        residual = hidden_states
        hidden_states = self.self_attn(  # expect: F17 F18
            self.input_layernorm(hidden_states), position_embeddings, attention_mask, past_key_value
        )
        hidden_states = residual + hidden_states  # expect: F5 F6
        residual = hidden_states
        x = self.post_attention_layernorm(hidden_states)
        hidden_states = self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))
        return residual + hidden_states  # expect: F5 F6


def prepare_decoder_inputs(inputs_embeds, rotary_emb, padding_mask=None, past_key_values=None):
    seq_len, device, dtype = inputs_embeds.shape[1], inputs_embeds.device, inputs_embeds.dtype
    past_seen = past_key_values.get_seq_length() if past_key_values is not None else 0  # expect: F12
    cache_position = torch.arange(past_seen, past_seen + seq_len, device=device)  # expect: F12
    min_value = torch.finfo(dtype).min  # expect: F1
    mask = torch.full((seq_len, past_seen + seq_len), min_value, dtype=dtype, device=device)  # expect: F1
    mask = torch.triu(mask, diagonal=past_seen + 1)[None, None]  # expect: F2
    if padding_mask is not None:  # [batch, past_seen + seq_len], 1 for real tokens, 0 for padding
        is_pad = padding_mask[:, None, None, :] == 0  # expect: F17
        mask = mask.masked_fill(is_pad, min_value)  # expect: F1 F17
    position_embeddings = rotary_emb(inputs_embeds, cache_position.unsqueeze(0))  # expect: F12
    return mask, position_embeddings
