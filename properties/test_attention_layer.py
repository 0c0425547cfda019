"""Whole attention layers of any target (--impl): projections, RoPE, attention, output projection.

The target builds a layer from a LayerSpec (properties/targets.py) and reports its parameters;
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
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnspec.properties.conventions import cache_ignored
from attnspec.properties.declared import kit_mods
from attnspec.properties.hypothesis_helpers import (
    chunk_lists,
    float_dtypes,
    noise_like,
    seeded_randn,
    seeds,
    split_sequence,
)
from attnspec.properties.pytest_helpers import (
    assert_exactly_equal,
    assert_layer_golden,
    assert_shift_invariant,
)
from attnspec.properties.targets import Layer, LayerSpec, current
from attnspec.specs.oracle import attention_layer_oracle

TARGET = current()
KIT = Path(__file__).resolve().parent  # the kit's properties: an error raised here is not a refusal
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
        return TARGET.layer(spec), x


@st.composite
def layer_cases(
    draw: st.DrawFn,
    dtypes: tuple[torch.dtype, ...],
    min_seq: int = 1,
    max_seq: int = 10,
    evicting: bool = False,
) -> LayerCase:
    """A tiny layer within the target's capabilities: GQA groups, a window, sinks, a RoPE base
    away from 10000 (head_dim >= 4 makes it matter), a position offset, and one of ``dtypes``
    (float_dtypes(device): the test draws the case, since only it sees the device).  An
    ``evicting`` case with a window has one shorter than the sequence (min_seq >= 2), so that a
    cache must drop keys; its other draws are full layers.  D is a
    multiple of Hq (transformers' configs insist) but drawn apart from Hq * d, unless the target
    ties the two (tied_width)."""
    n_kv_heads = draw(st.integers(1, 2))
    group = draw(st.integers(1, 3)) if TARGET.supports("gqa") else 1
    n_heads, n_kv_heads = TARGET.head_counts(n_kv_heads * group, n_kv_heads)
    n_kv_heads = n_kv_heads if TARGET.supports("gqa") else n_heads
    seq = draw(st.integers(min_seq, max_seq))
    head_dim = TARGET.head_size(draw(st.sampled_from([2, 4, 6, 8])))
    width = n_heads * draw(st.sampled_from([2, 3, 4, 6]))
    spec = LayerSpec(
        d_model=TARGET.layer_width(n_heads, head_dim, width),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        window=draw(st.one_of(st.integers(1, seq - 1 if evicting else seq + 1), st.none()))
        if TARGET.supports("window")
        else None,
        sinks=draw(st.booleans()) if TARGET.supports("sinks") else False,
        base=draw(st.sampled_from([10000.0, 10.0, 500000.0])),
        seed=draw(seeds),
        dtype=draw(st.sampled_from(dtypes)),
    )
    offset = draw(st.integers(0, 64)) if TARGET.supports("offset") else 0
    return LayerCase(spec, draw(st.integers(1, 2)), seq, offset)


def oracle_keywords(layer: Layer, case: LayerCase) -> dict:
    """attention_layer_oracle's keywords: sizes, window, RoPE base from the spec, the target's declared
    mods, the rest from the layer."""
    spec = case.spec
    score_mod, mask_mod = kit_mods(TARGET, spec.n_heads, spec.n_kv_heads)
    return {
        "score_mod": score_mod,
        "mask_mod": mask_mod,
        **layer.reported(),
        "n_heads": spec.n_heads,
        "n_kv_heads": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "window": spec.window,
        "base": spec.base,
        "offset": case.offset,
    }


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


@pytest.mark.req("LAYER-1", "BLOCK-4")
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


# --------------------------------------------------------------------------- LAYER-2


def impossible_specs(spec: LayerSpec, rope: bool) -> dict[str, LayerSpec]:
    """What the layer of ``spec`` (valid) cannot be built as, by the target's declarations: Hq not a
    multiple of Hkv (with gqa), an odd head size (with RoPE, unless head_dims rules it out), a width
    that is not Hq times the head size (with tied_width)."""
    bad = {}
    if TARGET.supports("gqa") and not TARGET.heads:
        bad["3 query heads over 2 KV heads"] = replace(
            spec, n_heads=3, n_kv_heads=2, d_model=TARGET.layer_width(3, spec.head_dim, 3 * spec.head_dim)
        )
    if rope and not TARGET.head_dims:
        width = TARGET.layer_width(spec.n_heads, 3, spec.n_heads * 3)
        bad["a head size of 3 under RoPE"] = replace(spec, head_dim=3, d_model=width)
    if TARGET.tied_width:
        bad["a width of Hq * head size + 1"] = replace(spec, d_model=spec.n_heads * spec.head_dim + 1)
    return bad


def raised_by_the_kit(error: BaseException) -> bool:
    """Whether ``error`` came from the kit's own code (reading the parameters of a layer that was
    built), not from the target's."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(KIT)


@pytest.mark.req("LAYER-2")
@pytest.mark.needs("sizes")
@given(data=st.data())
def test_a_layer_refuses_sizes_it_cannot_compute_when_built(device, data):
    case = data.draw(layer_cases((torch.float32,)), label="case")
    spec = replace(case.spec, device=device)
    bad = impossible_specs(spec, TARGET.layer(spec).rope)
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
    case = data.draw(layer_cases(float_dtypes(device)), label="case")
    layer, x = case.build(device)
    with torch.no_grad():
        out, shifted = layer.forward(x, case.offset), layer.forward(x, case.offset + shift)
    keywords = oracle_keywords(layer, case)
    lowp_out, lowp_shifted = (
        lowp_oracle(x, {**keywords, "offset": at}, case.spec.dtype)
        for at in (case.offset, case.offset + shift)
    )
    what = f"layer output at positions {case.offset + shift}.. vs {case.offset}.."
    assert_shift_invariant(shifted, out, attention_layer_oracle(x, **keywords), lowp_shifted, lowp_out, what)
