"""A correct GPT-J-style decoder block in plain torch, as GPT-J's own port writes it, a module target with
its white box.

GPT-J's rotary embedding rotates the pairs (x_2i, x_2i+1) (``rotate_every_two``, sines and cosines
duplicated pair by pair), and only the first ``rotary_dim`` features of each head (a quarter: 64 of 256
in GPT-J 6B), the rest passed as they are; its base is written into the code, 10000, with no setting to
change it.  So the block declares all three: ``conventions = {"rope-interleaved"}`` (its layer reporting
``rotary_dim``, which the kit's pairs stay within), ``rope_base = 10000.0`` (the kit never asks for
another base) and its head sizes, whose quarter is whole pairs.  The rest is GPT-J's block: one
LayerNorm feeding the attention and the MLP in parallel (x + attn(ln(x)) + mlp(ln(x))), q, k, v and
out_proj without biases, activations laid out (B, T, H, d) until after RoPE, a lower-triangular buffer
and ``finfo.min`` for the mask, the scores taken in float32 and divided by sqrt(d) as a tensor.

``layer(spec)`` builds the block at the spec's sizes (its width the heads times their size, the rotated
quarter of each head) with ``fc_out`` zeroed, so that the MLP adds exactly 0.

Its broken twin, ``HALF_SPLIT_PAIRS``, is the block with the rotary embedding of GPT-NeoX code (pairs (x_i,
x_i+r/2), ``rotate_half``) on the same quarter: GPT-J's weights load into it without an error and it stays
causal, but every query and key is rotated in the wrong pairs, so the attention sees other relative
angles than the ones GPT-J was trained with.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class GPTJConfig:
    n_embd: int = 64
    n_head: int = 4
    rotary_dim: int = 4  # a quarter of each head of 16
    n_positions: int = 256
    n_inner: int = 128
    layer_norm_epsilon: float = 1e-5


def fixed_pos_embedding(rotary_dim: int, seq_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """sin and cos (seq_len, rotary_dim / 2) of p * 10000^(-2i / rotary_dim)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, device=device).float() / rotary_dim))
    angles = torch.einsum("i , j -> i j", torch.arange(seq_len, device=device).float(), inv_freq)
    return torch.sin(angles), torch.cos(angles)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)."""
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def apply_rotary_pos_emb(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """x (B, T, H, r) rotated pair by pair; sin, cos (T, r/2), each angle used for both of its pair."""
    sin = sin.repeat_interleave(2, dim=-1)[None, :, None, :].to(x.dtype)
    cos = cos.repeat_interleave(2, dim=-1)[None, :, None, :].to(x.dtype)
    return (x * cos) + (rotate_every_two(x) * sin)


class GPTJAttention(nn.Module):
    def __init__(self, config: GPTJConfig) -> None:
        super().__init__()
        self.num_attention_heads = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.rotary_dim = config.rotary_dim
        causal = torch.tril(torch.ones(config.n_positions, config.n_positions, dtype=torch.bool))
        causal = causal.view(1, 1, config.n_positions, config.n_positions)
        self.register_buffer("bias", causal, persistent=False)
        self.register_buffer("scale_attn", torch.sqrt(torch.tensor(self.head_dim, dtype=torch.float32)))
        self.q_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.k_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.v_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.out_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def rotary(self, x: torch.Tensor, offset: int) -> torch.Tensor:
        """The first rotary_dim features of each head rotated at positions offset.., the rest as they are."""
        sin, cos = fixed_pos_embedding(self.rotary_dim, offset + x.shape[1], x.device)
        x_rot, x_pass = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        x_rot = apply_rotary_pos_emb(x_rot, sin[offset:], cos[offset:])
        return torch.cat([x_rot, x_pass], dim=-1)

    def forward(self, hidden_states: torch.Tensor, offset: int = 0) -> torch.Tensor:
        batch, seq, _ = hidden_states.shape
        split = (batch, seq, self.num_attention_heads, self.head_dim)
        query = self.q_proj(hidden_states).view(split)
        key = self.k_proj(hidden_states).view(split)
        value = self.v_proj(hidden_states).view(split).permute(0, 2, 1, 3)
        query = self.rotary(query, offset).permute(0, 2, 1, 3)
        key = self.rotary(key, offset).permute(0, 2, 1, 3)

        attn_weights = torch.matmul(query.to(torch.float32), key.to(torch.float32).transpose(-1, -2))
        causal_mask = self.bias[:, :, :seq, :seq]
        mask_value = torch.finfo(attn_weights.dtype).min
        attn_weights = torch.where(causal_mask, attn_weights, mask_value) / self.scale_attn
        attn_weights = nn.functional.softmax(attn_weights, dim=-1).to(value.dtype)
        out = torch.matmul(attn_weights, value).permute(0, 2, 1, 3).reshape(batch, seq, -1)
        return self.out_proj(out)


class GPTJBlock(nn.Module):
    attention_class = GPTJAttention

    def __init__(self, config: GPTJConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = self.attention_class(config)
        self.fc_in = nn.Linear(config.n_embd, config.n_inner)
        self.fc_out = nn.Linear(config.n_inner, config.n_embd)

    def forward(self, hidden_states: torch.Tensor, offset: int = 0) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output = self.attn(hidden_states, offset)
        feed_forward = self.fc_out(nn.functional.gelu(self.fc_in(hidden_states), approximate="tanh"))
        return attn_output + feed_forward + residual


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class NeoXRotaryAttention(GPTJAttention):
    """The twin's attention: GPT-NeoX's rotary (pairs i, i + r/2) on GPT-J's quarter."""

    def rotary(self, x: torch.Tensor, offset: int) -> torch.Tensor:
        sin, cos = fixed_pos_embedding(self.rotary_dim, offset + x.shape[1], x.device)
        sin = torch.cat((sin, sin), dim=-1)[None, offset:, None, :].to(x.dtype)
        cos = torch.cat((cos, cos), dim=-1)[None, offset:, None, :].to(x.dtype)
        x_rot, x_pass = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        return torch.cat([x_rot * cos + rotate_half(x_rot) * sin, x_pass], dim=-1)


