"""Attention written the way three public styles write it: a fused-QKV decoder with a ring-buffer KV
cache module and a row-by-row sliding-window mask (litgpt), einops head splits with a pair-kept
cache (lucidrains' packages), and masks built by comparison functions (Keras' ops)."""

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn


class RingCache(nn.Module):
    def __init__(self, batch, groups, max_len, head_size, window=None):
        super().__init__()
        size = min(max_len, window) if window is not None else max_len  # expect: F8 F11
        self.register_buffer("k", torch.zeros(batch, groups, size, head_size), persistent=False)
        self.register_buffer("v", torch.zeros(batch, groups, size, head_size), persistent=False)
        self.window = window

    def forward(self, input_pos, k, v):
        slots = input_pos % self.k.size(2) if self.window is not None else input_pos  # expect: F8 F11
        keys = self.k.index_copy_(2, slots, k)
        values = self.v.index_copy_(2, slots, v)
        return keys, values  # expect: F13


def apply_rope(x, cos, sin):
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class FusedSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, n_query_groups, rotary_percentage=1.0, window=None):
        super().__init__()
        self.n_head, self.n_query_groups = n_head, n_query_groups
        self.head_size = n_embd // n_head
        self.rope_n_elem = int(rotary_percentage * self.head_size)  # expect: F26
        self.qkv = nn.Linear(n_embd, (n_head + 2 * n_query_groups) * self.head_size)
        self.proj = nn.Linear(n_head * self.head_size, n_embd)
        self.window, self.kv_cache = window, None

    def forward(self, x, cos, sin, mask=None, input_pos=None):
        B, T, _ = x.size()
        hs, nh, ng, rope_n_elem = self.head_size, self.n_head, self.n_query_groups, self.rope_n_elem
        q, k, v = self.qkv(x).split((nh * hs, ng * hs, ng * hs), dim=-1)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # expect: F4
        k = k.view(B, T, ng, hs).transpose(1, 2)  # expect: F4
        v = v.view(B, T, ng, hs).transpose(1, 2)  # expect: F4
        q_roped = apply_rope(q[..., :rope_n_elem], cos, sin)  # expect: F7 F26
        k_roped = apply_rope(k[..., :rope_n_elem], cos, sin)  # expect: F7 F26
        q = torch.cat((q_roped, q[..., rope_n_elem:]), dim=-1)  # expect: F26
        k = torch.cat((k_roped, k[..., rope_n_elem:]), dim=-1)  # expect: F26
        if input_pos is not None:
            k, v = self.kv_cache(input_pos, k, v)  # expect: F13
        if ng != nh:
            k = k.repeat_interleave(nh // ng, dim=1)  # expect: F15
            v = v.repeat_interleave(nh // ng, dim=1)  # expect: F15
        if self.window is not None and input_pos is None:
            mask = torch.full((T, T), float("-inf"), device=x.device)  # expect: F1
            for i in range(T):
                start = max(0, i - self.window + 1)  # expect: F16
                mask[i, start : i + 1] = 0.0  # expect: F2
        y = F.scaled_dot_product_attention(  # expect: F1 F3 F19 F25
            q, k, v, attn_mask=mask, scale=hs**-0.5, is_causal=mask is None
        )
        return self.proj(y.transpose(1, 2).reshape(B, T, nh * hs))  # expect: F4


class PreNormBlock(nn.Module):
    def __init__(self, attn, mlp, n_embd):
        super().__init__()
        self.norm_1, self.norm_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn, self.mlp = attn, mlp

    def forward(self, x, cos, sin, mask=None, input_pos=None):
        h = self.norm_1(x)  # expect: F6
        x = self.attn(h, cos, sin, mask, input_pos) + x  # expect: F5
        return self.mlp(self.norm_2(x)) + x  # expect: F5 F6


class EinopsLocalAttention(nn.Module):
    def __init__(self, dim, heads, dim_head=64, causal=True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.to_qkv = nn.Linear(dim, 3 * heads * dim_head, bias=False)
        self.to_out = nn.Linear(heads * dim_head, dim, bias=False)

    def forward(self, x, cache=None):
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.heads) for t in (q, k, v))  # expect: F4
        if cache is not None:
            ck, cv = cache  # expect: F13
            k, v = torch.cat((ck, k), dim=-2), torch.cat((cv, v), dim=-2)  # expect: F13
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * q.shape[-1] ** -0.5  # expect: F3
        if self.causal:  # expect: F25
            i, j = sim.shape[-2:]
            rows, cols = torch.arange(i, device=x.device), torch.arange(j, device=x.device)
            future = rows[:, None] + (j - i) < cols[None, :]  # expect: F2
            sim = sim.masked_fill(future, -torch.finfo(sim.dtype).max)  # expect: F1
        attn = sim.softmax(dim=-1)  # expect: F14
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.to_out(rearrange(out, "b h n d -> b n (h d)")), (k, v)  # expect: F4


def ops_causal_band_mask(ops, query_length, key_length, window=None):
    ones = ops.ones((1, query_length, key_length), dtype="int32")
    row_index = ops.cumsum(ones, axis=-2)
    col_index = ops.cumsum(ones, axis=-1)
    mask = ops.greater_equal(row_index, col_index)  # expect: F2
    if window is not None:
        mask = ops.logical_and(mask, ops.less(ops.abs(row_index - col_index), window))  # expect: F16
    return mask
