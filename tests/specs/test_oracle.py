"""The oracle checked on cases whose answer follows from the formula by hand."""

from __future__ import annotations

import math

import pytest
import torch

from attnspec.specs import REQUIREMENTS, load_requirements, mods
from attnspec.specs.mods import mask_values
from attnspec.specs.oracle import (
    attention_grad_oracle,
    attention_layer_oracle,
    attention_oracle,
    attention_oracle_by_rows,
    layer_norm_oracle,
    layer_qkv_oracle,
    mask_oracle,
    rms_norm_oracle,
    rope_oracle,
    visible_keys,
)


def test_visible_keys_follow_the_window_inequality():
    # 4 queries over 6 keys: query i sits at position 2 + i; window 3 keeps pos-2..pos
    assert visible_keys(0, 4, 6, window=3) == [0, 1, 2]
    assert visible_keys(3, 4, 6, window=3) == [3, 4, 5]
    assert visible_keys(3, 4, 6) == [0, 1, 2, 3, 4, 5]
    assert visible_keys(0, 3, 2) == []  # position -1 sees nothing
    assert mask_oracle(3, 3).sum().item() == 6


def test_equal_scores_average_the_visible_values():
    q = torch.zeros(1, 1, 3, 2, dtype=torch.float64)
    k = torch.randn(1, 1, 3, 2, dtype=torch.float64)
    v = torch.tensor([1.0, 2.0, 6.0], dtype=torch.float64).view(1, 1, 3, 1)
    out, weights = attention_oracle(q, k, v)
    assert out.flatten().tolist() == [1.0, 1.5, 3.0]
    sinks = torch.zeros(1, dtype=torch.float64)  # a sink of logit 0 counts as one more key
    out, weights = attention_oracle(q, k, v, sinks=sinks)
    assert torch.allclose(out.flatten(), torch.tensor([0.5, 1.0, 2.25], dtype=torch.float64))
    assert torch.allclose(weights[0, 0, 2].sum(), torch.tensor(0.75, dtype=torch.float64))


def test_rope_rotates_the_first_pair_by_the_position():
    x = torch.tensor([[1.0, 0.0]], dtype=torch.float64)  # d=2: one pair, theta_0 = 1
    y = rope_oracle(x, [2])
    assert torch.allclose(y, torch.tensor([[math.cos(2), math.sin(2)]], dtype=torch.float64))


def test_rope_pairs_half_split_features_or_interleaved_neighbours():
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)  # d=4: theta_0 = 1, theta_1 = 1/base
    half, interleaved = rope_oracle(x, [2], base=100.0), rope_oracle(x, [2], base=100.0, pairs="interleaved")
    assert torch.allclose(half, torch.tensor([[math.cos(2), 0.0, math.sin(2), 0.0]], dtype=torch.float64))
    assert torch.allclose(
        interleaved, torch.tensor([[math.cos(2), math.sin(2), 0.0, 0.0]], dtype=torch.float64)
    )


def test_rope_angles_in_the_dtype_are_the_rounded_ones():
    x = torch.tensor([[1.0, 0.0]], dtype=torch.float32)
    exact = rope_oracle(x, [2**24 + 1], dtype=torch.float32)  # float32 holds 2**24, not 2**24 + 1
    rounded = rope_oracle(x, [2**24 + 1], dtype=torch.float32, angles_in_dtype=True)
    expected = torch.tensor([[math.cos(2**24), math.sin(2**24)]], dtype=torch.float32)
    assert torch.equal(rounded, expected) and not torch.equal(exact, expected)


