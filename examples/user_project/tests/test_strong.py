"""Tests of attention.py against the formulas.

The reference below computes every output row by itself in float64: the keys a query may see are
listed one by one (causal, window, padding), the softmax is written out, RoPE rotates each pair of
features (i, i + D/2) of a vector at position t by the angle t * base^(-2i/D), and query head h
reads key/value head h // (n_head / n_kv_head).
"""

import math

import pytest
import torch
from attention import Block, CausalSelfAttention, Config, KVCache, attention


@pytest.fixture(autouse=True)
def float64():
    """Every tensor and parameter of these tests in float64, so that 1e-9 tolerances hold."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


# --- the reference ------------------------------------------------------------------------------


def visible_keys(query_pos, n_keys, causal, window, real):
    """The key positions a query at query_pos may attend to (real[j]: key j is not padding)."""
    return [
        j
        for j in range(n_keys)
        if (not causal or j <= query_pos) and (window is None or query_pos - j < window) and real[j]
    ]


def reference_attention(q, k, v, causal=True, window=None, scale=None, padding_mask=None):
    """Row by row; a row with no visible key is NaN (the tests never compare such rows)."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    scale = 1 / math.sqrt(D) if scale is None else scale
    out = torch.full((B, H, Tq, v.shape[-1]), math.nan)
    for b in range(B):
        real = [True] * Tk if padding_mask is None else padding_mask[b].tolist()
        for i in range(Tq):
            keys = visible_keys(Tk - Tq + i, Tk, causal, window, real)
            if not keys:
                continue
            for h in range(H):
                scores = torch.stack([q[b, h, i].dot(k[b, h, j]) * scale for j in keys])
                weights = torch.exp(scores - scores.max())
                weights = weights / weights.sum()
                out[b, h, i] = sum(w * v[b, h, j] for w, j in zip(weights, keys, strict=True))
    return out


def rotate(x, base):
    """RoPE on x (T, D), the vector at row t standing at position t."""
    T, D = x.shape
    half = D // 2
    out = torch.empty_like(x)
    for t in range(T):
        for i in range(half):
            angle = t * base ** (-2 * i / D)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[t, i], x[t, i + half]
            out[t, i] = a * c - b * s
            out[t, i + half] = b * c + a * s
    return out


def reference_layer(layer, config, x, padding_mask=None):
    """CausalSelfAttention's output from its weights, one head at a time."""
    B, T, C = x.shape
    H, Hkv = config.n_head, config.n_kv_head
    D = C // H
    w = layer.qkv.weight.detach()
    wq, wk, wv = w[:C], w[C : C + Hkv * D], w[C + Hkv * D :]
    out = torch.zeros(B, T, C)
    for b in range(B):
        mask = None if padding_mask is None else padding_mask[b : b + 1]
        for h in range(H):
            g = h // (H // Hkv)  # the key/value head query head h reads
            q = rotate(x[b] @ wq[h * D : (h + 1) * D].T, config.rope_base)
            k = rotate(x[b] @ wk[g * D : (g + 1) * D].T, config.rope_base)
            v = x[b] @ wv[g * D : (g + 1) * D].T
            o = reference_attention(
                q[None, None], k[None, None], v[None, None], True, config.window, None, mask
            )
            out[b, :, h * D : (h + 1) * D] = o[0, 0]
    return out @ layer.proj.weight.detach().T


def assert_rows_close(actual, expected, rows=None):
    """actual == expected on the rows (B, T) marked True (all rows when rows is None)."""
    if rows is not None:
        actual, expected = actual[rows], expected[rows]
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-9)


def left_padded(B, T, pads):
    """(B, T) padding mask: sequence b starts with pads[b] padding tokens."""
    return torch.arange(T)[None, :] >= torch.tensor(pads)[:, None]


def layer_and_input(config, B=2, T=7, seed=0):
    torch.manual_seed(seed)
    layer = CausalSelfAttention(config).eval()
    return layer, torch.randn(B, T, config.n_embd)


# --- the functional attention --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("causal", "window", "scale"),
    [(True, None, None), (True, 3, None), (False, 3, 0.7), (False, None, 2.0)],
)
def test_attention_matches_the_reference(causal, window, scale):
    torch.manual_seed(1)
    q = torch.randn(2, 3, 4, 8)  # the 4 queries are the last 4 of 6 positions
    k, v = torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    expected = reference_attention(q, k, v, causal, window, scale)
    assert_rows_close(attention(q, k, v, causal=causal, window=window, scale=scale), expected)


def test_attention_ignores_padding():
    torch.manual_seed(2)
    q, k, v = torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 4)
    mask = left_padded(3, 6, [0, 2, 4])
    expected = reference_attention(q, k, v, True, None, None, mask)
    actual = attention(q, k, v, padding_mask=mask)
    assert_rows_close(actual.transpose(1, 2), expected.transpose(1, 2), rows=mask)


def test_attention_is_causal():
    torch.manual_seed(3)
    q, k, v = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    changed_k, changed_v = k.clone(), v.clone()
    changed_k[:, :, 4:] += 1.0
    changed_v[:, :, 4:] -= 1.0
    before, after = attention(q, k, v), attention(q, changed_k, changed_v)
    assert_rows_close(before[:, :, :4], after[:, :, :4])
    assert not torch.allclose(before[:, :, 4:], after[:, :, 4:])


