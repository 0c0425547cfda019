"""Positions: impl's rotary embeddings (ROPE-*), sinusoidal encodings and the learned table (PE-*).

RoPE convention (CONVENTIONS.md): feature i is paired with feature i + d/2 and the pair at
position p is rotated by the angle p * base^(-2i/d), base 10000.  The laws every target's RoPE
obeys are in test_rope.py; here are impl's own forms (offset, 2-D input, device, errors, the
block), held to exact angles (impl builds its angle table in float64).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnspec.impl import (
    AttentionBlock,
    LearnedPositionalEmbedding,
    apply_rope,
    rope_cos_sin,
    sinusoidal_positional_encoding,
)
from attnspec.kit.asserts import assert_close, assert_exactly_equal, assert_golden
from attnspec.kit.messages import message_names
from attnspec.kit.references import block_oracle
from attnspec.kit.strategies import block_cases, head_dims, randomize_, seeded_randn, seeds
from attnspec.specs.oracle import rope_oracle, sinusoidal_oracle

# These properties check impl/ beyond the attention core: they run only with --impl impl.


float_dtypes = st.sampled_from([torch.float64, torch.float32])


# --------------------------------------------------------------------------- ROPE-1


@pytest.mark.req("ROPE-1")
@given(d=head_dims, t=st.integers(1, 8), offset=st.integers(0, 1024), seed=seeds)
def test_rope_score_matrix_is_offset_free(device, d, t, offset, seed):
    """The (T, T) score matrix of a rotated sequence is the same at offset 0 and any offset."""
    q = seeded_randn(seed, 3, t, d, device=device)
    k = seeded_randn(seed + 1, 3, t, d, device=device)
    at0 = apply_rope(q) @ apply_rope(k).transpose(-2, -1)
    at_s = apply_rope(q, offset=offset) @ apply_rope(k, offset=offset).transpose(-2, -1)
    assert_close(at_s, at0, f"RoPE score matrix at offset {offset} vs offset 0")


# --------------------------------------------------------------------------- ROPE-2


@pytest.mark.req("ROPE-2")
@given(d=head_dims, t=st.integers(1, 6), dtype=float_dtypes, seed=seeds)
def test_rope_offset_form_is_the_identity_for_the_first_token(device, d, t, dtype, seed):
    x = seeded_randn(seed, 2, t, d, device=device, dtype=dtype)
    assert_exactly_equal(apply_rope(x[..., :1, :]), x[..., :1, :], "RoPE of the first token at offset 0")


# --------------------------------------------------------------------------- ROPE-3


@pytest.mark.req("ROPE-3")
@given(d=head_dims, t=st.integers(1, 6), offset=st.integers(0, 2048), dtype=float_dtypes, seed=seeds)
def test_rope_offset_form_matches_oracle_and_explicit_positions(device, d, t, offset, dtype, seed):
    x = seeded_randn(seed, 3, t, d, device=device, dtype=dtype)
    out = apply_rope(x, offset=offset)
    positions = list(range(offset, offset + t))
    assert_golden(
        out,
        rope_oracle(x, positions),
        rope_oracle(x, positions, dtype=dtype),
        f"apply_rope at offset {offset}",
    )
    explicit = apply_rope(x, torch.arange(offset, offset + t, device=device))
    assert_exactly_equal(out, explicit, "offset form vs explicit positions tensor")


@pytest.mark.req("ROPE-3")
@given(d=head_dims, t=st.integers(2, 6), seed=seeds)
def test_rope_rotates_each_token_by_its_own_position(device, d, t, seed):
    """Token r of a sequence at offset o is rotated exactly like a lone token at position o+r."""
    x = seeded_randn(seed, 2, t, d, device=device)
    whole = apply_rope(x, offset=3)
    for r in range(t):
        alone = apply_rope(x[..., r : r + 1, :], torch.tensor([3 + r], device=device))
        assert_close(whole[..., r : r + 1, :], alone, f"token {r} of the sequence vs alone")


@pytest.mark.req("ROPE-3")
@pytest.mark.parametrize("explicit_positions", [False, True])
def test_rope_stays_on_the_device_of_x(explicit_positions):
    """Every intermediate (positions, frequencies, angles) is made where x lives. The meta
    device is a second device in every torch build, so this runs without a GPU."""
    x = torch.empty(2, 3, 5, 8, device="meta")
    positions = torch.arange(4, 9, device="meta") if explicit_positions else None
    out = apply_rope(x, positions, offset=4)
    assert out.device == x.device and out.shape == x.shape and out.dtype == x.dtype


@pytest.mark.req("ROPE-3", "ERR-1")
@given(d=head_dims, t=st.integers(1, 6), offset=st.integers(0, 100), dtype=float_dtypes, seed=seeds)
def test_rope_accepts_a_two_dimensional_input(device, d, t, offset, dtype, seed):
    """(T, d) is the narrowest input RoPE takes: it is rotated like one row of a batch."""
    x = seeded_randn(seed, t, d, device=device, dtype=dtype)
    out = apply_rope(x, offset=offset)
    assert out.shape == (t, d) and out.dtype == dtype
    positions = list(range(offset, offset + t))
    what = f"apply_rope of a ({t}, {d}) input at offset {offset}"
    assert_golden(out, rope_oracle(x, positions), rope_oracle(x, positions, dtype=dtype), what)
    assert_exactly_equal(out, apply_rope(x[None], offset=offset)[0], "2-D input vs the same rows in 3-D")


@pytest.mark.req("ROPE-5")
@given(d=head_dims, t=st.integers(1, 6), offset=st.integers(0, 2048), data=st.data(), dtype=float_dtypes)
def test_partial_rotary_rotates_the_first_features_and_passes_the_rest(device, d, t, offset, data, dtype):
    r = data.draw(st.sampled_from(range(2, d + 1, 2)), label="rotary_dim")
    x = seeded_randn(data.draw(seeds, label="seed"), 3, t, d, device=device, dtype=dtype)
    out = apply_rope(x, offset=offset, rotary_dim=r)
    positions = list(range(offset, offset + t))
    golden, lowp = (
        rope_oracle(x, positions, rotary_dim=r),
        rope_oracle(x, positions, dtype=dtype, rotary_dim=r),
    )
    assert_golden(out, golden, lowp, f"apply_rope(rotary_dim={r}) of d = {d} at offset {offset}")
    assert_exactly_equal(out[..., r:], x[..., r:], f"features {r}..{d - 1}, past rotary_dim {r}")


@pytest.mark.req("ERR-1")
@pytest.mark.parametrize("rotary_dim", [0, 9, True, 2.0])
def test_rope_refuses_a_rotary_dim_outside_the_head(rotary_dim):
    with pytest.raises(ValueError, match=message_names("rotary_dim", repr(rotary_dim))):
        apply_rope(torch.zeros(1, 2, 8), rotary_dim=rotary_dim)


@pytest.mark.req("ERR-1")
@pytest.mark.parametrize("shape", [(), (4,), (1,)])
def test_rope_refuses_fewer_than_two_dimensions(device, shape):
    with pytest.raises(ValueError, match=message_names(shape)):
        apply_rope(torch.zeros(shape, device=device))


@pytest.mark.req("ERR-1")
@given(d=head_dims, t=st.integers(1, 5), data=st.data())
def test_rope_refuses_positions_of_the_wrong_shape(device, d, t, data):
    shape = data.draw(
        st.one_of(
            st.integers(0, 8).filter(lambda n: n != t).map(lambda n: (n,)),
            st.just(()),
            st.just((1, t)),
            st.just((t, 1)),
        ),
        label="positions shape",
    )
    x = torch.zeros(2, t, d, device=device)
    positions = torch.zeros(shape, dtype=torch.long, device=device)
    with pytest.raises(ValueError, match=message_names("positions", (t,), shape)):
        apply_rope(x, positions)


# --------------------------------------------------------------------------- ROPE-4


def _float64_block(case, layer_idx: int, device) -> AttentionBlock:
    block = AttentionBlock(case.config(), layer_idx).to(device=device, dtype=torch.float64)
    return randomize_(block, case.seed + 1)


@pytest.mark.usefixtures("attention_path")
@pytest.mark.req("ROPE-4")
@given(case=block_cases(), layer_idx=st.integers(0, 1), shift=st.integers(1, 1000))
def test_block_output_is_invariant_to_a_common_position_shift(device, case, layer_idx, shift):
    """Rotating Q and K (not V) makes the block see only relative positions."""
    block = _float64_block(case, layer_idx, device)
    x = case.input(device, torch.float64)
    with torch.no_grad():
        at0 = block(x, offset=0)
        at_s = block(x, offset=shift)
    assert_close(at_s, at0, f"AttentionBlock output at offset {shift} vs offset 0")


@pytest.mark.usefixtures("attention_path")
@pytest.mark.req("ROPE-4", "ROPE-3")
@given(case=block_cases(), offset=st.sampled_from([0, 0, 1, 7, 100]))
def test_rope_reaches_q_and_k_in_the_block(device, case, offset):
    """Without a window, the block equals the oracle block that rotates q and k (not v)."""
    cfg = replace(case.config(), window=None)
    block = randomize_(AttentionBlock(cfg, 0).to(device=device, dtype=torch.float64), case.seed + 1)
    x = case.input(device, torch.float64)
    with torch.no_grad():
        out = block(x, offset=offset)
    golden = block_oracle(block, cfg, 0, x, offset)
    assert_golden(out, golden, golden, f"window-free AttentionBlock at offset {offset} vs oracle")


# --------------------------------------------------------------------------- PE-1


def _dots_at_distance(pe: torch.Tensor, delta: int) -> torch.Tensor:
    """PE(p) . PE(p + delta) for every p that has a partner, in float64."""
    pe = pe.double()
    return (pe[: pe.shape[0] - delta] * pe[delta:]).sum(dim=-1)


@pytest.mark.req("PE-1")
@given(seq_len=st.integers(2, 64), half=st.integers(1, 16), data=st.data())
def test_sinusoidal_dot_product_depends_only_on_distance(seq_len, half, data):
    d_model = 2 * half
    delta = data.draw(st.integers(0, seq_len - 1), label="delta")
    pe = sinusoidal_positional_encoding(seq_len, d_model)
    expected = sum(math.cos(delta * 10000.0 ** (-2.0 * i / d_model)) for i in range(half))
    dots = _dots_at_distance(pe, delta)
    worst = (dots - expected).abs().max().item()
    assert worst <= 1e-5, (
        f"PE(p).PE(p+{delta}) should be sum_i cos({delta} w_i) = {expected:.6f} for every p; "
        f"got {dots.tolist()} (worst error {worst:.2e})"
    )


@pytest.mark.req("PE-1")
@pytest.mark.parametrize(("delta", "expected"), [(1, 15.313649), (5, 11.777383)])
def test_sinusoidal_chapter_example(delta, expected):
    """The chapter's numbers for seq_len=16, d_model=32, for every start p."""
    dots = _dots_at_distance(sinusoidal_positional_encoding(16, 32), delta)
    assert dots.shape == (16 - delta,)
    worst = (dots - expected).abs().max().item()
    assert worst <= 1e-5, f"PE(p).PE(p+{delta}) should be {expected} for every p, got {dots.tolist()}"