def test_qk_norm_gives_every_head_its_gain_as_root_mean_square_before_the_rotation():
    # RMSNorm over a head's d features with gain g leaves mean(q_i^2) = g^2 (eps aside), and the rotation
    # after it keeps that: a norm after RoPE, or over all heads at once, would not give each head g^2
    torch.manual_seed(0)
    x, d = torch.randn(1, 5, 8, dtype=torch.float64), 4
    weights = {name: torch.randn(8, 8, dtype=torch.float64) for name in ("wq", "wk", "wv")}
    q, k, _ = layer_qkv_oracle(
        x, **weights, n_heads=2, n_kv_heads=2, head_dim=d, offset=3, eps=1e-12,
        q_norm=torch.full((d,), 1.0, dtype=torch.float64), k_norm=torch.full((d,), 2.0, dtype=torch.float64),
    )  # fmt: skip
    assert torch.allclose(q.pow(2).mean(-1), torch.ones(1, 2, 5, dtype=torch.float64))
    assert torch.allclose(k.pow(2).mean(-1), torch.full((1, 2, 5), 4.0, dtype=torch.float64))
    plain, _, _ = layer_qkv_oracle(x, **weights, n_heads=2, n_kv_heads=2, head_dim=d, offset=3)
    assert not torch.allclose(plain.pow(2).mean(-1), torch.ones(1, 2, 5, dtype=torch.float64))


def test_qk_norm_forms_normalise_what_each_family_normalises():
    # per head with a gain per head (StableLM's LayerNorm per head: each head centred, its own gain and
    # bias), over the whole width (OLMo 2: one RMS over all heads' features), each by hand
    torch.manual_seed(2)
    x, d, heads = torch.randn(2, 5, 8, dtype=torch.float64), 4, 2
    weights = {name: torch.randn(8, 8, dtype=torch.float64) for name in ("wq", "wk", "wv")}
    sizes = dict(n_heads=heads, n_kv_heads=heads, head_dim=d, rope=False, eps=1e-6)
    plain, _, _ = layer_qkv_oracle(x, **weights, **sizes)
    gain, bias = torch.randn(heads, d, dtype=torch.float64), torch.randn(heads, d, dtype=torch.float64)
    per_head, _, _ = layer_qkv_oracle(
        x, **weights, **sizes, q_norm=gain, k_norm=gain, q_norm_bias=bias, k_norm_bias=bias, qk_norm="layer"
    )
    for h in range(heads):
        assert torch.allclose(per_head[:, h], layer_norm_oracle(plain[:, h], gain[h], bias[h], 1e-6))
    width_gain = torch.randn(heads * d, dtype=torch.float64)
    whole, _, _ = layer_qkv_oracle(
        x, **weights, **sizes, q_norm=width_gain, k_norm=width_gain, qk_norm_over="width"
    )
    flat = plain.transpose(1, 2).reshape(2, 5, heads * d)
    expected = rms_norm_oracle(flat, width_gain, 1e-6).reshape(2, 5, heads, d).transpose(1, 2)
    assert torch.allclose(whole, expected)
    shared = rms_norm_oracle(plain, width_gain[:d], 1e-6)  # per head, one gain: not the width's norm
    assert not torch.allclose(whole, layer_qkv_oracle(x, **weights, **sizes, q_norm=width_gain[:d])[0])
    assert torch.allclose(layer_qkv_oracle(x, **weights, **sizes, q_norm=width_gain[:d])[0], shared)


def test_the_masks_of_a_schedule_and_what_a_stack_of_them_reaches():
    grid = dict(batch=1, n_heads=1, tq=6, tk=6)

    def seen(mod):
        return mask_values(mod, *grid.values())[0, 0]

    assert seen(mods.chunked(3))[4].tolist() == [False, False, False, True, True, False]
    assert seen(mods.shifted(mods.chunked(3), 1))[2].tolist() == [False, False, True, False, False, False]
    assert seen(mods.local(1))[2].tolist() == [False, True, True, True, False, False]
    assert torch.equal(seen(mods.sliding_window(2)), mask_oracle(6, 6, window=2))
    # two windows of 2 keys reach 2 back; a chunk of 3 then a window of 2 reach across the chunk's edge
    two_windows = mods.reach([seen(mods.sliding_window(2))] * 2)
    assert two_windows[5].tolist() == [False, False, False, True, True, True]
    chunk_then_window = mods.reach([seen(mods.chunked(3)), seen(mods.sliding_window(2))])
    assert chunk_then_window[3].tolist() == [True, True, True, True, False, False]
    assert bool(mods.reach([seen(mods.local(1)), seen(mods.bidirectional)]).all())


