"""Whole attention layers of any target (--impl): projections, RoPE, attention, output projection.

The target builds a layer from a LayerSpec (src/attnspec/protocol/layers.py) and reports its parameters;
the oracle layer built from those parameters must agree with it (LAYER-1), naming the convention
when the layer follows another one (interleaved RoPE pairs, a window of W+-1, tile-style GQA).
Causality (BLOCK-3) and the shift invariance that RoPE gives (ROPE-4) hold for every layer, and a
layer with its own KV cache ("cache") decodes chunk by chunk to the same result (CACHE-1).
Each property draws the layer's dtype from every dtype the target declares: float32, float64
with "float64", fp16/bf16 with "float16" where they run on the device (float_dtypes).
impl's own AttentionBlock is the "impl" target's layer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import pytest
import torch
from hypothesis import given, reject
from hypothesis import strategies as st

from attnspec.kit.asserts import (
    assert_equal_within_golden,
    assert_exactly_equal,
    assert_layer_golden,
    assert_score_mod_applied,
)
from attnspec.kit.conventions import cache_ignored
from attnspec.kit.loading import current
from attnspec.kit.references import declared_layer_keywords
from attnspec.kit.strategies import (
    built_layer,
    chunk_lists,
    float_dtypes,
    noise_like,
    precise_dtype,
    seeded_randn,
    seeds,
    split_sequence,
)
from attnspec.kit.target_checks import impossible_specs, raised_by_the_kit
from attnspec.protocol.targets import Layer, LayerKind, LayerSpec
from attnspec.specs.oracle import attention_layer_oracle

TARGET = current()
# A layer's mods are evaluated at its tokens' positions from 0, whatever its offset: they must depend on
# distances alone (laws.py), as every mod of a layer with RoPE's offsets does.
pytestmark = [pytest.mark.needs("layer"), pytest.mark.law("relative")]


@dataclass(frozen=True)
class LayerCase:
    spec: LayerSpec
    batch: int
    seq: int
    offset: int

    def build(self, device: torch.device) -> tuple[Layer, torch.Tensor]:
        """The target's layer on ``device`` in the spec's dtype and an input (B, T, D) of unit scale."""
        spec = replace(self.spec, device=device)
        x = seeded_randn(spec.seed + 1, self.batch, self.seq, spec.d_model, device=device, dtype=spec.dtype)
        return built_layer(spec), x


@st.composite
def layer_cases(
    draw: st.DrawFn,
    dtypes: tuple[torch.dtype, ...],
    min_seq: int = 1,
    max_seq: int = 10,
    evicting: bool = False,
    shift_free: bool = False,
) -> LayerCase:
    """A tiny layer within the target's capabilities: GQA groups, a window, sinks, a RoPE base
    away from 10000 (head_dim >= 4 makes it matter), a position offset, and one of ``dtypes``
    (float_dtypes(device): the test draws the case, since only it sees the device).  An
    ``evicting`` case with a window has one shorter than the sequence (min_seq >= 2), so that a
    cache must drop keys; its other draws are full layers.  Sizes run from a pair of features a head
    to the ones models use (heads of 64, widths of a few hundred).  D is a
    multiple of Hq (transformers' configs insist) but drawn apart from Hq * d, unless the target
    ties the two (tied_width).  The white box of a module that declares a schedule is built as one of
    its kinds of layer (``shift_free``: a kind whose mask depends on distances alone, not chunks), a
    causal or windowed kind with any window the target takes.  Every spec is fitted to what the target
    declares it takes (Target.fitted)."""
    n_kv_heads = draw(st.integers(1, 2))
    group = draw(st.integers(1, 3)) if TARGET.supports("gqa") else 1
    n_heads = n_kv_heads * group
    n_kv_heads = n_kv_heads if TARGET.supports("gqa") else n_heads
    seq = draw(st.integers(min_seq, max_seq))
    kinds = [kind for kind in dict.fromkeys(TARGET.schedule) if not (shift_free and kind.mask == "chunk")]
    kind = draw(st.sampled_from(kinds)) if kinds else None
    spec = LayerSpec(
        d_model=n_heads * draw(st.sampled_from([2, 3, 4, 6, 16, 48])),  # up to a few hundred features
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=draw(st.sampled_from([2, 4, 6, 8, 16, 64])),
        window=draw(st.one_of(st.integers(1, seq - 1 if evicting else seq + 1), st.none()))
        if TARGET.supports("window")
        else None,
        sinks=draw(st.booleans()) if TARGET.supports("sinks") else False,
        base=draw(st.sampled_from([10000.0, 10.0, 500000.0])),
        seed=draw(seeds),
        dtype=draw(st.sampled_from(dtypes)),
    )
    if kind is not None:
        spec = of_kind(spec, kind)
    offset = draw(st.integers(0, 64)) if TARGET.supports("offset") else 0
    return LayerCase(TARGET.fitted(spec), draw(st.integers(1, 2)), seq, offset)


def of_kind(spec: LayerSpec, kind: LayerKind) -> LayerSpec:
    """The drawn ``spec`` as a layer of ``kind``: a causal or windowed kind keeps the drawn window where
    the target takes windows (the kind then says which: window W or causal), any other kind has its own
    mask and no window; the kind's RoPE base where it has one."""
    if kind.mask in ("causal", "window") and TARGET.supports("window"):
        mask = LayerKind("causal") if spec.window is None else LayerKind("window", spec.window)
        kind = replace(kind, mask=mask.mask, size=mask.size)
    base = spec.base if kind.base is None else kind.base
    return replace(spec, kind=kind, window=kind.window, base=base)


def oracle_keywords(layer: Layer, case: LayerCase) -> dict:
    """attention_layer_oracle's keywords for the case (references.declared_layer_keywords), once the
    layer's reports are checked against its spec."""
    layer.check_reports(case.spec)
    return declared_layer_keywords(TARGET, layer, case.spec, case.offset)


def lowp_oracle(x: torch.Tensor, keywords: dict, dtype: torch.dtype) -> torch.Tensor:
    """The oracle layer in the tested dtype, its RoPE angle table included: transformers builds
    p * base^(-2i/d) in float32, which at position 34 is already ~2e-6 rad off, and the policy's
    bound must price that in (impl's own block keeps the strict bound of BLOCK-1)."""
    return attention_layer_oracle(x, **keywords, dtype=dtype, angles_in_dtype=True)


TIED_HINT = (
    ": a layer as wide as its heads times their size declares tied_width = True (CONVENTIONS.md: Layers)"
)


def check_spec(layer: Layer, spec: LayerSpec) -> None:
    """The parameters the target reports have the sizes the spec asked for."""
    width, kv_width = spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    shapes = {"wq": (width, spec.d_model), "wk": (kv_width, spec.d_model), "wv": (kv_width, spec.d_model)}
    shapes["wo"] = (spec.d_model, width)
    tied = "" if TARGET.tied_width else TIED_HINT
    for name, shape in shapes.items():
        found = tuple(getattr(layer, name).shape)
        hint = tied if name == "wq" and found == (spec.d_model, spec.d_model) else ""
        assert found == shape, f"{name} is {found}, expected {shape} for {spec}{hint}"
    assert (layer.sinks is not None) == spec.sinks, f"sinks {layer.sinks} for a spec with sinks={spec.sinks}"


# --------------------------------------------------------------------------- LAYER-1


@pytest.mark.req("BLOCK-4")
@given(data=st.data())
def test_a_layer_keeps_the_shape_dtype_and_device_of_its_input(device, data):
    case = data.draw(layer_cases(float_dtypes(device)), label="case")
    layer, x = case.build(device)
    with torch.no_grad():
        out = layer.forward(x, case.offset)
    assert isinstance(out, torch.Tensor), f"{TARGET.name} layer returned {type(out).__name__}, not a tensor"
    got, wanted = (out.shape, out.dtype, out.device), (x.shape, x.dtype, x.device)
    assert got == wanted, f"{TARGET.name} layer's output is {got}, its input {wanted}"


@pytest.mark.req("LAYER-1")
@given(data=st.data())
def test_layer_matches_the_oracle_layer(device, data):
    case = data.draw(layer_cases(float_dtypes(device)), label="case")
    layer, x = case.build(device)
    check_spec(layer, case.spec)
    with torch.no_grad():
        out = layer.forward(x, case.offset)
    keywords = oracle_keywords(layer, case)
    golden = attention_layer_oracle(x, **keywords)
    ref_lowp = lowp_oracle(x, keywords, case.spec.dtype)
    assert out.dtype == x.dtype and out.device == x.device, f"out is {out.dtype} on {out.device}"
    assert_layer_golden(out, golden, ref_lowp, f"{TARGET.name} layer vs oracle layer", x, **keywords)


# --------------------------------------------------------------------------- SCORE-1


SPREADS = (1.0, 4.0, 16.0, 64.0)  # the std of the parameters, until the layer's logits bend its score_mod


@pytest.mark.req("SCORE-1")
@given(data=st.data())
def test_a_layers_declared_score_mod_is_applied_where_it_bends_the_logits(device, data):
    """The layer's parameters drawn wider and wider (randomize_(module, spec) follows spec.std) until
    its logits are large enough for the declared score_mod (the target's, or the one the layer reads
    from its own parameters) to change the oracle's output: a soft-cap of 50 on logits of a few units
    changes nothing.  The output then follows the oracle with the mod, not without it."""
    case = data.draw(layer_cases((precise_dtype(),)), label="case")
    for std in SPREADS:
        spread = replace(case, spec=replace(case.spec, std=std))
        layer, x = spread.build(device)
        keywords = oracle_keywords(layer, spread)
        if keywords["score_mod"] is None:
            pytest.skip(f"--impl {TARGET.name} declares no score_mod, and its layer reports none")
        golden = attention_layer_oracle(x, **keywords)
        unmodified = attention_layer_oracle(x, **{**keywords, "score_mod": None})
        if (golden - unmodified).abs().max().item() > 1e-3 * max(1.0, golden.abs().max().item()):
            break
        if std == SPREADS[0]:
            first = layer.wq.detach().clone()
        elif torch.equal(layer.wq.detach(), first):
            pytest.skip(
                f"--impl {TARGET.name}'s layer draws the same parameters whatever spec.std: build it with "
                "randomize_(module, spec), so that the kit can reach logits its score_mod changes"
            )
    else:
        reject()  # logits the mod leaves alone even at the widest spread: another case
    with torch.no_grad():
        out = layer.forward(x, case.offset)
    what = f"{TARGET.name} layer, parameters of std {std:g} ({spread.spec})"
    assert_score_mod_applied(out, golden, unmodified, what, keywords["score_mod"])


# --------------------------------------------------------------------------- LAYER-2


@pytest.mark.req("LAYER-2")
@pytest.mark.needs("sizes")
@given(data=st.data())
def test_a_layer_refuses_sizes_it_cannot_compute_when_built(device, data):
    case = data.draw(layer_cases((torch.float32,)), label="case")
    spec = replace(case.spec, device=device)
    bad = impossible_specs(TARGET, spec, built_layer(spec).rope)
    if not bad:
        pytest.skip(f"{TARGET.name} declares sizes, but its declarations leave no impossible size to build")
    for what, impossible in bad.items():
        try:
            TARGET.layer(impossible)
        except Exception as error:  # the layer refused: the point, unless the kit raised it
            assert not raised_by_the_kit(error), (
                f"{TARGET.name} built a layer for {what} ({impossible}); its parameters then fit no "
                f"spec: {error}"
            )
        else:
            raise AssertionError(f"{TARGET.name} built a layer for {what} ({impossible}) without an error")


# --------------------------------------------------------------------------- CACHE-1


@pytest.mark.req("CACHE-1")
@pytest.mark.law("causal")
@pytest.mark.needs("cache")
@given(data=st.data())
def test_decoding_through_the_layers_own_cache_matches_the_oracle(device, data):
    """A prompt, then chunks of any sizes (one token at a time included) through the layer's own
    KV cache give what the oracle gives over the whole sequence: keys and values cached in order,
    RoPE and the mask continuing at each chunk's offset, a windowed cache evicting only what the
    window no longer sees (the sequence runs well past the window)."""
    case = replace(
        data.draw(layer_cases(float_dtypes(device), min_seq=2, max_seq=14, evicting=True), label="case"),
        offset=0,
    )
    chunks = split_sequence(case.seq, data.draw(chunk_lists, label="sizes"))
    layer, x = case.build(device)
    with torch.no_grad():
        out = layer.decode(x, chunks)
    keywords = oracle_keywords(layer, case)
    golden = attention_layer_oracle(x, **keywords)
    ref_lowp = lowp_oracle(x, keywords, case.spec.dtype)
    assert out.shape == x.shape and out.dtype == x.dtype, f"decode returned {tuple(out.shape)} {out.dtype}"
    what = f"{TARGET.name} layer decoded in chunks {chunks} vs oracle layer"
    ignored = functools.partial(cache_ignored, out, x, chunks, layer.forward, "forward(chunk, offset)")
    assert_layer_golden(out, golden, ref_lowp, what, x, explain=ignored, **keywords)


# --------------------------------------------------------------------------- BLOCK-3


@pytest.mark.req("BLOCK-3")
@pytest.mark.law("causal")
@given(data=st.data())
def test_future_tokens_never_change_earlier_layer_outputs(device, data):
    case = data.draw(layer_cases(float_dtypes(device), min_seq=2), label="case")
    t = data.draw(st.integers(0, case.seq - 2), label="t")
    layer, x = case.build(device)
    x_new = x.clone()
    x_new[:, t + 1 :] = noise_like(x[:, t + 1 :], case.spec.seed + 2)
    with torch.no_grad():
        out, out_new = layer.forward(x, case.offset), layer.forward(x_new, case.offset)
    what = f"layer outputs 0..{t} after changing later tokens"
    assert_exactly_equal(out_new[:, : t + 1], out[:, : t + 1], what)


# --------------------------------------------------------------------------- ROPE-4


@pytest.mark.req("ROPE-4")
@pytest.mark.needs("offset")
@given(data=st.data(), shift=st.integers(1, 64))
def test_shifting_every_position_leaves_the_layer_output_unchanged(device, data, shift):
    case = data.draw(layer_cases(float_dtypes(device), shift_free=True), label="case")
    layer, x = case.build(device)
    with torch.no_grad():
        out, shifted = layer.forward(x, case.offset), layer.forward(x, case.offset + shift)
    keywords = oracle_keywords(layer, case)
    lowp_out, lowp_shifted = (
        lowp_oracle(x, {**keywords, "offset": at}, case.spec.dtype)
        for at in (case.offset, case.offset + shift)
    )
    what = f"layer output at positions {case.offset + shift}.. vs {case.offset}.."
    golden = attention_layer_oracle(x, **keywords)
    assert_equal_within_golden(shifted, out, golden, lowp_shifted, lowp_out, what)
