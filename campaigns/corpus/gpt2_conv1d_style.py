"""Attention written the way the Hugging Face GPT-2 modeling file writes it."""

import torch
from torch import nn


class Conv1D(nn.Module):
    """Linear layer with a transposed (in_features, out_features) weight, as in the original GPT."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def get_extended_attention_mask(attention_mask, dtype):
    attention_mask = attention_mask[:, None, None, :].to(dtype=dtype)
    return (1.0 - attention_mask) * torch.finfo(dtype).min  # expect: F1 F17


class GPT2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        max_positions = config.max_position_embeddings
        causal = torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool))  # expect: F2
        self.register_buffer("bias", causal.view(1, 1, max_positions, max_positions), persistent=False)
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.scale_attn_weights = config.scale_attn_weights  # expect: F3
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.view(tensor.size()[:-1] + (num_heads, attn_head_size))
        return tensor.permute(0, 2, 1, 3)  # expect: F4

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()  # expect: F4
        return tensor.view(tensor.size()[:-2] + (num_heads * attn_head_size,))

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        if self.scale_attn_weights:  # expect: F3
            attn_weights = attn_weights / (value.size(-1) ** 0.5)  # expect: F3
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min  # expect: F1
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)  # expect: F1 F2
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask  # expect: F1 F17
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)  # expect: F14
        attn_weights = self.attn_dropout(attn_weights.type(value.dtype))
        return torch.matmul(attn_weights, value), attn_weights

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        if layer_past is not None:
            past_key, past_value = layer_past  # expect: F13
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value) if use_cache else None  # expect: F13
        attn_output, _ = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.resid_dropout(self.c_proj(attn_output))
        return attn_output, present


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        inner_dim = 4 * config.hidden_size
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.c_fc = Conv1D(inner_dim, config.hidden_size)
        self.c_proj = Conv1D(config.hidden_size, inner_dim)
        self.act = nn.GELU(approximate="tanh")
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output, present = self.attn(  # expect: F17 F18
            hidden_states, layer_past=layer_past, attention_mask=attention_mask, use_cache=use_cache
        )
        hidden_states = attn_output + residual  # expect: F5 F6
        residual = hidden_states
        feed_forward = self.dropout(self.c_proj(self.act(self.c_fc(self.ln_2(hidden_states)))))
        hidden_states = residual + feed_forward  # expect: F5 F6
        return hidden_states, present