def test_partial_rotary_rotates_the_first_features_as_a_head_of_that_size_and_passes_the_rest():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    partial = rope_oracle(x, [0, 5, 9, 2], base=100.0, rotary_dim=4)
    assert torch.equal(partial[..., 4:], x[..., 4:])
    assert torch.equal(partial[..., :4], rope_oracle(x[..., :4], [0, 5, 9, 2], base=100.0))
    assert not torch.allclose(partial, rope_oracle(x, [0, 5, 9, 2], base=100.0))
    with pytest.raises(ValueError, match="rotary_dim 3"):
        rope_oracle(x, [0, 1, 2, 3], rotary_dim=3)


def test_sandwich_and_post_norms_sit_where_their_layers_put_them():
    # a sandwich norm RMS-normalises the attention's output before the residual; a post-norm normalises
    # x plus that output (BERT): each is the plain layer's pieces put together by hand
    torch.manual_seed(1)
    x = torch.randn(1, 4, 6, dtype=torch.float64)
    w = {name: torch.randn(6, 6, dtype=torch.float64) for name in ("wq", "wk", "wv", "wo")}
    sizes = dict(n_heads=2, n_kv_heads=2, head_dim=3, window=None, sinks=None, rope=False, eps=1e-6)
    branch = attention_layer_oracle(x, **w, **sizes)
    gain, bias = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    sandwich = attention_layer_oracle(x, **w, **sizes, post_norm=gain, residual=True)
    assert torch.allclose(sandwich, x + rms_norm_oracle(branch, gain, 1e-6))
    post = attention_layer_oracle(
        x, **w, **sizes, residual=True, norm="layer", norm_weight=gain, norm_bias=bias, norm_at="post"
    )
    assert torch.allclose(post, layer_norm_oracle(x + branch, gain, bias, 1e-6))
    assert not torch.allclose(attention_layer_oracle(x, **w, **sizes, scale=1.0), branch)


def test_catalogue_loads_and_ids_are_unique(tmp_path):
    assert len(REQUIREMENTS) >= 30
    assert all(r.statement and r.source and r.tolerance for r in REQUIREMENTS.values())
    dup = tmp_path / "dup.toml"
    row = '[[requirement]]\nid = "X-1"\nstatement = "s"\nsource = "s"\ntolerance = "exact"\n'
    dup.write_text(row + row)
    try:
        load_requirements(dup)
    except ValueError as e:
        assert "duplicate" in str(e)
    else:
        raise AssertionError("a duplicate id was accepted")


