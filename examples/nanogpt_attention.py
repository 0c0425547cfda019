"""nanoGPT-style causal self-attention as a module target: one fused ``c_attn`` projection with biases
split into q | k | v, a lower-triangular ``bias`` buffer as the mask, attention and residual dropout
(off in eval mode), and ``c_proj``.  It adds no positions (a GPT adds them before the blocks), so the
kit also checks that each output ignores the order of the tokens before it.

A black box cannot see a wrong scale or a head split that mixes features the same way in every
head, so ``ATTENTION`` also has its white box: ``layer(spec)`` builds the module at the sizes the kit
asks for and reports its parameters (``c_attn`` split into q | k | v, its biases, ``c_proj``), and the
kit checks it against the oracle layer built from them.  The module's width is n_head * head size
(``tied_width``), and it has no RoPE (``rope=False``).

    attnspec check examples.nanogpt_attention:ATTENTION
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnspec import Layer, LayerSpec, fused_projections, randomize_


@dataclass
class GPTConfig:
    block_size: int = 32
    n_embd: int = 48
    n_head: int = 6
    dropout: float = 0.1
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd = config.n_head, config.n_embd
        size = config.block_size
        self.register_buffer("bias", torch.tril(torch.ones(size, size)).view(1, 1, size, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs
        return self.resid_dropout(self.c_proj(y))


def layer(spec: LayerSpec, build=CausalSelfAttention) -> Layer:
    """The module at the spec's sizes, every parameter drawn from the spec's seed, as a layer."""
    config = GPTConfig(n_embd=spec.d_model, n_head=spec.n_heads)
    module = randomize_(build(config), spec).to(spec.device, spec.dtype).eval()
    parameters = fused_projections(module.c_attn, module.c_proj, spec)
    return Layer(lambda x, offset: module(x), **parameters, rope=False)


torch.manual_seed(0)
ATTENTION = CausalSelfAttention(GPTConfig())
ATTENTION.capabilities = {"float64", "no_positions", "layer"}
ATTENTION.max_len = GPTConfig().block_size
ATTENTION.windows = (None,)
ATTENTION.layer = layer
ATTENTION.tied_width = True
# The same module with no declarations at all: the black-box properties that need none still run.
PLAIN = CausalSelfAttention(GPTConfig())
