"""Multi-head reshapes (HEAD-1), RMSNorm (NORM-1), the FFN variants (FFN-1), gradients (GRAD-1)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch.func import functional_call

from attnspec.impl import FeedForward, RMSNorm, apply_rope, default_ffn_hidden, merge_heads, split_heads
from attnspec.kit.asserts import (
    assert_close,
    assert_exactly_equal,
    assert_golden,
    assert_rounded_once,
)
from attnspec.kit.messages import message_names
from attnspec.kit.strategies import (
    LOW_PRECISION,
    low_precision_dtypes,
    randomize_,
    seeded_randn,
    seeds,
)
from attnspec.specs.oracle import ffn_oracle, rms_norm_oracle

# These properties check impl/ beyond the attention core: they run only with --impl impl.


float_dtypes = st.sampled_from([torch.float64, torch.float32])
activations = st.sampled_from(["relu", "gelu", "swiglu"])


# --------------------------------------------------------------------------- HEAD-1


@pytest.mark.req("HEAD-1")
@given(
    batch=st.integers(1, 3),
    seq=st.integers(1, 6),
    n_heads=st.integers(1, 5),
    head_dim=st.integers(1, 5),
    seed=seeds,
)
def test_split_heads_gives_head_h_features_h_d_onwards(device, batch, seq, n_heads, head_dim, seed):
    x = seeded_randn(seed, batch, seq, n_heads * head_dim, device=device, dtype=torch.float32)
    heads = split_heads(x, n_heads)
    assert heads.shape == (batch, n_heads, seq, head_dim)
    for h in range(n_heads):
        for t in range(seq):
            assert_exactly_equal(
                heads[:, h, t, :], x[:, t, h * head_dim : (h + 1) * head_dim], f"head {h}, token {t}"
            )
    assert_exactly_equal(merge_heads(heads), x, "merge_heads(split_heads(x))")


@pytest.mark.req("HEAD-1")
@given(
    batch=st.integers(1, 3),
    seq=st.integers(1, 6),
    n_heads=st.integers(1, 5),
    head_dim=st.integers(1, 5),
    seed=seeds,
)
def test_merge_heads_concatenates_heads_and_inverts_split(device, batch, seq, n_heads, head_dim, seed):
    heads = seeded_randn(seed, batch, n_heads, seq, head_dim, device=device, dtype=torch.float32)
    merged = merge_heads(heads)
    assert merged.shape == (batch, seq, n_heads * head_dim)
    expected = torch.cat([heads[:, h] for h in range(n_heads)], dim=-1)  # (B, T, H*d)
    assert_exactly_equal(merged, expected, "merge_heads vs concatenating heads along features")
    assert_exactly_equal(split_heads(merged, n_heads), heads, "split_heads(merge_heads(h))")


@pytest.mark.req("HEAD-1", "ERR-1")
@given(width=st.integers(1, 24), n_heads=st.integers(1, 7))
def test_split_heads_rejects_indivisible_widths(device, width, n_heads):
    x = torch.zeros(1, 2, width, device=device)
    if width % n_heads == 0:
        assert split_heads(x, n_heads).shape == (1, n_heads, 2, width // n_heads)
    else:
        with pytest.raises(ValueError, match=message_names(f"n_heads={n_heads}", str(width))):
            split_heads(x, n_heads)


@pytest.mark.req("HEAD-1", "ERR-1")
@pytest.mark.parametrize("shape", [(6,), (2, 6), (1, 2, 3, 6)])
def test_split_heads_rejects_wrong_ranks(device, shape):
    with pytest.raises(ValueError, match=message_names(shape)):
        split_heads(torch.zeros(shape, device=device), 2)


@pytest.mark.req("HEAD-1", "ERR-1")
@pytest.mark.parametrize("shape", [(6,), (2, 6), (1, 2, 6), (1, 1, 2, 3, 6)])
def test_merge_heads_rejects_wrong_ranks(device, shape):
    with pytest.raises(ValueError, match=message_names(shape)):
        merge_heads(torch.zeros(shape, device=device))


@pytest.mark.req("HEAD-1", "ERR-1")
@pytest.mark.parametrize("n_heads", [0, -2])
def test_split_heads_rejects_non_positive_head_counts(device, n_heads):
    with pytest.raises(ValueError, match=message_names(f"n_heads={n_heads}")):
        split_heads(torch.zeros(1, 2, 4, device=device), n_heads)


# --------------------------------------------------------------------------- NORM-1

norm_eps = st.sampled_from([1e-5, 1e-6, 1e-2, 0.5])


@pytest.mark.req("NORM-1")
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 4)),
    dim=st.integers(1, 16),
    eps=norm_eps,
    data=st.data(),
    seed=seeds,
)
def test_rms_norm_matches_the_oracle(device, shape, dim, eps, data, seed):
    dtypes = [torch.float64, torch.float32, *low_precision_dtypes(device)]
    dtype = data.draw(st.sampled_from(dtypes), label="dtype")
    norm = randomize_(RMSNorm(dim, eps=eps), seed).to(device=device, dtype=dtype)
    x = seeded_randn(seed + 1, *shape, dim, device=device, dtype=dtype) * 3
    with torch.no_grad():
        out = norm(x)
    assert out.dtype == dtype and out.shape == x.shape
    golden = rms_norm_oracle(x, norm.weight, eps)
    ref_lowp = rms_norm_oracle(x, norm.weight, eps, dtype=dtype)
    assert_golden(out, golden, ref_lowp, f"RMSNorm(dim={dim}, eps={eps}) in {dtype}")


@pytest.mark.req("NORM-1")
@given(
    dim=st.integers(2, 16),
    scale=st.floats(1e-2, 1e2),
    eps=norm_eps,
    seed=seeds,
)
def test_rms_norm_is_invariant_to_positive_rescaling(device, dim, scale, eps, seed):
    """RMSNorm_eps(c x) = RMSNorm_(eps/c^2)(x); with eps = 0 it is exactly scale-free."""
    x = seeded_randn(seed, 2, 3, dim, device=device)
    weight = seeded_randn(seed + 1, dim, device=device)

    def norm_with(e: float) -> RMSNorm:
        norm = RMSNorm(dim, eps=e).to(device=device, dtype=torch.float64)
        with torch.no_grad():
            norm.weight.copy_(weight)
        return norm

    with torch.no_grad():
        assert_close(norm_with(0.0)(scale * x), norm_with(0.0)(x), f"RMSNorm(eps=0) of {scale} x vs x")
        assert_close(
            norm_with(eps)(scale * x), norm_with(eps / scale**2)(x), f"RMSNorm_eps({scale} x) vs eps/c^2"
        )


@pytest.mark.req("NORM-1")
@given(dim=st.integers(1, 16), scale=st.sampled_from([1e-3, 1e-2, 1.0]), seed=seeds)
def test_rms_norm_default_eps_is_1e_5(device, dim, scale, seed):
    """RMSNorm(dim) is the oracle with eps = 1e-5; inputs of RMS ~ 1e-3 make eps matter."""
    norm = randomize_(RMSNorm(dim), seed).to(device=device, dtype=torch.float64)
    x = seeded_randn(seed + 1, 2, 3, dim, device=device) * scale
    with torch.no_grad():
        out = norm(x)
    golden = rms_norm_oracle(x, norm.weight, 1e-5)
    assert_golden(out, golden, golden, f"RMSNorm({dim}) with the default eps, |x| ~ {scale}")


@pytest.mark.req("NORM-1")
@given(
    dim=st.integers(1, 16),
    magnitude=st.sampled_from([300.0, 1000.0, 3000.0]),
    eps=norm_eps,
    seed=seeds,
)
def test_rms_norm_of_large_fp16_inputs_is_finite_and_accurate(device, dim, magnitude, eps, seed):
    """fp16 inputs whose squares exceed the fp16 range (65504) are normalised in float32:
    the fp16 output is finite and as close to the float64 oracle as rounding the float32
    result to fp16 allows."""
    norm = randomize_(RMSNorm(dim, eps=eps), seed).to(device=device, dtype=torch.float16)
    x = (seeded_randn(seed + 1, 2, 3, dim, device=device) * magnitude).to(torch.float16)
    x[..., 0] = magnitude  # at least one square per row overflows fp16
    with torch.no_grad():
        out = norm(x)
    assert out.dtype == torch.float16, f"RMSNorm of fp16 input returned {out.dtype}"
    assert torch.isfinite(out).all(), f"RMSNorm of fp16 inputs of size {magnitude} is not finite"
    golden = rms_norm_oracle(x, norm.weight, eps)
    ref_lowp = rms_norm_oracle(x, norm.weight, eps, dtype=torch.float32).to(torch.float16)
    assert_golden(out, golden, ref_lowp, f"RMSNorm(eps={eps}) of fp16 inputs of size {magnitude}")


@pytest.mark.req("NORM-1")
@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 4)), dim=st.integers(1, 16), eps=norm_eps, seed=seeds
)
def test_rms_norm_of_half_inputs_is_the_float32_result_rounded_once(device, dtype, shape, dim, eps, seed):
    """fp16 and bf16 inputs are normalised in float32 and rounded once to their dtype: a norm that
    squares, averages or scales in bf16 passes the golden bound of the oracle run in bf16, not this."""
    if dtype not in low_precision_dtypes(device):
        pytest.skip(f"{dtype}: its arithmetic does not run on {device}")
    norm = randomize_(RMSNorm(dim, eps=eps), seed).to(device=device, dtype=dtype)
    x = seeded_randn(seed + 1, *shape, dim, device=device, dtype=dtype) * 3
    with torch.no_grad():
        out = norm(x)
    golden = rms_norm_oracle(x, norm.weight, eps)  # float64 on the rounded inputs
    f32 = rms_norm_oracle(x, norm.weight, eps, dtype=torch.float32)
    assert_rounded_once(out, golden, f32, f"RMSNorm(dim={dim}, eps={eps}) of {dtype} inputs")


@pytest.mark.req("NORM-1", "ERR-1")
@pytest.mark.parametrize("dim", [0, -3])
def test_rms_norm_rejects_a_non_positive_dim(dim):
    with pytest.raises(ValueError, match=message_names("dim", dim)):
        RMSNorm(dim)


# --------------------------------------------------------------------------- FFN-1


@pytest.mark.req("FFN-1")
@given(
    d_model=st.integers(1, 12),
    hidden=st.one_of(st.none(), st.integers(1, 20)),
    activation=activations,
    dtype=float_dtypes,
    seed=seeds,
)
def test_ffn_matches_the_oracle(device, d_model, hidden, activation, dtype, seed):
    ffn = randomize_(FeedForward(d_model, hidden, activation), seed).to(device=device, dtype=dtype)
    x = seeded_randn(seed + 1, 2, 3, d_model, device=device, dtype=dtype)
    with torch.no_grad():
        out = ffn(x)
    w3 = ffn.w3.weight if ffn.w3 is not None else None
    golden = ffn_oracle(x, ffn.w1.weight, ffn.w2.weight, w3, activation)
    ref_lowp = ffn_oracle(x, ffn.w1.weight, ffn.w2.weight, w3, activation, dtype=dtype)
    assert_golden(out, golden, ref_lowp, f"FeedForward({activation}, hidden={hidden}) in {dtype}")


@pytest.mark.req("FFN-1")
@given(d_model=st.integers(1, 300), activation=activations)
def test_ffn_default_hidden_width(d_model, activation):
    """4D for ReLU/GELU; for SwiGLU the smallest multiple of 8 that is >= 8D/3."""
    if activation == "swiglu":
        at_least = -(-8 * d_model // 3)  # ceil(8D/3) in integers
        expected = -(-at_least // 8) * 8
    else:
        expected = 4 * d_model
    ffn = FeedForward(d_model, activation=activation)
    assert default_ffn_hidden(d_model, activation) == expected
    assert ffn.w1.weight.shape == (expected, d_model)
    assert ffn.w2.weight.shape == (d_model, expected)
    if activation == "swiglu":
        assert ffn.w3 is not None and ffn.w3.weight.shape == (expected, d_model)
    else:
        assert ffn.w3 is None
    assert all(lin.bias is None for lin in (ffn.w1, ffn.w2, ffn.w3) if lin is not None), "FFN has biases"


@pytest.mark.req("FFN-1")
@given(d_model=st.integers(1, 12), hidden=st.one_of(st.none(), st.integers(1, 20)), seed=seeds)
def test_ffn_default_activation_is_swiglu(device, d_model, hidden, seed):
    ffn = randomize_(FeedForward(d_model, hidden), seed).to(device=device, dtype=torch.float64)
    assert ffn.w3 is not None, "FeedForward built without an activation has no gate W3 (not SwiGLU)"
    x = seeded_randn(seed + 1, 2, 3, d_model, device=device)
    with torch.no_grad():
        out = ffn(x)
    golden = ffn_oracle(x, ffn.w1.weight, ffn.w2.weight, ffn.w3.weight, "swiglu")
    assert_golden(out, golden, golden, f"FeedForward({d_model}, {hidden}) vs the SwiGLU oracle")


@pytest.mark.req("FFN-1", "ERR-1")
@given(d_model=st.integers(1, 12), hidden=st.integers(1, 20), activation=activations)
@example(d_model=4, hidden=1, activation="relu")
@example(d_model=1, hidden=1, activation="swiglu")
def test_ffn_honours_an_explicit_hidden_width(d_model, hidden, activation):
    ffn = FeedForward(d_model, hidden, activation)
    assert ffn.w1.weight.shape == (hidden, d_model) and ffn.w2.weight.shape == (d_model, hidden)


@pytest.mark.req("FFN-1")
@pytest.mark.parametrize("activation", ["tanh", "ReLU", "", "silu", None])
def test_ffn_rejects_an_unknown_activation(activation):
    with pytest.raises(ValueError, match="activation"):
        FeedForward(8, activation=activation)


@pytest.mark.req("FFN-1", "ERR-1")
@pytest.mark.parametrize(("d_model", "hidden"), [(0, 4), (8, 0), (8, -1)])
def test_ffn_rejects_non_positive_sizes(d_model, hidden):
    bad = f"d_model={d_model}" if d_model < 1 else f"hidden={hidden}"
    with pytest.raises(ValueError, match=message_names(bad)):
        FeedForward(d_model, hidden, "relu")


# --------------------------------------------------------------------------- GRAD-1


@pytest.mark.req("GRAD-1")
@given(half=st.integers(1, 3), t=st.integers(1, 4), offset=st.integers(0, 50), seed=seeds)
def test_rope_gradients_match_finite_differences(device, half, t, offset, seed):
    x = seeded_randn(seed, 2, t, 2 * half, device=device).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda inp: apply_rope(inp, offset=offset), (x,))


@pytest.mark.req("GRAD-1")
@given(dim=st.integers(1, 6), eps=norm_eps, seed=seeds)
def test_rms_norm_gradients_match_finite_differences(device, dim, eps, seed):
    norm = RMSNorm(dim, eps=eps).to(device=device, dtype=torch.float64)
    x = seeded_randn(seed, 2, 3, dim, device=device).requires_grad_(True)
    weight = seeded_randn(seed + 1, dim, device=device).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda inp, w: functional_call(norm, {"weight": w}, (inp,)), (x, weight))