def dense_attention(q, k, v, *, causal, window, sinks=None, scale=None):
    """softmax(q k^T * scale + M, sink) v written densely, differentiable (a row that sees nothing: 0)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = (q @ k.mT * scale).masked_fill(~mask_oracle(q.shape[2], k.shape[2], causal, window), -math.inf)
    if sinks is not None:
        logits = torch.cat([logits, sinks[None, :, None, None].expand(*logits.shape[:3], 1)], dim=-1)
    seen = (logits > -math.inf).any(dim=-1, keepdim=True)
    weights = torch.softmax(torch.where(seen, logits, 0.0), dim=-1) * seen
    return weights[..., : k.shape[2]] @ v


def test_both_output_oracles_are_the_dense_formula():
    # On small cases with every switch (decode, blind queries, GQA, windows, sinks of -inf and not, an
    # explicit scale, non-causal) the oracle, which sums each row's values one key at a time, and the
    # row oracle the kernel properties use for long sequences must give softmax(q k^T * scale + M) v
    # written densely with torch's own softmax.
    gen = torch.Generator().manual_seed(5)
    for tq, tk, window, causal in [(5, 5, None, True), (2, 7, 3, True), (6, 4, 2, True), (3, 6, None, False)]:
        q = torch.randn(2, 6, tq, 3, generator=gen, dtype=torch.float64)
        k, v = (
            torch.randn(2, 2, tk, 3, generator=gen, dtype=torch.float64),
            torch.randn(2, 2, tk, 4, generator=gen, dtype=torch.float64),
        )
        sinks = torch.tensor([0.5, -math.inf, 2.0, -1.0, 0.0, -math.inf], dtype=torch.float64)
        for kwargs in ({}, {"sinks": sinks}, {"scale": 0.7}):
            expected = dense_attention(q, k, v, causal=causal, window=window, **kwargs)
            out, _ = attention_oracle(q, k, v, causal=causal, window=window, **kwargs)
            rows = attention_oracle_by_rows(q, k, v, causal=causal, window=window, **kwargs)
            assert torch.allclose(out, expected, rtol=0, atol=1e-14), (tq, tk, window, causal, kwargs)
            assert torch.allclose(rows, expected, rtol=0, atol=1e-14), (tq, tk, window, causal, kwargs)


def test_a_padded_key_weighs_nothing_and_a_query_that_sees_none_outputs_zero():
    q, k = torch.zeros(2, 1, 3, 2, dtype=torch.float64), torch.randn(2, 1, 3, 2, dtype=torch.float64)
    v = torch.tensor([1.0, 2.0, 6.0], dtype=torch.float64).view(1, 1, 3, 1).repeat(2, 1, 1, 1)
    real = torch.tensor([[True, True, True], [False, True, True]])
    sinks = torch.zeros(1, dtype=torch.float64)
    out, weights = attention_oracle(q, k, v, padding_mask=real, sinks=sinks)
    # batch 0 as without padding; batch 1: query 0 sees no real key (zero, whatever its sink), query 1
    # sees key 1 and the sink, query 2 keys 1 and 2 and the sink
    assert out[0].flatten().tolist() == [0.5, 1.0, 2.25]
    assert out[1].flatten().tolist() == [0.0, 1.0, pytest.approx(8 / 3)]
    assert weights[1, 0, 0].tolist() == [0.0, 0.0, 0.0] and weights[1, 0, :, 0].tolist() == [0.0, 0.0, 0.0]


def test_the_gradient_oracle_is_autograd_through_the_formula():
    # GRAD-2's golden gradients are the derivative of the formula written row by row: on small cases with
    # every switch (decode, blind queries, GQA, windows, sinks of -inf and not, an explicit scale, non-causal)
    # they must be autograd's gradients of the dense formula.
    gen = torch.Generator().manual_seed(6)
    for tq, tk, window, causal in [(5, 5, None, True), (2, 7, 3, True), (6, 4, 2, True), (3, 6, None, False)]:
        q = torch.randn(2, 6, tq, 3, generator=gen, dtype=torch.float64).requires_grad_()
        k = torch.randn(2, 2, tk, 3, generator=gen, dtype=torch.float64).requires_grad_()
        v = torch.randn(2, 2, tk, 4, generator=gen, dtype=torch.float64).requires_grad_()
        d_out = torch.randn(2, 6, tq, 4, generator=gen, dtype=torch.float64)
        sinks = torch.tensor([0.5, -math.inf, 2.0, -1.0, 0.0, 1.5], dtype=torch.float64, requires_grad=True)
        for kwargs in ({}, {"sinks": sinks}, {"scale": 0.7}):
            out = dense_attention(q, k, v, causal=causal, window=window, **kwargs)
            leaves = [q, k, v] + ([sinks] if "sinks" in kwargs else [])
            expected = torch.autograd.grad((out * d_out).sum(), leaves)
            got = attention_grad_oracle(q, k, v, d_out, causal=causal, window=window, **kwargs)
            for name, want, have in zip(("dq", "dk", "dv", "dsinks"), expected, got, strict=False):
                assert torch.allclose(have, want, rtol=0, atol=1e-13), (name, tq, tk, window, causal, kwargs)
