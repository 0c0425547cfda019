"""The pre-norm decoder block and the stack: BLOCK-1..5, the layer schedule (MASK-4), ERR-2.

x = x + out(attn(RoPE(q), RoPE(k), v)) over RMSNorm(x)      AttentionBlock
x = x + FFN(RMSNorm(x))                                     MLPBlock
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from attnspec.impl import AttentionBlock, MLPBlock, ModelConfig, TransformerBlock, TransformerStack
from attnspec.kit.asserts import (
    assert_close,
    assert_exactly_equal,
    assert_exactly_zero,
    assert_golden,
)
from attnspec.kit.messages import message_names
from attnspec.kit.references import block_oracle, ffn_width, mlp_oracle
from attnspec.kit.strategies import BlockCase, block_cases, noise_like, randomize_

# These properties check impl/ beyond the attention core: they run only with --impl impl.  Those that
# run causal attention over more than one tile's queries run on each attention path (explicit and
# tiled; see conftest.py); the checks of configurations, errors and MLP blocks run once.

both_paths = pytest.mark.usefixtures("attention_path")

float_dtypes = st.sampled_from([torch.float64, torch.float32])
MODULE_KINDS = ("attention", "transformer", "stack")


def _rows_differ(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(T,) boolean: token t's output differs somewhere (any batch element, any feature)."""
    return (a != b).any(dim=-1).any(dim=0)


# --------------------------------------------------------------------------- BLOCK-1


# Explicit examples (run first, and under the mutation profile too) where each config field
# the block must honour makes a visible difference: eps near the inputs' mean square, a RoPE
# base far from 10000 with head_dim >= 4, a non-default FFN width, a non-default activation.
_EPS_BASE_CASE = BlockCase(
    d_model=12,
    n_heads=4,
    n_kv_heads=2,
    head_dim=4,
    n_layers=1,
    window=3,
    window_layers="even",
    use_sinks=True,
    activation="relu",
    batch=2,
    seq=6,
    seed=11,
    norm_eps=0.5,
    rope_base=10.0,
    ffn_hidden=3,
)
_WIDTH_CASE = replace(
    _EPS_BASE_CASE,
    d_model=8,
    n_heads=2,
    n_kv_heads=1,
    head_dim=8,
    window=None,
    window_layers="all",
    use_sinks=False,
    activation="gelu",
    batch=1,
    seed=12,
    norm_eps=1e-2,
    rope_base=500000.0,
    ffn_hidden=1,
)


@pytest.mark.req("BLOCK-1")
@both_paths
@given(
    case=block_cases(),
    layer_idx=st.integers(0, 3),
    offset=st.sampled_from([0, 0, 1, 5, 300]),
    dtype=float_dtypes,
)
@example(case=_EPS_BASE_CASE, layer_idx=0, offset=0, dtype=torch.float64)
@example(case=_WIDTH_CASE, layer_idx=1, offset=5, dtype=torch.float32)
def test_attention_block_matches_the_oracle_block(device, case, layer_idx, offset, dtype):
    """The block equals the oracle built from the config's eps, RoPE base and window schedule."""
    block = case.module("attention", layer_idx, device, dtype)
    cfg = case.config()
    x = case.input(device, dtype)
    with torch.no_grad():
        out = block(x, offset=offset)
    assert out.dtype == dtype
    golden = block_oracle(block, cfg, layer_idx, x, offset)
    ref_lowp = block_oracle(block, cfg, layer_idx, x, offset, dtype=dtype)
    what = f"AttentionBlock(layer {layer_idx}, offset {offset}, eps {cfg.norm_eps}, base {cfg.rope_base})"
    assert_golden(out, golden, ref_lowp, f"{what} vs oracle")


# GPT-NeoX's partial rotary and Qwen3's q/k norm, together: RoPE on the first pair of each 4-wide head,
# each query and key head RMS-normalised (eps 0.5, against heads of unit RMS, so eps matters) before it
_VARIANT_CASE = replace(_EPS_BASE_CASE, seed=13, rotary_dim=2, qk_norm=True)