# --------------------------------------------------------------------------- PE-2


@pytest.mark.req("PE-2")
@given(seq_len=st.integers(1, 64), half=st.integers(1, 16))
def test_sinusoidal_table_matches_the_oracle(seq_len, half):
    pe = sinusoidal_positional_encoding(seq_len, 2 * half)
    assert pe.shape == (seq_len, 2 * half)
    assert pe.dtype == torch.get_default_dtype(), (
        f"table in {pe.dtype}, default is {torch.get_default_dtype()}"
    )
    assert_close(pe, sinusoidal_oracle(seq_len, 2 * half), f"sinusoidal table ({seq_len}, {2 * half})")


@lru_cache(maxsize=4)
def _sinusoidal_golden(seq_len: int, d_model: int) -> torch.Tensor:
    return sinusoidal_oracle(seq_len, d_model)


@pytest.mark.req("PE-2")
@pytest.mark.parametrize("default_dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("seq_len", "d_model"), [(4096, 8), (2500, 20)])
def test_sinusoidal_table_is_accurate_in_the_default_dtype_at_positions_in_the_thousands(
    default_dtype, seq_len, d_model
):
    """Angles p*w_i of a few thousand radians need float64: in float32 they are off by
    ~1e-5..1e-4, so the table must be computed in float64 and only then cast; the error
    allowed is that of rounding the exact table to the default dtype (tolerance policy)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(default_dtype)
    try:
        pe = sinusoidal_positional_encoding(seq_len, d_model)
    finally:
        torch.set_default_dtype(previous)
    assert pe.dtype == default_dtype, f"table in {pe.dtype} under default dtype {default_dtype}"
    golden = _sinusoidal_golden(seq_len, d_model)
    what = f"sinusoidal table ({seq_len}, {d_model}) in {default_dtype}"
    assert_golden(pe, golden, golden.to(default_dtype), what)


# --------------------------------------------------------------------------- PE-3


@pytest.mark.req("PE-3")
@given(max_len=st.integers(1, 20), d_model=st.integers(1, 8), data=st.data())
def test_learned_table_returns_rows_offset_onwards(device, max_len, d_model, data):
    offset = data.draw(st.integers(0, max_len - 1), label="offset")
    seq_len = data.draw(st.integers(1, max_len - offset), label="seq_len")
    emb = LearnedPositionalEmbedding(max_len, d_model).to(device)
    rows = emb(seq_len, offset)
    assert rows.shape == (seq_len, d_model)
    expected = torch.stack([emb.table[offset + r] for r in range(seq_len)])
    assert_exactly_equal(rows, expected, f"rows {offset}..{offset + seq_len - 1} of the table")
    first = torch.stack([emb.table[r] for r in range(seq_len)])
    assert_exactly_equal(emb(seq_len), first, f"emb({seq_len}) without an offset: rows 0..{seq_len - 1}")


@pytest.mark.req("PE-3")
@settings(max_examples=5)
@given(seed=seeds)
def test_learned_table_is_initialised_from_n_0_0_02_squared(seed):
    """Sample mean and std of a fresh 256 x 64 table: the std of a sample std of n normals is
    about std/sqrt(2n) (0.55 % here), so the 10 % band is some 18 standard errors wide."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        table = LearnedPositionalEmbedding(256, 64).table.detach().double()
    n = table.numel()
    std, mean = table.std().item(), table.mean().item()
    assert abs(std - 0.02) <= 0.002, f"learned table initialised with std {std:.5f}, expected 0.02"
    assert abs(mean) <= 6 * 0.02 / math.sqrt(n), f"learned table initialised with mean {mean:.2e}, expected 0"


@pytest.mark.req("PE-3")
@given(max_len=st.integers(1, 20), d_model=st.integers(1, 8), data=st.data())
def test_learned_table_refuses_positions_at_or_past_t_max(device, max_len, d_model, data):
    emb = LearnedPositionalEmbedding(max_len, d_model).to(device)
    offset = data.draw(st.integers(0, max_len + 3), label="offset")
    seq_len = data.draw(st.integers(max(1, max_len - offset + 1), max_len + 5), label="seq_len")
    refused = f"{offset}..{offset + seq_len - 1}"  # the positions asked for
    with pytest.raises(ValueError, match=message_names(refused, f"T_max={max_len}")):
        emb(seq_len, offset)


@pytest.mark.req("PE-3", "ERR-1")
@pytest.mark.parametrize(("max_len", "d_model"), [(0, 4), (-1, 4), (4, 0), (4, -2)])
def test_learned_table_rejects_bad_sizes(max_len, d_model):
    name, value = ("max_len", max_len) if max_len < 1 else ("d_model", d_model)
    with pytest.raises(ValueError, match=message_names(name, value)):
        LearnedPositionalEmbedding(max_len, d_model)


@pytest.mark.req("PE-3", "ERR-1")
@pytest.mark.parametrize(("seq_len", "offset"), [(0, 0), (-1, 0), (2, -1)])
def test_learned_table_rejects_bad_lengths(seq_len, offset):
    name, value = ("seq_len", seq_len) if seq_len < 1 else ("offset", offset)
    with pytest.raises(ValueError, match=message_names(name, value)):
        LearnedPositionalEmbedding(8, 4)(seq_len, offset)


# --------------------------------------------------------------------------- ERR-2


@pytest.mark.req("ERR-2")
@given(half=st.integers(0, 8), t=st.integers(1, 4))
def test_rope_refuses_an_odd_head_dim(device, half, t):
    d = 2 * half + 1
    x = torch.randn(2, t, d, device=device)
    with pytest.raises(ValueError, match="head_dim"):
        apply_rope(x)
    with pytest.raises(ValueError, match="head_dim"):
        rope_cos_sin(torch.arange(t, device=device), d, 10000.0)


@pytest.mark.req("ERR-2")
@given(half=st.integers(0, 8), seq_len=st.integers(1, 8))
def test_sinusoidal_refuses_an_odd_d_model(half, seq_len):
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal_positional_encoding(seq_len, 2 * half + 1)
    with pytest.raises(ValueError):
        sinusoidal_positional_encoding(0, 2 * half + 2)
