"""Cross-attention layers of any target ("cross"): queries from x, keys and values from a context.

The target builds a layer from a LayerSpec whose ``context_dim`` is the context's width and reports its
parameters (targets.Layer: ``wk`` and ``wv`` read the context, (H*d, Dc)); ``forward(x, offset,
context=c)`` attends from x (B, T, D) to the context c (B, Tc, Dc), T and Tc drawn apart, every query
seeing every context token, with no positions (an encoder-decoder's cross-attention, T5's and Whisper's,
``nn.MultiheadAttention(kdim=, vdim=)``).  The oracle built from the reported parameters must agree
(LAYER-3); the queries do not see each other, and the context has no order (LAYER-4).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnspec.kit.asserts import assert_equal_within_golden, assert_golden
from attnspec.kit.loading import current
from attnspec.kit.references import cross_keywords
from attnspec.kit.strategies import built_layer, float_dtypes, seeded_randn, seeds
from attnspec.protocol.targets import Layer, LayerSpec
from attnspec.specs.oracle import cross_attention_layer_oracle

TARGET = current()
pytestmark = pytest.mark.needs("cross")


# what the cross oracle reads of a Layer: no RoPE, window, sinks or q/k norm in a cross layer
@dataclass(frozen=True)
class CrossCase:
    spec: LayerSpec
    batch: int
    seq: int
    context: int

    def build(self, device) -> tuple[Layer, torch.Tensor, torch.Tensor]:
        """The target's cross layer, an input (B, T, D) and a context (B, Tc, Dc), of unit scale."""
        spec = self.spec
        x = seeded_randn(spec.seed + 1, self.batch, self.seq, spec.d_model, device=device, dtype=spec.dtype)
        width = spec.context_dim or spec.d_model
        c = seeded_randn(spec.seed + 2, self.batch, self.context, width, device=device, dtype=spec.dtype)
        return built_layer(spec), x, c


@st.composite
def cross_cases(draw: st.DrawFn, dtypes: tuple[torch.dtype, ...]) -> CrossCase:
    """A tiny cross layer: GQA groups where the target takes them, a context longer or shorter than
    the input and, as often as not, of another width."""
    n_kv_heads = draw(st.integers(1, 2))
    group = draw(st.integers(1, 3)) if TARGET.supports("gqa") else 1
    n_heads = n_kv_heads * group
    n_kv_heads = n_kv_heads if TARGET.supports("gqa") else n_heads
    spec = LayerSpec(
        d_model=n_heads * draw(st.sampled_from([2, 3, 4, 16, 48])),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=draw(st.sampled_from([2, 4, 6, 8, 16, 64])),
        seed=draw(seeds),
        dtype=draw(st.sampled_from(dtypes)),
        context_dim=draw(st.sampled_from([None, 3, 10, 96])),
    )
    batch, seq, context = draw(st.integers(1, 2)), draw(st.integers(1, 8)), draw(st.integers(1, 12))
    return CrossCase(TARGET.fitted(spec), batch, seq, context)


def run(layer: Layer, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return layer.forward(x, 0, context=context)


def oracle(layer: Layer, case: CrossCase, x: torch.Tensor, context: torch.Tensor, dtype=torch.float64):
    return cross_attention_layer_oracle(x, context, **cross_keywords(layer, case.spec), dtype=dtype)


# --------------------------------------------------------------------------- LAYER-3


@pytest.mark.req("LAYER-3")
@given(data=st.data())
def test_cross_attention_layer_matches_the_oracle(device, data):
    case = data.draw(cross_cases(float_dtypes(device)), label="case")
    layer, x, context = case.build(device)
    width = case.spec.context_dim or case.spec.d_model
    kv = (case.spec.n_kv_heads * case.spec.head_dim, width)
    assert tuple(layer.wk.shape) == kv and tuple(layer.wv.shape) == kv, (
        f"wk {tuple(layer.wk.shape)} and wv {tuple(layer.wv.shape)} for a context of width {width}: "
        f"expected {kv} (keys and values are projected from the context)"
    )
    assert not layer.rope, "a cross-attention layer reports rope=False: its context has no positions"
    out = run(layer, x, context)
    assert out.shape == x.shape and out.dtype == x.dtype, (
        f"out {tuple(out.shape)} {out.dtype} for x {x.shape}"
    )
    what = f"{TARGET.name} cross layer vs oracle ({case.seq} queries over a context of {case.context})"
    golden = oracle(layer, case, x, context)
    assert_golden(out, golden, oracle(layer, case, x, context, case.spec.dtype), what)


# --------------------------------------------------------------------------- LAYER-4


@pytest.mark.req("LAYER-4")
@given(data=st.data())
def test_queries_do_not_see_each_other_and_the_context_has_no_order(device, data):
    case = data.draw(cross_cases(float_dtypes(device)), label="case")
    layer, x, context = case.build(device)
    out, golden = run(layer, x, context), oracle(layer, case, x, context)
    lowp = oracle(layer, case, x, context, case.spec.dtype)
    if case.seq > 1:
        i = data.draw(st.integers(0, case.seq - 1), label="changed query")
        changed = x.clone()
        changed[:, i] = seeded_randn(case.spec.seed + 3, *x[:, i].shape, device=device, dtype=x.dtype) * 3 + 1
        others = [t for t in range(case.seq) if t != i]
        moved = run(layer, changed, context)
        lowp_moved = oracle(layer, case, changed, context, case.spec.dtype)
        what = f"the other queries' outputs after query {i} changed"
        assert_equal_within_golden(
            moved[:, others], out[:, others], golden[:, others], lowp_moved[:, others], lowp[:, others], what
        )
    order = list(data.draw(st.permutations(range(case.context)), label="order of the context"))
    shuffled = run(layer, x, context[:, order])
    lowp_shuffled = oracle(layer, case, x, context[:, order], case.spec.dtype)
    what = f"outputs with the context tokens in the order {order}"
    assert_equal_within_golden(shuffled, out, golden, lowp_shuffled, lowp, what)