class HalfSplitBlock(GPTJBlock):
    attention_class = NeoXRotaryAttention


def white_box(block: type[GPTJBlock]):
    """layer(spec) for a block class: the block at the spec's sizes, its MLP silenced."""

    def layer(spec):
        from attnspec import Layer, pre_norm, projections, randomize_

        config = GPTJConfig(spec.d_model, spec.n_heads, rotary_dim=spec.head_dim // 4, n_inner=8)
        module = randomize_(block(config), spec)
        with torch.no_grad():  # the MLP adds exactly 0: the block is x + attn(ln_1(x))
            module.fc_out.weight.zero_()
            module.fc_out.bias.zero_()
        module = module.to(spec.device, spec.dtype).eval()
        attn = module.attn
        return Layer(
            lambda x, offset: module(x, offset),
            **projections(attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj),
            **pre_norm(module.ln_1),
            residual=True,
            rotary_dim=config.rotary_dim,
        )

    return layer


def checked(block: type[GPTJBlock]) -> GPTJBlock:
    torch.manual_seed(0)
    module = block(GPTJConfig())
    module.capabilities = {"layer", "offset"}
    module.windows = (None,)
    module.layer = white_box(block)
    module.conventions = {"rope-interleaved"}  # pairs (x_2i, x_2i+1) within the rotated quarter
    module.rope_base = 10000.0  # fixed_pos_embedding's, whatever the layer
    module.tied_width = True  # d = n_embd / n_head
    module.head_dims = (16, 32)  # a quarter of each head is two or four pairs (one pair has no convention)
    return module


BLOCK = checked(GPTJBlock)
HALF_SPLIT_PAIRS = checked(HalfSplitBlock)
