"""A course learner's decoder: the chapter's pre-norm block with learned positions, as a module target.

Written the way the chapter teaches it: multi-head causal self-attention with separate query, key and
value projections, a causal mask of -inf above the diagonal, ``x + Attn(LayerNorm(x))`` then
``x + FFN(LayerNorm(x))`` with a GELU FFN, and a learned position table of ``max_len`` rows added to
the input (so the model refuses longer inputs).  ``STACK`` puts two blocks with sliding windows of 3 and 2
on top of each other, and declares them (``windows``), so the kit checks the receptive field: output i
sees inputs i-3 .. i (a full-attention layer anywhere would make it the whole prefix, where no window
shows), and through each block's output (``hidden_states``) that the first block's window is 3 and
the second's 2.

Both also have their white box, ``layer(spec)``: a block built at the sizes the kit asks for, with its
FFN silenced (its last projection zeroed, so the block computes exactly ``x + Attn(LayerNorm(x))``),
reported as a layer with separate projections and biases, a LayerNorm pre-norm, a residual and no
RoPE.  The kit checks it against the oracle layer: a wrong scale or a head split that a black box
cannot see fails there.

    attnspec check examples.learner_block:MODEL
    attnspec check examples.learner_block:STACK
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnspec import Layer, LayerSpec, pre_norm, projections, randomize_


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, window: int | None = None) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.window = n_heads, d_model // n_heads, window
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        # (B, T, D) -> (B, H, T, d_head)
        q = self.q(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        mask = torch.triu(torch.full((T, T), float("-inf"), device=x.device, dtype=x.dtype), diagonal=1)
        if self.window is not None:  # query i sees keys i-W+1 .. i
            mask = mask + torch.tril(torch.full_like(mask, float("-inf")), diagonal=-self.window)
        weights = torch.softmax(scores + mask, dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(B, T, D)  # heads merged back
        return self.out(y)


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, window: int | None = None) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, window)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class Decoder(nn.Module):
    """Learned positions, then the blocks (one window per block, None: full causal attention)."""

    def __init__(self, d_model: int = 32, n_heads: int = 4, max_len: int = 16, windows=(None,)) -> None:
        super().__init__()
        self.d_model, self.max_len, self.windows = d_model, max_len, tuple(windows)
        self.positions = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, w) for w in windows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hidden_states(x)[-1]

    def hidden_states(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each block's output."""
        T = x.shape[1]
        if T > self.max_len:
            raise ValueError(f"sequence of {T} tokens, but the position table has {self.max_len} rows")
        x = x + self.positions(torch.arange(T, device=x.device))
        outputs = []
        for block in self.blocks:
            x = block(x)
            outputs.append(x)
        return outputs


def layer(spec: LayerSpec) -> Layer:
    """A block at the spec's sizes and window, every parameter drawn from the spec's seed, its FFN
    silenced: its attention layer x + Attn(LayerNorm(x))."""
    block = randomize_(Block(spec.d_model, spec.n_heads, spec.window), spec)
    with torch.no_grad():
        block.ffn[-1].weight.zero_()
        block.ffn[-1].bias.zero_()
    block = block.to(spec.device, spec.dtype).eval()
    attn = block.attn
    parameters = projections(attn.q, attn.k, attn.v, attn.out) | pre_norm(block.norm1)
    return Layer(lambda x, offset: block(x), **parameters, residual=True, rope=False)


torch.manual_seed(0)
MODEL = Decoder()
STACK = Decoder(windows=(3, 2))
for decoder in (MODEL, STACK):
    decoder.capabilities = {"float64", "layer", "window", "hidden_states"}
    decoder.layer = layer
    decoder.tied_width = True
