"""Attention written the way a scaled_dot_product_attention wrapper module writes it."""

import torch
import torch.nn.functional as F
from torch import nn


class SdpaAttention(nn.Module):
    def __init__(
        self, hidden_size, num_heads, num_kv_heads, dropout=0.0, sliding_window=None, is_causal=True
    ):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = hidden_size // num_heads
        self.n_rep = num_heads // num_kv_heads
        self.scale = self.head_dim**-0.5  # expect: F3
        self.dropout = dropout
        self.sliding_window = sliding_window
        self.is_causal = is_causal  # expect: F19 F25
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def _causal_mask(self, seq_len, attention_mask, device):
        i = torch.arange(seq_len, device=device)[:, None]
        j = torch.arange(seq_len, device=device)[None, :]
        causal = j <= i  # expect: F2
        if self.sliding_window is not None:
            causal = causal & ((i - j) < self.sliding_window)  # expect: F16
        allowed = causal[None, None, :, :]
        if attention_mask is not None:
            allowed = causal & attention_mask[:, None, None, :].bool()  # expect: F17
        # a left-padded query row has no allowed key; let it attend everywhere instead of producing NaN
        return allowed | ~allowed.any(dim=-1, keepdim=True)

    def forward(self, hidden_states, attention_mask=None):
        bsz, seq_len, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(bsz, seq_len, -1, self.head_dim).transpose(1, 2)  # expect: F4
        k = self.k_proj(hidden_states).view(bsz, seq_len, -1, self.head_dim).transpose(1, 2)  # expect: F4
        v = self.v_proj(hidden_states).view(bsz, seq_len, -1, self.head_dim).transpose(1, 2)  # expect: F4
        k = k.repeat_interleave(self.n_rep, dim=1)  # expect: F15
        v = v.repeat_interleave(self.n_rep, dim=1)  # expect: F15
        dropout_p = self.dropout if self.training else 0.0  # expect: F21

        if not self.is_causal:  # expect: F19 F25
            # encoder path: every token sees every non-padding token
            key_padding = None
            if attention_mask is not None:
                key_padding = attention_mask[:, None, None, :].bool()  # expect: F17
            out = F.scaled_dot_product_attention(  # expect: F1 F3 F17 F21 F25
                q, k, v, attn_mask=key_padding, dropout_p=dropout_p, is_causal=False, scale=self.scale
            )
        elif attention_mask is None and self.sliding_window is None:  # expect: F8 F17
            out = F.scaled_dot_product_attention(  # expect: F1 F3 F19 F21
                q, k, v, dropout_p=dropout_p, is_causal=True, scale=self.scale
            )
        else:
            allowed = self._causal_mask(seq_len, attention_mask, hidden_states.device)  # expect: F17
            out = F.scaled_dot_product_attention(  # expect: F1 F3 F17 F21
                q, k, v, attn_mask=allowed, dropout_p=dropout_p, scale=self.scale
            )
        out = out.transpose(1, 2).reshape(bsz, seq_len, -1)  # expect: F4
        return self.o_proj(out)


class EncoderLayer(nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads, dropout=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size)
        self.self_attn = SdpaAttention(  # expect: F25
            hidden_size, num_heads, num_kv_heads, dropout, is_causal=False
        )

    def forward(self, hidden_states, attention_mask=None):
        return hidden_states + self.self_attn(self.norm(hidden_states), attention_mask)  # expect: F5 F6 F17


class DecoderLayer(nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads, sliding_window=None, dropout=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size)
        self.self_attn = SdpaAttention(  # expect: F1 F8 F19
            hidden_size, num_heads, num_kv_heads, dropout, sliding_window=sliding_window, is_causal=True
        )

    def forward(self, hidden_states, attention_mask=None):
        return hidden_states + self.self_attn(self.norm(hidden_states), attention_mask)  # expect: F5 F6 F17
