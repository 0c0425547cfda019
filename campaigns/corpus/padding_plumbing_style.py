"""Padding-mask plumbing written the way Hugging Face encoder-decoder era models thread masks to attention."""

import torch
import torch.nn.functional as F
from torch import nn


def _expand_mask(mask, dtype, tgt_len=None):
    # (bsz, src_len) 0/1 padding mask -> additive (bsz, 1, tgt_len, src_len)
    bsz, src_len = mask.shape
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted = 1.0 - expanded  # expect: F17
    return inverted.masked_fill(inverted.bool(), torch.finfo(dtype).min)  # expect: F1 F17


def _make_causal_mask(input_shape, dtype, device, past_key_values_length=0):
    bsz, tgt_len = input_shape
    src_len = tgt_len + past_key_values_length
    visible = torch.ones(tgt_len, src_len, dtype=torch.bool, device=device)
    visible = visible.tril(diagonal=past_key_values_length)  # expect: F2
    mask = torch.zeros(tgt_len, src_len, dtype=dtype, device=device)
    mask = mask.masked_fill(~visible, torch.finfo(dtype).min)  # expect: F1
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, src_len)


def _prepare_4d_causal_attention_mask(attention_mask, input_shape, dtype, device, past_key_values_length=0):
    causal = _make_causal_mask(input_shape, dtype, device, past_key_values_length)
    if attention_mask is None:
        return causal
    padding = _expand_mask(attention_mask, dtype, tgt_len=input_shape[-1])  # expect: F17
    return padding.masked_fill(causal.bool(), torch.finfo(dtype).min)  # expect: F1 F17


class Attention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx, self.num_heads = layer_idx, config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.attention_dropout = config.attention_dropout
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, is_causal=False):
        bsz, q_len, _ = hidden_states.shape
        qkv = self.qkv_proj(hidden_states).view(bsz, q_len, 3, self.num_heads, self.head_dim)  # expect: F4
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # expect: F4
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)  # expect: F13
        dropout_p = self.attention_dropout if self.training else 0.0  # expect: F21
        attn_output = F.scaled_dot_product_attention(  # expect: F1 F3 F17 F19 F21 F25
            query, key, value, attn_mask=attention_mask, dropout_p=dropout_p, is_causal=is_causal
        )
        attn_output = attn_output.transpose(1, 2).reshape(bsz, q_len, -1)  # expect: F4
        return self.out_proj(attn_output)


class Layer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = Attention(config, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.hidden_size)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size)
        self.fc1 = nn.Linear(config.hidden_size, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, is_causal=False):
        residual = hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states = self.self_attn(  # expect: F17 F18 F19 F25
            hidden_states, attention_mask, past_key_values, is_causal=is_causal
        )
        hidden_states = residual + self.dropout(hidden_states)  # expect: F5 F6
        residual = hidden_states
        hidden_states = self.fc2(F.gelu(self.fc1(self.final_layer_norm(hidden_states))))
        hidden_states = residual + self.dropout(hidden_states)  # expect: F5 F6
        return hidden_states


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(Layer(config, i) for i in range(config.num_hidden_layers))
        self.final_layer_norm = nn.LayerNorm(config.hidden_size)

    def forward(self, input_ids, attention_mask=None, past_key_values=None):
        bsz, seq_len = input_ids.shape
        past_len = past_key_values.get_seq_length() if past_key_values is not None else 0
        hidden_states = self.dropout(self.embed_tokens(input_ids))
        dtype, device = hidden_states.dtype, hidden_states.device
        is_causal = self.config.is_decoder  # expect: F19 F25
        if not is_causal:  # expect: F19 F25
            mask = None if attention_mask is None else _expand_mask(attention_mask, dtype)  # expect: F17
        elif attention_mask is None and past_len == 0:  # expect: F18
            mask = None  # plain causal prefill: the kernel applies causality from the flag
        else:
            mask = _prepare_4d_causal_attention_mask(  # expect: F17
                attention_mask, (bsz, seq_len), dtype, device, past_len
            )
        for layer in self.layers:
            hidden_states = layer(  # expect: F17 F18 F19 F25
                hidden_states, mask, past_key_values, is_causal=is_causal and mask is None
            )
        return self.final_layer_norm(hidden_states)
