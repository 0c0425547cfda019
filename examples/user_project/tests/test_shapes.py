"""Smoke tests: everything runs, and comes out with the right shapes and dtypes and no NaN."""

import torch
from attention import Block, CausalSelfAttention, Config, KVCache, attention


def test_attention_output_shape():
    q, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16)
    out = attention(q, k, v)
    assert out.shape == (2, 4, 8, 16)
    assert not out.isnan().any()


def test_layer_output_shape_and_dtype():
    layer = CausalSelfAttention(Config())
    out = layer(torch.randn(3, 10, 64))
    assert out.shape == (3, 10, 64)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_sliding_window_runs():
    layer = CausalSelfAttention(Config(window=4))
    out = layer(torch.randn(2, 12, 64))
    assert out.shape == (2, 12, 64)
    assert not out.isnan().any()


def test_padded_batch_runs():
    layer = CausalSelfAttention(Config())
    padding_mask = torch.ones(2, 10, dtype=torch.bool)
    padding_mask[1, :3] = False
    out = layer(torch.randn(2, 10, 64), padding_mask=padding_mask)
    assert out.shape == (2, 10, 64)
    assert not out.isnan().any()


def test_generation_with_a_cache():
    layer = CausalSelfAttention(Config()).eval()
    cache = KVCache()
    out = layer(torch.randn(1, 5, 64), cache=cache)
    assert out.shape == (1, 5, 64)
    for step in range(3):
        out = layer(torch.randn(1, 1, 64), cache=cache)
        assert out.shape == (1, 1, 64)
        assert cache.length == 6 + step


def test_block_keeps_the_shape():
    block = Block(Config(n_embd=32, n_head=8, n_kv_head=2))
    x = torch.randn(2, 7, 32)
    assert block(x).shape == x.shape
