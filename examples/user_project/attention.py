"""Causal self-attention for a small GPT-style model.

Grouped-query heads (n_kv_head key/value heads shared by n_head query heads), rotary position
embeddings in the rotate-half layout, an optional sliding window, and a key/value cache so that
text can be generated one chunk at a time.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Config:
    n_embd: int = 64
    n_head: int = 4
    n_kv_head: int = 2
    window: int | None = None  # each token sees itself and the window - 1 tokens before it
    dropout: float = 0.0
    rope_base: float = 10000.0


def attention(q, k, v, causal=True, window=None, scale=None, padding_mask=None):
    """softmax(q k^T * scale) v for q (B, H, Tq, D) and k, v (B, H, Tk, D).

    The Tq queries are the last Tq of the Tk positions (Tq < Tk when earlier keys come from a cache).
    padding_mask (B, Tk) is True for real tokens and False for padding, which no query attends to.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1))
    att = (q @ k.transpose(-2, -1)) * scale
    tq, tk = q.size(-2), k.size(-2)
    query_pos = torch.arange(tk - tq, tk, device=q.device)[:, None]
    key_pos = torch.arange(tk, device=q.device)[None, :]
    allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed & (key_pos <= query_pos)
    if window is not None:
        allowed = allowed & (key_pos > query_pos - window)
    if padding_mask is not None:
        allowed = allowed & padding_mask[:, None, None, :]
    att = att.masked_fill(~allowed, torch.finfo(att.dtype).min)
    att = F.softmax(att, dim=-1)
    return att @ v


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class KVCache:
    """The keys and values of every position seen so far (B, n_kv_head, T, head_dim)."""

    def __init__(self):
        self.k = None
        self.v = None

    @property
    def length(self):
        return 0 if self.k is None else self.k.size(2)

    def update(self, k, v):
        if self.k is not None:
            k = torch.cat([self.k, k], dim=2)
            v = torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        return k, v


class CausalSelfAttention(nn.Module):
    """x (B, T, n_embd) -> (B, T, n_embd).  With a cache, x holds the T tokens after the cached ones,
    and padding_mask (B, cached + T) covers them all."""

    def __init__(self, config):
        super().__init__()
        if config.n_embd % config.n_head != 0:
            raise ValueError("n_embd must be divisible by n_head")
        if config.n_head % config.n_kv_head != 0:
            raise ValueError("n_head must be a multiple of n_kv_head")
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head
        self.head_dim = config.n_embd // config.n_head
        if self.head_dim % 2 != 0:
            raise ValueError("rotary embeddings need an even head_dim")
        self.window = config.window
        self.dropout = config.dropout
        self.kv_dim = self.n_kv_head * self.head_dim
        self.qkv = nn.Linear(config.n_embd, config.n_embd + 2 * self.kv_dim, bias=False)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        inv_freq = 1.0 / config.rope_base ** (torch.arange(0, self.head_dim, 2) / self.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, padding_mask=None, cache=None):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split([C, self.kv_dim, self.kv_dim], dim=2)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)

        offset = 0 if cache is None else cache.length
        positions = torch.arange(T, device=x.device) + offset
        freqs = torch.outer(positions.to(self.inv_freq.dtype), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        q, k = apply_rotary(q, k, emb.cos(), emb.sin())
        if cache is not None:
            k, v = cache.update(k, v)

        n_rep = self.n_head // self.n_kv_head
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
        y = attention(q, k, v, causal=True, window=self.window, padding_mask=padding_mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.proj(y), p=self.dropout, training=self.training)


class Block(nn.Module):
    """A pre-norm residual block around the attention (the MLP is left out)."""

    def __init__(self, config):
        super().__init__()
        self.norm = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)

    def forward(self, x, padding_mask=None, cache=None):
        return x + self.attn(self.norm(x), padding_mask=padding_mask, cache=cache)