@pytest.mark.req("BLOCK-6", "ROPE-5")
@both_paths
@given(case=block_cases(), data=st.data(), offset=st.sampled_from([0, 1, 5, 300]), dtype=float_dtypes)
@example(case=_VARIANT_CASE, data=None, offset=5, dtype=torch.float64)
def test_partial_rotary_and_qk_norm_blocks_match_the_oracle_block(device, case, data, offset, dtype):
    """With q/k norm on and RoPE on part of each head (whenever the head has more than one pair): the
    block equals the oracle block, which normalises each head with the block's gains and the config's
    eps before rotating the config's first rotary_dim features."""
    if data is not None:
        pairs = [*range(2, case.head_dim, 2)] or [case.head_dim]
        case = replace(case, qk_norm=True, rotary_dim=data.draw(st.sampled_from(pairs), label="rotary_dim"))
    block = case.module("attention", 0, device, dtype)
    cfg = case.config()
    x = case.input(device, dtype)
    with torch.no_grad():
        out = block(x, offset=offset)
    golden = block_oracle(block, cfg, 0, x, offset)
    ref_lowp = block_oracle(block, cfg, 0, x, offset, dtype=dtype)
    what = f"AttentionBlock(rotary_dim {cfg.rotary_dim} of {cfg.head_dim}, qk_norm, offset {offset})"
    assert_golden(out, golden, ref_lowp, f"{what} vs oracle")


@pytest.mark.req("BLOCK-1", "FFN-1", "NORM-1")
@given(case=block_cases(), dtype=float_dtypes)
@example(case=_EPS_BASE_CASE, dtype=torch.float64)
@example(case=_WIDTH_CASE, dtype=torch.float32)
def test_mlp_block_is_pre_norm_with_a_residual(device, case, dtype):
    """The MLP block equals the oracle built from the config's eps, FFN width and activation."""
    mlp = case.module("mlp", 0, device, dtype)
    cfg = case.config()
    x = case.input(device, dtype)
    with torch.no_grad():
        out = mlp(x)
    assert out.dtype == dtype
    what = f"MLPBlock({cfg.activation}, hidden {cfg.ffn_hidden}, eps {cfg.norm_eps}) vs oracle"
    assert_golden(out, mlp_oracle(mlp, cfg, x), mlp_oracle(mlp, cfg, x, dtype), what)


