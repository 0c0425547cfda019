"""A correct small GPT-2-style decoder in the style of Hugging Face's GPT-2 code, as a module target.

Its projections are ``Conv1D`` layers, which store their weight (in, out) and compute ``addmm(bias,
x, weight)``; one fused ``c_attn`` gives q | k | v; the causal mask is a boolean lower triangle
registered as a buffer, sliced bottom-right for a query chunk that follows cached keys, and applied
with ``torch.where`` against ``finfo.min``; the scores are divided by a 0-d tensor sqrt(head size);
each block is ``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))`` (LayerNorm, a tanh-GELU MLP), and the
model adds a learned position table (``wpe``) to its input and ends with ``ln_f``.  Decoding passes
each layer's ``(key, value)`` of the past back in (``layer_past``) and returns the new pair
(``present``), so the positions of a chunk start at the past's length.

The kit checks it as a black box (causality, prefixes, batches, chunked decoding through the tuple
caches equal to the full pass, the position table's length) and, through ``layer(spec)``, its
white box: one block with its MLP silenced (its output projection zeroed) is
``x + attn(LayerNorm(x))``, reported with the Conv1D weights read (in, out)
(``attnspec.properties.layouts.fused_projections(..., in_out=True)``) and no RoPE.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Conv1D(nn.Module):
    """A linear layer whose weight is stored (in, out)."""

    def __init__(self, n_out: int, n_in: int) -> None:
        super().__init__()
        self.n_out = n_out
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return flat.view(*x.shape[:-1], self.n_out)


class Attention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, n_positions: int) -> None:
        super().__init__()
        self.n_embd, self.n_head, self.head_dim = n_embd, n_head, n_embd // n_head
        lower = torch.tril(torch.ones(n_positions, n_positions, dtype=torch.bool))
        self.register_buffer("bias", lower.view(1, 1, n_positions, n_positions), persistent=False)
        self.c_attn = Conv1D(3 * n_embd, n_embd)
        self.c_proj = Conv1D(n_embd, n_embd)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, nh, T, hs)
        return t.view(*t.shape[:-1], self.n_head, self.head_dim).permute(0, 2, 1, 3)

    def merge_heads(self, t: torch.Tensor) -> torch.Tensor:  # (B, nh, T, hs) -> (B, T, C)
        t = t.permute(0, 2, 1, 3).contiguous()
        return t.view(*t.shape[:-2], self.n_embd)

    def attend(self, query, key, value):
        weights = query @ key.transpose(-1, -2)
        weights = weights / torch.full(
            [], math.sqrt(value.shape[-1]), dtype=weights.dtype, device=weights.device
        )
        q_len, k_len = query.shape[-2], key.shape[-2]
        causal = self.bias[:, :, k_len - q_len : k_len, :k_len]
        floor = torch.full([], torch.finfo(weights.dtype).min, dtype=weights.dtype, device=weights.device)
        weights = torch.softmax(torch.where(causal, weights, floor), dim=-1)
        return weights @ value

    def forward(self, hidden, layer_past=None):
        query, key, value = self.c_attn(hidden).split(self.n_embd, dim=2)
        query, key, value = self.split_heads(query), self.split_heads(key), self.split_heads(value)
        if layer_past is not None:
            key = torch.cat((layer_past[0], key), dim=-2)
            value = torch.cat((layer_past[1], value), dim=-2)
        return self.c_proj(self.merge_heads(self.attend(query, key, value))), (key, value)


class MLP(nn.Module):
    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(4 * n_embd, n_embd), Conv1D(n_embd, 4 * n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, n_positions: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn, self.mlp = Attention(n_embd, n_head, n_positions), MLP(n_embd)

    def forward(self, hidden, layer_past=None):
        attended, present = self.attn(self.ln_1(hidden), layer_past)
        hidden = hidden + attended
        return hidden + self.mlp(self.ln_2(hidden)), present


class Model(nn.Module):
    """Learned positions, the blocks, a final LayerNorm; past_key_values: one (key, value) per block."""

    def __init__(self, n_embd: int = 32, n_head: int = 4, n_layer: int = 2, n_positions: int = 24) -> None:
        super().__init__()
        self.n_positions = n_positions
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, n_positions) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, inputs_embeds, past_key_values=None):
        past = 0 if past_key_values is None else past_key_values[0][0].shape[-2]
        seq = inputs_embeds.shape[1]
        if past + seq > self.n_positions:
            raise ValueError(f"{past + seq} positions, but wpe has {self.n_positions}")
        position_ids = torch.arange(past, past + seq, device=inputs_embeds.device)
        hidden = inputs_embeds + self.wpe(position_ids)
        presents = []
        for i, block in enumerate(self.h):
            hidden, present = block(hidden, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        return self.ln_f(hidden), tuple(presents)


class Decoder(nn.Module):
    """The model as the kit takes a module: x (B, T, D) -> (B, T, D), and decode(x, chunks)."""

    def __init__(self, model: Model) -> None:
        super().__init__()
        self.model = model
        self.max_len = model.n_positions

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[0]

    def decode(self, x: torch.Tensor, chunks: list[int]) -> torch.Tensor:
        outputs, past, start = [], None, 0
        for size in chunks:
            out, past = self.model(x[:, start : start + size], past_key_values=past)
            outputs.append(out)
            start += size
        return torch.cat(outputs, dim=1)


def layer(spec):
    from attnspec.properties.hypothesis_helpers import randomize_
    from attnspec.properties.layouts import fused_projections, pre_norm
    from attnspec.properties.targets import Layer

    block = randomize_(Block(spec.d_model, spec.n_heads, 32), spec.seed)
    with torch.no_grad():
        block.mlp.c_proj.weight.zero_()
        block.mlp.c_proj.bias.zero_()
    block = block.to(spec.device, spec.dtype).eval()
    parameters = fused_projections(block.attn.c_attn, block.attn.c_proj, spec, in_out=True)
    parameters |= pre_norm(block.ln_1)
    return Layer(lambda x, offset: block(x)[0], **parameters, residual=True, rope=False)


torch.manual_seed(0)
MODEL = Decoder(Model())
MODEL.capabilities = {"float64", "chunks", "layer"}
MODEL.windows = (None, None)
MODEL.layer = layer
MODEL.tied_width = True
