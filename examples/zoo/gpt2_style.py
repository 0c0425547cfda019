"""A correct small GPT-2-style language model in the style of Hugging Face's GPT-2 code, as a model target.

Tokens (B, T) -> logits (B, T, V): a token table ``wte`` and a learned position table ``wpe``, blocks
``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))`` (LayerNorm, a tanh-GELU MLP), ``ln_f``, and an LM head
tied to ``wte``.  Its projections are ``Conv1D`` layers, which store their weight (in, out) and compute
``addmm(bias, x, weight)``; one fused ``c_attn`` gives q | k | v; the scores are divided by a 0-d
tensor sqrt(head size), and what a query may not see gets ``finfo.min`` through ``torch.where``.  As in
GPT-3, layers alternate banded and dense attention: ``attn_windows`` gives each layer's sliding window
(query i sees keys i-W+1 .. i; the first layer's is 4, the second attends to the whole prefix), and a
windowed layer's cache keeps only the W - 1 keys the next query still sees, trimmed after the chunk
has been attended.

It takes a padding mask (``attention_mask``, 1 for a real token, 0 for a pad, on either side): pads
are never attended to, and, as ``generate`` does, a batch's position ids count real tokens only
(``cumsum(mask) - 1``), so a left-padded sequence starts at position 0.  Decoding keeps a ``Cache``
(per layer the keys, the values and their indices in the sequence) and the mask so far.

The kit checks it as a black box (causality, prefixes, batches, each layer's window through its
hidden states, the position table's length, chunked decoding, padding on both sides, a left-padded
batch decoded in chunks) and, through ``layer(spec)``, its white box: one block with its MLP silenced
(its output projection zeroed) is ``x + attn(LayerNorm(x))``, reported with the Conv1D weights read
(in, out) (``attnspec.protocol.layouts.fused_projections(..., in_out=True)``) and no RoPE.

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


class Cache:
    """What decoding keeps: per layer the keys and values (B, nh, S, hs) and the sequence index of each
    (S,), and how many tokens the sequence has seen."""

    def __init__(self, n_layer: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layer
        self.values: list[torch.Tensor | None] = [None] * n_layer
        self.index: list[torch.Tensor | None] = [None] * n_layer
        self.seen = 0


class Attention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, window: int | None = None) -> None:
        super().__init__()
        self.n_embd, self.n_head, self.head_dim, self.window = n_embd, n_head, n_embd // n_head, window
        self.c_attn = Conv1D(3 * n_embd, n_embd)
        self.c_proj = Conv1D(n_embd, n_embd)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, nh, T, hs)
        return t.view(*t.shape[:-1], self.n_head, self.head_dim).permute(0, 2, 1, 3)

    def merge_heads(self, t: torch.Tensor) -> torch.Tensor:  # (B, nh, T, hs) -> (B, T, C)
        t = t.permute(0, 2, 1, 3).contiguous()
        return t.view(*t.shape[:-2], self.n_embd)

    def attend(self, query, key, value, allowed):
        weights = query @ key.transpose(-1, -2)
        weights = weights / torch.full(
            [], math.sqrt(value.shape[-1]), dtype=weights.dtype, device=weights.device
        )
        floor = torch.full([], torch.finfo(weights.dtype).min, dtype=weights.dtype, device=weights.device)
        weights = torch.softmax(torch.where(allowed, weights, floor), dim=-1)
        return weights @ value

    def forward(self, hidden, padding=None, cache: Cache | None = None, layer_idx: int = 0):
        """``padding`` (B, seen + T): 1 for the real tokens of the whole sequence so far, or None."""
        query, key, value = self.c_attn(hidden).split(self.n_embd, dim=2)
        query, key, value = self.split_heads(query), self.split_heads(key), self.split_heads(value)
        seen = 0 if cache is None else cache.seen
        query_index = torch.arange(seen, seen + hidden.shape[1], device=hidden.device)
        key_index = query_index
        if cache is not None and cache.keys[layer_idx] is not None:
            key = torch.cat((cache.keys[layer_idx], key), dim=-2)
            value = torch.cat((cache.values[layer_idx], value), dim=-2)
            key_index = torch.cat((cache.index[layer_idx], query_index))
        allowed = key_index[None, :] <= query_index[:, None]
        if self.window is not None:
            allowed = allowed & (key_index[None, :] > query_index[:, None] - self.window)
        allowed = allowed[None, None]  # (1, 1, T, S)
        if padding is not None:
            allowed = allowed & padding[:, key_index].bool()[:, None, None, :]
        out = self.c_proj(self.merge_heads(self.attend(query, key, value, allowed)))
        if cache is not None:  # a windowed layer keeps the W - 1 keys the next query still sees
            kept = key.shape[-2] if self.window is None else min(key.shape[-2], self.window - 1)
            first = key.shape[-2] - kept
            cache.keys[layer_idx], cache.values[layer_idx] = key[..., first:, :], value[..., first:, :]
            cache.index[layer_idx] = key_index[first:]
        return out


class MLP(nn.Module):
    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(4 * n_embd, n_embd), Conv1D(n_embd, 4 * n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, window: int | None = None) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn, self.mlp = Attention(n_embd, n_head, window), MLP(n_embd)

    def forward(self, hidden, padding=None, cache=None, layer_idx=0):
        hidden = hidden + self.attn(self.ln_1(hidden), padding, cache, layer_idx)
        return hidden + self.mlp(self.ln_2(hidden))


class GPT2LMHeadModel(nn.Module):
    def __init__(
        self,
        vocab_size: int = 61,
        n_embd: int = 32,
        n_head: int = 4,
        n_positions: int = 24,
        attn_windows: tuple[int | None, ...] = (4, None),
    ) -> None:
        super().__init__()
        self.vocab_size, self.n_positions, self.attn_windows = vocab_size, n_positions, attn_windows
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, window) for window in attn_windows)
        self.ln_f = nn.LayerNorm(n_embd)

    def hidden(self, input_ids, attention_mask=None, position_ids=None, cache=None):
        """Each block's output (B, T, C), the last one after ln_f too."""
        seen = 0 if cache is None else cache.seen
        if seen + input_ids.shape[1] > self.n_positions:
            raise ValueError(f"{seen + input_ids.shape[1]} positions, but wpe has {self.n_positions}")
        if position_ids is None:
            position_ids = torch.arange(seen, seen + input_ids.shape[1], device=input_ids.device)[None]
        hidden = self.wte(input_ids) + self.wpe(position_ids)
        outputs = []
        for i, block in enumerate(self.h):
            hidden = block(hidden, attention_mask, cache, i)
            outputs.append(hidden)
        if cache is not None:
            cache.seen += input_ids.shape[1]
        return outputs

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None):
        """Logits (B, T, V); ``attention_mask`` (B, seen + T) covers the cached tokens too."""
        return self.ln_f(self.hidden(input_ids, attention_mask, position_ids, cache)[-1]) @ self.wte.weight.T


