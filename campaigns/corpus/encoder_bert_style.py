"""Attention written the way the BERT modeling file writes it: bidirectional, post-norm, cross-attention."""

import math

import torch
from torch import nn


def get_extended_attention_mask(attention_mask, dtype):
    # (batch, seq_len) 0/1 -> additive (batch, 1, 1, seq_len), broadcast over heads and queries
    extended_attention_mask = attention_mask[:, None, None, :].to(dtype=dtype)
    return (1.0 - extended_attention_mask) * torch.finfo(dtype).min  # expect: F1 F17


class BertSelfAttention(nn.Module):
    def __init__(self, config, is_cross_attention=False):
        super().__init__()
        if config.hidden_size % config.num_attention_heads != 0:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        kv_size = config.encoder_hidden_size if is_cross_attention else config.hidden_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(kv_size, self.all_head_size)
        self.value = nn.Linear(kv_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)  # expect: F4

    def forward(
        self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None
    ):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        if encoder_hidden_states is not None:
            # cross-attention: keys and values come from the encoder, so does the padding mask
            key_layer = self.transpose_for_scores(self.key(encoder_hidden_states))
            value_layer = self.transpose_for_scores(self.value(encoder_hidden_states))
            attention_mask = encoder_attention_mask  # expect: F17
        else:
            key_layer = self.transpose_for_scores(self.key(hidden_states))
            value_layer = self.transpose_for_scores(self.value(hidden_states))

        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)  # expect: F3
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask  # expect: F1 F17
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)  # expect: F14
        attention_probs = self.dropout(attention_probs)

        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()  # expect: F4
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class BertAttention(nn.Module):
    def __init__(self, config, is_cross_attention=False):
        super().__init__()
        self.self = BertSelfAttention(config, is_cross_attention=is_cross_attention)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None
    ):
        self_outputs = self.self(  # expect: F17
            hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask
        )
        projected = self.dropout(self.dense(self_outputs))
        # post-norm, as in the original Transformer: normalise after adding the residual
        return self.LayerNorm(projected + hidden_states)  # expect: F5


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertAttention(config)
        self.add_cross_attention = config.add_cross_attention
        if self.add_cross_attention:
            self.crossattention = BertAttention(config, is_cross_attention=True)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None
    ):
        attention_output = self.attention(hidden_states, attention_mask)  # expect: F17
        if self.add_cross_attention and encoder_hidden_states is not None:
            attention_output = self.crossattention(  # expect: F17
                attention_output, None, encoder_hidden_states, encoder_attention_mask
            )
        intermediate_output = nn.functional.gelu(self.intermediate(attention_output))
        layer_output = self.output_dropout(self.output(intermediate_output))
        return self.output_LayerNorm(layer_output + attention_output)  # expect: F5
