"""A correct causal self-attention module in the style of Hugging Face's GPT-NeoX attention, as a module
target that decodes in chunks.

One fused ``query_key_value`` projection whose output is laid out per head (each head's q | k | v side
by side, not all q then all k), rotary embeddings on the whole head with ``rotate_half`` pairs at
positions that continue after what is cached, a cache handed in as ``layer_past=(key, value)`` and
handed back as ``present`` when ``use_cache`` is set, a lower-triangular mask shifted by the cache's
length, and ``**kwargs`` in ``forward`` that takes (and ignores) whatever else a caller passes.

``ATTENTION`` wraps it as a user does to check it: the module returns ``(output, present)``, so the
wrapper's ``forward`` keeps the output, and its ``decode(x, chunks)`` runs the chunks one after the
other with the cache.  Its broken twin, ``KWARGS_SWALLOW_THE_CACHE``, hands the cache over as
``past_key_value=``, Llama's name: NeoX's ``forward`` does not name it, its ``**kwargs`` takes it without
an error, and every chunk is attended as if it were the whole sequence.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import torch
from torch import nn


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class NeoXAttention(nn.Module):
    def __init__(self, hidden_size: int = 32, num_attention_heads: int = 4, rotary_base: float = 10000.0):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.head_size = hidden_size // num_attention_heads
        self.query_key_value = nn.Linear(hidden_size, 3 * hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)
        exponents = torch.arange(0, self.head_size, 2, dtype=torch.float64) / self.head_size
        self.register_buffer("inv_freq", 1.0 / rotary_base**exponents, persistent=False)

    def forward(self, hidden_states, layer_past=None, use_cache=False, **kwargs):
        batch, seq, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states)
        qkv = qkv.view(batch, seq, self.num_attention_heads, 3 * self.head_size).permute(0, 2, 1, 3)
        query, key, value = qkv.split(self.head_size, dim=-1)

        past_length = 0 if layer_past is None else layer_past[0].shape[-2]
        positions = torch.arange(past_length, past_length + seq, device=hidden_states.device)
        freqs = positions[:, None].to(self.inv_freq.dtype) * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(query.dtype), emb.sin().to(query.dtype)
        query = query * cos + rotate_half(query) * sin
        key = key * cos + rotate_half(key) * sin

        if layer_past is not None:
            key = torch.cat((layer_past[0], key), dim=-2)
            value = torch.cat((layer_past[1], value), dim=-2)
        present = (key, value) if use_cache else None

        total = key.shape[-2]
        causal = torch.ones(seq, total, dtype=torch.bool, device=hidden_states.device).tril(total - seq)
        scores = torch.matmul(query, key.transpose(-1, -2)) / self.head_size**0.5
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, value).permute(0, 2, 1, 3).reshape(batch, seq, -1)
        return self.dense(out), present


class Checked(nn.Module):
    """What a user wraps the module in to check it: its output alone, and decoding with its cache."""

    cache_keyword = "layer_past"

    def __init__(self) -> None:
        super().__init__()
        self.attention = NeoXAttention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x)[0]

    def decode(self, x: torch.Tensor, chunks: list[int]) -> torch.Tensor:
        outputs, cache = [], None
        for chunk in x.split(chunks, dim=1):
            out, cache = self.attention(chunk, use_cache=True, **{self.cache_keyword: cache})
            outputs.append(out)
        return torch.cat(outputs, dim=1)


class CacheUnderLlamasName(Checked):
    cache_keyword = "past_key_value"  # NeoX's forward does not name it: its **kwargs swallows it


torch.manual_seed(0)
ATTENTION = Checked()
ATTENTION.capabilities = {"float64", "chunks"}
torch.manual_seed(0)
KWARGS_SWALLOW_THE_CACHE = CacheUnderLlamasName()
KWARGS_SWALLOW_THE_CACHE.capabilities = {"float64", "chunks"}