# --- the layer -----------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [None, 3])
def test_layer_matches_the_reference(window):
    config = Config(n_embd=16, n_head=4, n_kv_head=2, window=window)
    layer, x = layer_and_input(config)
    assert_rows_close(layer(x), reference_layer(layer, config, x))


def test_layer_ignores_padding():
    config = Config(n_embd=16, n_head=4, n_kv_head=2)
    layer, x = layer_and_input(config, B=2, T=6)
    mask = left_padded(2, 6, [0, 3])
    expected = reference_layer(layer, config, x, mask)
    assert_rows_close(layer(x, padding_mask=mask), expected, rows=mask)


def test_grouped_query_heads_are_repeated_key_value_heads():
    """n_kv_head = 2 for 4 query heads is ordinary multi-head attention with kv heads 0, 0, 1, 1."""
    gqa, x = layer_and_input(Config(n_embd=16, n_head=4, n_kv_head=2))
    mha = CausalSelfAttention(Config(n_embd=16, n_head=4, n_kv_head=4)).eval()
    wq, wk, wv = gqa.qkv.weight.detach().split([16, 8, 8])

    def repeat(w):  # (2 heads * 4, 16) -> (4 heads * 4, 16): each kv head's rows twice
        return w.view(2, 1, 4, 16).expand(2, 2, 4, 16).reshape(16, 16)

    with torch.no_grad():
        mha.qkv.weight.copy_(torch.cat([wq, repeat(wk), repeat(wv)]))
        mha.proj.weight.copy_(gqa.proj.weight)
    assert_rows_close(gqa(x), mha(x))


def test_layer_is_causal():
    layer, x = layer_and_input(Config(n_embd=16, n_head=4, n_kv_head=2), T=6)
    changed = x.clone()
    changed[:, 4:] = torch.randn(2, 2, 16)
    assert_rows_close(layer(x)[:, :4], layer(changed)[:, :4])


def test_rope_only_sees_relative_positions():
    """With a window of 4, the last output depends on the last 4 tokens only, wherever they stand."""
    layer, x = layer_and_input(Config(n_embd=16, n_head=4, n_kv_head=2, window=4), T=4)
    earlier = torch.randn(2, 5, 16)
    assert_rows_close(layer(torch.cat([earlier, x], dim=1))[:, -1], layer(x)[:, -1])


def test_decoding_with_a_cache_matches_the_full_pass():
    config = Config(n_embd=16, n_head=4, n_kv_head=2, window=3)
    layer, x = layer_and_input(config, T=7)
    cache = KVCache()
    chunks = [layer(x[:, a:b], cache=cache) for a, b in [(0, 3), (3, 4), (4, 7)]]
    assert cache.length == 7
    assert_rows_close(torch.cat(chunks, dim=1), reference_layer(layer, config, x))


def test_dropout_is_off_in_eval_mode():
    config = Config(n_embd=16, n_head=4, n_kv_head=2, dropout=0.5)
    layer, x = layer_and_input(config)
    assert_rows_close(layer(x), reference_layer(layer, config, x))
    assert not torch.allclose(layer.train()(x), layer.eval()(x))


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"n_embd": 36, "n_head": 8, "n_kv_head": 2}, "divisible by n_head"),
        ({"n_embd": 16, "n_head": 4, "n_kv_head": 3}, "multiple of n_kv_head"),
        ({"n_embd": 12, "n_head": 4, "n_kv_head": 2}, "even head_dim"),
    ],
)
def test_bad_configs_are_refused(sizes, message):
    with pytest.raises(ValueError, match=message):
        CausalSelfAttention(Config(**sizes))


# --- the block -----------------------------------------------------------------------------------


def block_and_input(config, T=6, seed=4):
    torch.manual_seed(seed)
    block = Block(config).eval()
    with torch.no_grad():
        block.norm.weight.uniform_(0.5, 1.5)
        block.norm.bias.uniform_(-0.5, 0.5)
    return block, torch.randn(2, T, config.n_embd) * 2 + 1


def reference_block(block, config, x, padding_mask=None):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    normed = (x - mean) / torch.sqrt(var + block.norm.eps) * block.norm.weight + block.norm.bias
    return x + reference_layer(block.attn, config, normed.detach(), padding_mask)


def test_block_is_a_pre_norm_residual():
    config = Config(n_embd=16, n_head=4, n_kv_head=2)
    block, x = block_and_input(config)
    mask = left_padded(2, 6, [0, 2])
    expected = reference_block(block, config, x, mask)
    assert_rows_close(block(x, padding_mask=mask), expected, rows=mask)


def test_block_decodes_a_padded_batch_with_a_cache():
    config = Config(n_embd=16, n_head=4, n_kv_head=2)
    block, x = block_and_input(config)
    mask = left_padded(2, 6, [0, 2])
    cache = KVCache()
    chunks = [block(x[:, a:b], padding_mask=mask[:, :b], cache=cache) for a, b in [(0, 4), (4, 5), (5, 6)]]
    assert_rows_close(torch.cat(chunks, dim=1), reference_block(block, config, x, mask), rows=mask)
