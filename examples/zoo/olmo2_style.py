"""A correct OLMo-2-style decoder block in plain torch, as AllenAI's OLMo code writes it, a module target
with its white box.

One fused ``att_proj`` gives q | k | v (``fused_dims``: Hq * d, Hkv * d, Hkv * d), then q and k are each
RMS-normalised over their whole width, every head together, before they are split into heads
(``q_norm`` over Hq * d features, ``k_norm`` over Hkv * d): OLMo 2's q/k norm, which the layer declares
``qk_norm_over="width"``.  The norms come after the sublayers, not before (``norm_after``): x +
attn_norm(attn(x)), then x + ff_norm(ff(x)), with no norm on the way in.  RMSLayerNorm upcasts to float32
as OLMo's does (so no "float64"); RoPE with ``rotate_half`` at positions offset..; KV heads repeated with
``repeat_interleave`` for GQA; a SwiGLU MLP (``ff_proj`` gives the gate and the value, ``ff_out``).

``layer(spec)`` builds the block at the spec's sizes (its width the heads times their size) with ``ff_out``
zeroed, so that the MLP adds exactly 0, and reports the fused projection split into q, k and v, the q/k
gains of the whole width, and ``attn_norm`` as the sandwich norm (``post_norm``).

Its broken twin, ``QK_NORM_PER_HEAD``, is the block ported onto per-head q/k norm code (Qwen3's): q and k
are split into heads first and each head is normalised over its own d features, the OLMo 2 gain reshaped
(H, d) to fit.  It loads OLMo 2's weights without an error, every shape agrees, and it is causal, yet each
head is scaled by its own norm instead of all heads' together: the white box, reported as OLMo 2's, is
not what it computes.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class ModelConfig:
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    mlp_hidden_size: int = 128
    rope_theta: float = 500000.0  # OLMo 2's
    layer_norm_eps: float = 1e-6


class RMSLayerNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        og_dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(og_dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, theta: float) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)))

    def forward(self, q: torch.Tensor, k: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        seq = torch.arange(offset, offset + q.shape[-2], device=q.device, dtype=torch.float)
        freqs = torch.einsum("i , j -> i j", seq, self.inv_freq.to(q.device, torch.float))
        positions = torch.cat((freqs, freqs), dim=-1)
        sin, cos = positions.sin().to(q.dtype), positions.cos().to(q.dtype)
        return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class OLMoBlock(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        head_dim = config.d_model // config.n_heads
        self.fused_dims = (config.d_model, config.n_kv_heads * head_dim, config.n_kv_heads * head_dim)
        self.att_proj = nn.Linear(config.d_model, sum(self.fused_dims), bias=False)
        self.attn_out = nn.Linear(config.d_model, config.d_model, bias=False)
        self.q_norm = RMSLayerNorm(config.d_model, config.layer_norm_eps)
        self.k_norm = RMSLayerNorm(config.n_kv_heads * head_dim, config.layer_norm_eps)
        self.attn_norm = RMSLayerNorm(config.d_model, config.layer_norm_eps)
        self.ff_proj = nn.Linear(config.d_model, 2 * config.mlp_hidden_size, bias=False)
        self.ff_out = nn.Linear(config.mlp_hidden_size, config.d_model, bias=False)
        self.ff_norm = RMSLayerNorm(config.d_model, config.layer_norm_eps)
        self.rotary_emb = RotaryEmbedding(head_dim, config.rope_theta)

    def qk_norm(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, T, Hq * d) and k (B, T, Hkv * d) normalised over their whole width."""
        return self.q_norm(q), self.k_norm(k)

    def self_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
        B, T, C = q.size()
        n_heads, n_kv_heads = self.config.n_heads, self.config.n_kv_heads
        q = q.view(B, T, n_heads, C // n_heads).transpose(1, 2)
        k = k.view(B, T, n_kv_heads, C // n_heads).transpose(1, 2)
        v = v.view(B, T, n_kv_heads, C // n_heads).transpose(1, 2)
        q, k = self.rotary_emb(q, k, offset)
        if n_heads != n_kv_heads:
            k = k.repeat_interleave(n_heads // n_kv_heads, dim=1, output_size=n_heads)
            v = v.repeat_interleave(n_heads // n_kv_heads, dim=1, output_size=n_heads)
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.attn_out(att.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        q, k, v = self.att_proj(x).split(self.fused_dims, dim=-1)
        q, k = self.qk_norm(q, k)
        x = x + self.attn_norm(self.self_attention(q, k, v, offset))
        gate, value = self.ff_proj(x).chunk(2, dim=-1)
        return x + self.ff_norm(self.ff_out(nn.functional.silu(gate) * value))


class PerHeadQKNorm(OLMoBlock):
    """The twin: each head of q and k normalised over its own features, the gain of the whole width
    reshaped (H, d), as code written for per-head q/k norm does it."""

    def qk_norm(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.config.d_model // self.config.n_heads

        def per_head(t: torch.Tensor, norm: RMSLayerNorm) -> torch.Tensor:
            heads = t.view(*t.shape[:-1], -1, d).to(torch.float32)
            heads = heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + norm.eps)
            return (norm.weight.view(-1, d) * heads.to(t.dtype)).flatten(-2)

        return per_head(q, self.q_norm), per_head(k, self.k_norm)


def white_box(block: type[OLMoBlock]):
    """layer(spec) for a block class: the block at the spec's sizes, its MLP silenced."""

    def layer(spec):
        from attnspec import Layer, fused_projections, randomize_

        config = ModelConfig(spec.d_model, spec.n_heads, spec.n_kv_heads, mlp_hidden_size=8)
        config.rope_theta = spec.base
        module = randomize_(block(config), spec)
        with torch.no_grad():
            module.ff_out.weight.zero_()  # the MLP adds exactly 0: the block is x + attn_norm(attn(x))
        module = module.to(spec.device, spec.dtype).eval()
        return Layer(
            lambda x, offset: module(x, offset),
            **fused_projections(module.att_proj, module.attn_out, spec),
            q_norm=module.q_norm.weight,
            k_norm=module.k_norm.weight,
            qk_norm_over="width",
            post_norm=module.attn_norm.weight,
            eps=config.layer_norm_eps,
            residual=True,
        )

    return layer


def checked(block: type[OLMoBlock]) -> OLMoBlock:
    torch.manual_seed(0)
    module = block(ModelConfig())
    module.capabilities = {"layer", "offset", "gqa"}
    module.windows = (None,)
    module.layer = white_box(block)
    module.tied_width = True  # d = d_model / n_heads
    return module


BLOCK = checked(OLMoBlock)
QK_NORM_PER_HEAD = checked(PerHeadQKNorm)