@pytest.mark.req("BLOCK-1", "FFN-1", "ERR-1")
@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu"])
@pytest.mark.parametrize("ffn_hidden", [None, 1, 2, 13])
def test_config_ffn_width_and_activation_reach_the_mlp_block(activation, ffn_hidden):
    """Every positive width is accepted, 1 included, and the MLP block is built with it."""
    cfg = ModelConfig(**{**VALID, "activation": activation, "ffn_hidden": ffn_hidden})
    for mlp in (MLPBlock(cfg), TransformerBlock(cfg).mlp):
        width = ffn_width(cfg)
        assert mlp.ffn.w1.weight.shape == (width, cfg.d_model), f"W1 {tuple(mlp.ffn.w1.weight.shape)}"
        assert mlp.ffn.w2.weight.shape == (cfg.d_model, width), f"W2 {tuple(mlp.ffn.w2.weight.shape)}"
        assert (mlp.ffn.w3 is not None) == (activation == "swiglu"), f"gate W3 with {activation}"
        assert mlp.norm.eps == cfg.norm_eps
    mlp = randomize_(MLPBlock(cfg).double(), 5)
    x = torch.randn(2, 3, cfg.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        out = mlp(x)
    golden = mlp_oracle(mlp, cfg, x)
    assert_golden(out, golden, golden, f"MLPBlock({activation}, hidden {ffn_hidden}) vs oracle")


@pytest.mark.req("BLOCK-1")
@both_paths
@given(case=block_cases(), layer_idx=st.integers(0, 3), offset=st.sampled_from([0, 3]), dtype=float_dtypes)
@example(case=_EPS_BASE_CASE, layer_idx=0, offset=0, dtype=torch.float64)
def test_transformer_block_is_attention_then_mlp(device, case, layer_idx, offset, dtype):
    block = case.module("transformer", layer_idx, device, dtype)
    cfg = case.config()
    x = case.input(device, dtype)
    with torch.no_grad():
        out = block(x, offset)
    golden = mlp_oracle(block.mlp, cfg, block_oracle(block.attn, cfg, layer_idx, x, offset))
    lowp_attn = block_oracle(block.attn, cfg, layer_idx, x, offset, dtype)
    ref_lowp = mlp_oracle(block.mlp, cfg, lowp_attn, dtype)
    assert_golden(out, golden, ref_lowp, f"TransformerBlock(layer {layer_idx}) vs oracle attention then MLP")


# --------------------------------------------------------------------------- BLOCK-2


@pytest.mark.req("BLOCK-2")
@both_paths
@given(case=block_cases(), layer_idx=st.integers(0, 1), offset=st.integers(0, 20), dtype=float_dtypes)
def test_zeroed_out_projection_makes_the_attention_block_the_identity(device, case, layer_idx, offset, dtype):
    block = case.module("attention", layer_idx, device, dtype)
    with torch.no_grad():
        block.out.weight.zero_()
        x = case.input(device, dtype)
        assert_exactly_equal(block(x, offset=offset), x, "AttentionBlock with out.weight = 0")


@pytest.mark.req("BLOCK-2")
@given(case=block_cases(), dtype=float_dtypes)
def test_zeroed_ffn_output_weights_make_the_mlp_block_the_identity(device, case, dtype):
    block = case.module("mlp", 0, device, dtype)
    with torch.no_grad():
        block.ffn.w2.weight.zero_()
        x = case.input(device, dtype)
        assert_exactly_equal(block(x), x, f"MLPBlock({case.activation}) with ffn.w2.weight = 0")


# --------------------------------------------------------------------------- BLOCK-3


@pytest.mark.req("BLOCK-3")
@both_paths
@pytest.mark.parametrize("kind", MODULE_KINDS)
@given(
    case=block_cases().filter(lambda c: c.seq >= 2),
    layer_idx=st.integers(0, 1),
    offset=st.integers(0, 20),
    dtype=float_dtypes,
    data=st.data(),
)
def test_future_tokens_never_change_earlier_outputs(device, kind, case, layer_idx, offset, dtype, data):
    t = data.draw(st.integers(0, case.seq - 2), label="t")
    module = case.module(kind, layer_idx, device, dtype)
    x = case.input(device, dtype)
    x_new = x.clone()
    x_new[:, t + 1 :] = noise_like(x[:, t + 1 :], case.seed + 2)
    with torch.no_grad():
        out, out_new = module(x, offset), module(x_new, offset)
    what = f"{kind}: outputs 0..{t} after changing later tokens"
    assert_exactly_equal(out_new[:, : t + 1], out[:, : t + 1], what)
    assert _rows_differ(out_new, out)[t + 1 :].all(), "the perturbed tokens' own outputs should change"


# --------------------------------------------------------------------------- BLOCK-4


@pytest.mark.req("BLOCK-4")
@both_paths
@given(case=block_cases(), layer_idx=st.integers(0, 3), offset=st.integers(0, 20), dtype=float_dtypes)
def test_every_block_maps_btd_to_btd(device, case, layer_idx, offset, dtype):
    assume(case.seq != case.d_model and case.n_heads != case.n_kv_heads)
    x = case.input(device, dtype)
    with torch.no_grad():
        outs = {
            "MLPBlock": case.module("mlp", layer_idx, device, dtype)(x),
            "AttentionBlock": case.module("attention", layer_idx, device, dtype)(x, offset),
            "TransformerBlock": case.module("transformer", layer_idx, device, dtype)(x, offset),
            "TransformerStack": case.module("stack", layer_idx, device, dtype)(x, offset),
        }
    for name, out in outs.items():
        assert out.shape == x.shape, f"{name} maps {tuple(x.shape)} to {tuple(out.shape)}"
        assert out.dtype == dtype and out.device == x.device, f"{name}: {out.dtype} on {out.device}"
        assert torch.isfinite(out).all(), f"{name} produced non-finite values"


# --------------------------------------------------------------------------- BLOCK-5


@pytest.mark.req("BLOCK-5")
@given(case=block_cases(), layer_idx=st.integers(0, 3))
def test_sinks_are_zero_initialised_per_head_parameters(device, case, layer_idx):
    cfg = replace(case.config(), use_sinks=True)
    block = AttentionBlock(cfg, layer_idx).to(device)
    assert isinstance(block.sinks, torch.nn.Parameter) and block.sinks.requires_grad
    assert block.sinks.shape == (cfg.n_heads,)
    assert_exactly_zero(block.sinks.detach(), "freshly built sinks")
    assert any(p is block.sinks for p in block.parameters()), "sinks are not a registered parameter"
    no_sinks = AttentionBlock(replace(cfg, use_sinks=False), layer_idx)
    assert no_sinks.sinks is None
    assert "sinks" not in dict(no_sinks.named_parameters())


@pytest.mark.req("BLOCK-5")
@both_paths
@given(case=block_cases(sinks=True), layer_idx=st.integers(0, 1), data=st.data())
def test_block_sinks_reach_the_softmax(device, case, layer_idx, data):
    """A large sink on one head changes the output; huge sinks on every head silence attention."""
    head = data.draw(st.integers(0, case.n_heads - 1), label="head")
    block = case.module("attention", layer_idx, device, torch.float64)
    x = case.input(device, torch.float64)
    with torch.no_grad():
        before = block(x)
        block.sinks[head] = 10.0
        after = block(x)
        assert not torch.equal(after, before), f"setting sink[{head}] = 10 left the block output unchanged"
        block.sinks.fill_(1000.0)  # every real weight becomes exp(score - 1000) = 0
        assert_exactly_equal(block(x), x, "AttentionBlock with every sink at 1000")


@pytest.mark.req("BLOCK-5", "SINK-1")
@both_paths
@given(
    case=block_cases(sinks=True), layer_idx=st.integers(0, 1), offset=st.integers(0, 20), dtype=float_dtypes
)
def test_minus_infinite_sinks_equal_a_block_without_sinks(device, case, layer_idx, offset, dtype):
    with_sinks = case.module("attention", layer_idx, device, dtype)
    without = AttentionBlock(replace(case.config(), use_sinks=False), layer_idx)
    without = without.to(device=device, dtype=dtype)
    state = {name: p for name, p in with_sinks.state_dict().items() if name != "sinks"}
    without.load_state_dict(state)
    x = case.input(device, dtype)
    with torch.no_grad():
        with_sinks.sinks.fill_(float("-inf"))
        assert_close(with_sinks(x, offset), without(x, offset), "sinks = -inf vs use_sinks=False")


# --------------------------------------------------------------------------- ERR-2

VALID = {"d_model": 8, "n_heads": 4, "n_kv_heads": 2, "head_dim": 4, "n_layers": 2, "window": 3}


@pytest.mark.req("ERR-2")
@pytest.mark.parametrize(
    "bad",
    [
        {"n_heads": 3, "n_kv_heads": 2},
        {"n_heads": 2, "n_kv_heads": 4},
        {"head_dim": 3},
        {"head_dim": 5},
        {"window": 0},
        {"window": -2},
        {"d_model": 0},
        {"n_heads": 0},
        {"n_kv_heads": 0},
        {"head_dim": 0},
        {"n_layers": 0},
        {"d_model": -8},
        {"n_layers": -1},
        {"ffn_hidden": 0},
        {"window_layers": "odd"},
        {"window_layers": "none"},
        {"activation": "tanh"},
        {"activation": "SwiGLU"},
        {"norm_eps": -1e-6},
        {"norm_eps": float("nan")},
        {"rope_base": 0.0},
        {"rope_base": -10000.0},
        {"vocab_size": 0},
        {"dropout": 1.0},
        {"dropout": -0.1},
        {"rotary_dim": 3},
        {"rotary_dim": 0},
        {"rotary_dim": 6},
        {"rotary_dim": True},
        {"qk_norm": 1},
    ],
    ids=lambda bad: ",".join(f"{k}={v}" for k, v in bad.items()),
)
def test_model_config_rejects_bad_settings(bad):
    """ValueError at construction, naming each offending field and its value."""
    ModelConfig(**VALID)  # the base is valid: the override alone is at fault
    with pytest.raises(ValueError, match=message_names(*bad, *(repr(v) for v in bad.values()))):
        ModelConfig(**{**VALID, **bad})


SIZE_FIELDS = ("d_model", "n_heads", "n_kv_heads", "head_dim", "n_layers", "ffn_hidden", "vocab_size")


@pytest.mark.req("ERR-2")
def test_model_config_accepts_the_edges_of_its_ranges():
    """Nothing narrower than the stated ranges is refused: eps 0, a tiny base, width 1, and
    ffn_hidden=None (the default width)."""
    ModelConfig(**{**VALID, "norm_eps": 0.0, "rope_base": 1e-3, "ffn_hidden": 1, "vocab_size": 1})
    ModelConfig(**{**VALID, "dropout": 0.0})
    ModelConfig(**{**VALID, "dropout": 0.99})
    ModelConfig(**{**VALID, "ffn_hidden": None})
    ModelConfig(**{**VALID, "rotary_dim": 2})
    ModelConfig(**{**VALID, "rotary_dim": 4, "qk_norm": True})  # rotary_dim = head_dim: all of it


@pytest.mark.req("ERR-2")
@pytest.mark.parametrize(
    ("name", "value"),
    [
        (name, value)
        for name in SIZE_FIELDS
        for value in (True, False, 4.0, 2.5, "4", None)
        if not (name == "ffn_hidden" and value is None)  # None asks for the default width
    ],
    ids=repr,
)
def test_model_config_rejects_bool_and_non_int_sizes(name, value):
    """A bool is not a size (True would pass as 1), nor is a float or a string, however integral."""
    with pytest.raises(ValueError, match=message_names(name, repr(value))):
        ModelConfig(**{**VALID, name: value})


@pytest.mark.req("ERR-2")
@given(n_heads=st.integers(1, 12), n_kv_heads=st.integers(1, 12), half=st.integers(1, 4), odd=st.booleans())
def test_model_config_checks_head_counts_and_head_dim(n_heads, n_kv_heads, half, odd):
    head_dim = 2 * half + (1 if odd else 0)
    kwargs = {**VALID, "n_heads": n_heads, "n_kv_heads": n_kv_heads, "head_dim": head_dim}
    if n_heads % n_kv_heads != 0:
        with pytest.raises(ValueError, match=message_names(f"n_heads={n_heads}", f"n_kv_heads={n_kv_heads}")):
            ModelConfig(**kwargs)
    elif odd:
        with pytest.raises(ValueError, match=message_names(f"head_dim={head_dim}")):
            ModelConfig(**kwargs)
    else:
        AttentionBlock(ModelConfig(**kwargs))  # builds


@pytest.mark.req("ERR-2")
@given(
    name=st.sampled_from(["d_model", "n_heads", "n_kv_heads", "head_dim", "n_layers", "window"]),
    value=st.integers(-5, 0),
)
def test_model_config_rejects_non_positive_sizes(name, value):
    with pytest.raises(ValueError, match=message_names(name, value)):
        ModelConfig(**{**VALID, name: value})


@pytest.mark.req("ERR-2")
@pytest.mark.parametrize("value", [1.5, 2.0, True, False, "3", [2]], ids=repr)
def test_model_config_rejects_a_window_of_the_wrong_type(value):
    """A window of the wrong type is a TypeError at construction, not at the first forward pass:
    a bool is not a window (True would pass as 1), nor is a float or a string, however integral.
    The message names the field, the value's type and the value."""
    with pytest.raises(TypeError, match=message_names("window", type(value).__name__, repr(value))):
        ModelConfig(**{**VALID, "window": value})


@pytest.mark.req("ERR-2", "BLOCK-4")
@pytest.mark.parametrize("kind", MODULE_KINDS)
@pytest.mark.parametrize("shape", [(5, 8), (1, 5, 9), (1, 5, 7), (1, 5, 8, 1), (8,)])
def test_blocks_reject_inputs_of_the_wrong_shape(device, kind, shape):
    case = BlockCase(8, 4, 2, 4, 2, 3, "even", True, "swiglu", 1, 5, 0)
    module = case.module(kind, 0, device, torch.float32)
    with pytest.raises(ValueError, match=message_names("x", shape)):
        module(torch.zeros(shape, device=device))


# --------------------------------------------------------------------------- MASK-4


@pytest.mark.req("MASK-4")
@given(window=st.one_of(st.none(), st.integers(1, 64)), n_layers=st.integers(1, 8))
def test_window_sits_on_even_layers_under_the_default_schedule(window, n_layers):
    cfg = ModelConfig(**{**VALID, "window": window, "n_layers": n_layers})
    assert cfg.window_layers == "even", "the default schedule should be 'even'"
    for i in range(n_layers):
        expected = window if i % 2 == 0 else None
        assert AttentionBlock(cfg, i).window == expected, f"layer {i}"
    stack = TransformerStack(cfg)
    expected = [window if i % 2 == 0 else None for i in range(n_layers)]
    assert [blk.attn.window for blk in stack.blocks] == expected
    every = TransformerStack(replace(cfg, window_layers="all"))
    assert [blk.attn.window for blk in every.blocks] == [window] * n_layers


@pytest.mark.req("MASK-4")
@both_paths
@given(case=block_cases(), window=st.integers(1, 3), data=st.data())
def test_a_block_built_without_a_layer_index_is_layer_0(device, case, window, data):
    """AttentionBlock(cfg) and TransformerBlock(cfg) behave exactly as layer 0 (windowed under
    the default schedule), and not as layer 1 (full attention) once T exceeds the window."""
    seq = data.draw(st.integers(window + 1, 8), label="seq")
    case = replace(case, window=window, window_layers="even", seq=seq)
    cfg = case.config()
    x = case.input(device, torch.float64)
    for kind, make in (("AttentionBlock", AttentionBlock), ("TransformerBlock", TransformerBlock)):
        default = randomize_(make(cfg).to(device=device, dtype=torch.float64), case.seed + 1)
        layer0 = make(cfg, 0).to(device=device, dtype=torch.float64)
        layer1 = make(cfg, 1).to(device=device, dtype=torch.float64)
        layer0.load_state_dict(default.state_dict())
        layer1.load_state_dict(default.state_dict())
        with torch.no_grad():
            out, out0, out1 = default(x), layer0(x), layer1(x)
        assert_exactly_equal(out, out0, f"{kind}(cfg) vs {kind}(cfg, 0)")
        assert not torch.equal(out0, out1), f"{kind}: layer 0 (W={window}) and layer 1 agree at T={seq}"


@pytest.mark.req("MASK-4", "MASK-2")
@both_paths
@given(case=block_cases(), window=st.integers(1, 4), data=st.data(), dtype=float_dtypes)
def test_only_even_layers_forget_tokens_older_than_the_window(device, case, window, data, dtype):
    """Change tokens 0..p: an even layer's output at t >= p+W is untouched, an odd layer's is not."""
    seq = data.draw(st.integers(window + 1, 10), label="seq")
    p = data.draw(st.integers(0, seq - 1 - window), label="p")
    case = replace(case, window=window, window_layers="even", seq=seq)
    even = case.module("attention", 0, device, dtype)
    odd = AttentionBlock(case.config(), 1).to(device=device, dtype=dtype)
    odd.load_state_dict(even.state_dict())
    assert even.window == window and odd.window is None
    x = case.input(device, dtype)
    x_new = x.clone()
    x_new[:, : p + 1] = noise_like(x[:, : p + 1], case.seed + 2)
    with torch.no_grad():
        even_changed = _rows_differ(even(x_new), even(x))
        odd_changed = _rows_differ(odd(x_new), odd(x))
    assert not even_changed[p + window :].any(), (
        f"even layer (W={window}): outputs {torch.nonzero(even_changed).flatten().tolist()} changed "
        f"after editing tokens 0..{p}; tokens from {p + window} on should not see them"
    )
    assert even_changed[p : p + window].all(), f"even layer (W={window}) misses tokens inside its window"
    assert odd_changed[p:].all(), "odd layer (full attention) ignores old tokens"
