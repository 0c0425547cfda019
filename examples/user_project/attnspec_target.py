"""What attnspec needs to check this project's attention: two targets, written once.

    attnspec check attnspec_target:ATTENTION   # the attention function, and the layer's white box
    attnspec check attnspec_target:BLOCK       # the block as a module: padding and the cache

They are also what `attnspec mutate --impl` takes, to hand over a test for each fault the project's own
tests let survive.
"""

import torch
from attention import Block, Config, KVCache, attention

from attnspec import Layer, fused_projections, pre_norm, randomize_


def build(spec, dropout=0.0):
    config = Config(
        n_embd=spec.d_model,
        n_head=spec.n_heads,
        n_kv_head=spec.n_kv_heads,
        window=spec.window,
        rope_base=spec.base,
        dropout=dropout,
    )
    return randomize_(Block(config), spec).to(spec.device, spec.dtype).eval()


def decode(block, x, chunks, padding_mask=None):
    cache, outputs, start = KVCache(), [], 0
    for size in chunks:
        seen = None if padding_mask is None else padding_mask[:, : start + size]
        outputs.append(block(x[:, start : start + size], padding_mask=seen, cache=cache))
        start += size
    return torch.cat(outputs, dim=1)


def layer(spec):
    block = build(spec, dropout=0.1)  # as trained: eval mode must switch the dropout off
    return Layer(
        lambda x, offset: block(x),
        **fused_projections(block.attn.qkv, block.attn.proj, spec),
        **pre_norm(block.norm),
        residual=True,
        decode=lambda x, chunks: decode(block, x, chunks),
    )


class Attention:
    capabilities = {"window", "decode", "non_causal", "scale", "grad", "layer", "cache", "gqa", "sizes"}
    tied_width = True

    def attention(self, q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
        groups = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        return attention(q, k, v, causal=causal, window=window, scale=scale)

    def layer(self, spec):
        return layer(spec)


class PaddedBlock(torch.nn.Module):
    """The block with the kit's padding convention: attention_mask (B, T), 1 for a real token."""

    capabilities = {"padding", "chunks", "float64"}

    def __init__(self):
        super().__init__()
        self.block = Block(Config(n_embd=32, n_head=4, n_kv_head=2))
        self.d_model = 32

    def forward(self, x, attention_mask=None):
        mask = None if attention_mask is None else attention_mask.bool()
        return self.block(x, padding_mask=mask)

    def decode(self, x, chunks, attention_mask=None):
        mask = None if attention_mask is None else attention_mask.bool()
        return decode(self.block, x, chunks, mask)


ATTENTION = Attention()
BLOCK = PaddedBlock()