def position_ids_from(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count real tokens only, as generate makes them (0 at the pads)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


class LanguageModel(nn.Module):
    """The model as the kit takes a model target: tokens -> logits, decode(tokens, chunks) and each
    layer's output, with an optional padding mask."""

    def __init__(self, model: GPT2LMHeadModel) -> None:
        super().__init__()
        self.model = model
        self.vocab_size, self.max_len, self.windows = model.vocab_size, model.n_positions, model.attn_windows

    def forward(self, tokens, attention_mask=None):
        position_ids = None if attention_mask is None else position_ids_from(attention_mask)
        return self.model(tokens, attention_mask, position_ids)

    def hidden_states(self, tokens):
        return self.model.hidden(tokens)

    def decode(self, tokens, chunks, attention_mask=None):
        cache, outputs, start = Cache(len(self.model.h)), [], 0
        for size in chunks:
            end = start + size
            mask = None if attention_mask is None else attention_mask[:, :end]
            position_ids = None if mask is None else position_ids_from(mask)[:, start:end]
            outputs.append(self.model(tokens[:, start:end], mask, position_ids, cache))
            start = end
        return torch.cat(outputs, dim=1)


def layer(spec):
    from attnspec import Layer, fused_projections, pre_norm, randomize_

    block = randomize_(Block(spec.d_model, spec.n_heads, spec.window), spec)
    with torch.no_grad():
        block.mlp.c_proj.weight.zero_()
        block.mlp.c_proj.bias.zero_()
    block = block.to(spec.device, spec.dtype).eval()
    parameters = fused_projections(block.attn.c_attn, block.attn.c_proj, spec, in_out=True)
    parameters |= pre_norm(block.ln_1)
    return Layer(lambda x, offset: block(x), **parameters, residual=True, rope=False)


torch.manual_seed(0)
MODEL = LanguageModel(GPT2LMHeadModel())
MODEL.capabilities = {"float64", "chunks", "padding", "hidden_states", "layer", "window"}
MODEL.layer = layer
MODEL.tied_width = True
