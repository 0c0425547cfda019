"""A correct bidirectional encoder in the style of timm's Vision Transformer blocks, as a module target.

Features (B, N, C) -> (B, N, C): pre-norm blocks ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))``
(LayerNorm, a GELU MLP) and a final LayerNorm.  The attention has one fused ``qkv`` projection, split
by ``reshape(B, N, 3, heads, head_dim).permute(2, 0, 3, 1, 4)``, q multiplied by ``head_dim ** -0.5``
before the product, and an optional additive key-padding mask (``finfo.min`` on the pads' columns);
every token sees every other, and the block adds no positions (a ViT adds them to the patch
embeddings before the first block).

It declares its mask as an encoder's (``mask_mod = bidirectional``), that it takes a padding mask and
that it adds no positions: the kit checks its outputs follow the tokens wherever they are put, that
every output depends on every token, batches, determinism and padded batches on either side, and skips
the causal properties, saying why.

Its broken twins ship bugs encoder code has: ``CAUSAL_LEFT_ON`` passes ``is_causal=True`` to torch's
scaled_dot_product_attention (a decoder's call copied into an encoder), ``PADS_ATTENDED`` builds the
padding mask and never adds it to the scores.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnspec import bidirectional


class SelfAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        if attn_mask is not None:
            attn = attn + attn_mask
        x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 2.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = SelfAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), attn_mask)
        return x + self.mlp(self.norm2(x))


class Encoder(nn.Module):
    """Blocks over a sequence of features; ``attention_mask`` (B, N): 1 for a real token, 0 for a pad."""

    def __init__(self, dim: int = 24, depth: int = 2, num_heads: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, num_heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def padding_bias(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        if attention_mask is None:
            return None
        pads = attention_mask[:, None, None, :] == 0  # (B, 1, 1, N): a pad's column, for every query
        return torch.zeros(pads.shape, dtype=x.dtype, device=x.device).masked_fill(
            pads, torch.finfo(x.dtype).min
        )

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        bias = self.padding_bias(x, attention_mask)
        for block in self.blocks:
            x = block(x, bias)
        return self.norm(x)


def declared(encoder: Encoder) -> Encoder:
    """What the encoder tells the kit: an all-visible mask, a padding mask, no positions of its own."""
    encoder.mask_mod = bidirectional
    encoder.capabilities = {"padding", "no_positions", "float64"}
    return encoder


torch.manual_seed(0)
ENCODER = declared(Encoder())


# --- broken twins -----------------------------------------------------------------------------------


class CausalSelfAttention(SelfAttention):
    """A decoder's fused call copied into the encoder: is_causal=True hides every later token."""

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if attn_mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch refuses a mask beside is_causal: the causal triangle is added to it
            causal = torch.ones(N, N, dtype=torch.bool, device=x.device).tril()
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask.masked_fill(~causal, float("-inf"))
            )
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


class PadsAttended(Encoder):
    """The padding bias is built, then the blocks are called without it."""

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        self.padding_bias(x, attention_mask)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def _causal_left_on() -> Encoder:
    torch.manual_seed(0)
    encoder = Encoder()
    for block in encoder.blocks:
        causal = CausalSelfAttention(24, 3)
        causal.load_state_dict(block.attn.state_dict())
        block.attn = causal
    return declared(encoder)


def _pads_attended() -> Encoder:
    torch.manual_seed(0)
    return declared(PadsAttended())


CAUSAL_LEFT_ON = _causal_left_on()
PADS_ATTENDED = _pads_attended()
