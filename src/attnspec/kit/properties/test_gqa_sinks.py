"""Grouped-query attention (GQA-1) and attention sinks (SINK-1, SINK-2).

GQA: KV head g serves query heads g*r .. g*r + r - 1 (repeat_interleave, not tile).
Sinks: one logit per query head, an extra softmax column that only takes mass away.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from attnspec.kit.asserts import (
    Conditioning,
    assert_close,
    assert_exactly_equal,
    assert_golden,
    assert_rounded_once,
)
from attnspec.kit.loading import current
from attnspec.kit.references import declared_attention, seen_keys, sink_probability
from attnspec.kit.strategies import (
    LOW_PRECISION,
    AttnCase,
    attn_cases,
    declared_dtypes,
    fit_to_target,
    float_dtypes,
    full_precision,
    precise_dtype,
    seeds,
)

sdpa = current().attention  # the implementation under test (--impl; impl/ by default)
attend = current().outputs  # (output of a plain call, weights of a return_weights call)
PRECISE = precise_dtype()  # float64, or float32 for a target that computes through float32

# Every property here runs on each attention path (explicit and tiled; see conftest.py): outputs come
# from plain calls (impl tiles long causal attention), weights from return_weights calls.
pytestmark = pytest.mark.usefixtures("attention_path")


# --- local helpers -------------------------------------------------------------------------


@st.composite
def grouped_cases(draw: st.DrawFn, **kwargs):
    """attn_cases with at least 2 KV heads and at least 2 query heads per KV head: the shapes
    where interleaved (g = h // r) and tiled (g = h % Hkv) grouping disagree."""
    case = draw(attn_cases(**kwargs))
    n_kv = draw(st.integers(2, 3))
    return fit_to_target(replace(case, n_kv_heads=n_kv, n_heads=n_kv * draw(st.integers(2, 3))))


# --- GQA-1 ---------------------------------------------------------------------------------


@pytest.mark.req("GQA-1")
@pytest.mark.needs("gqa", "weights")
@given(case=attn_cases(), dtype=st.sampled_from(full_precision()))
def test_gqa_equals_mha_on_repeat_interleaved_kv(case, dtype, device):
    q, k, v, sinks = case.make(device, dtype)
    r = case.group
    kwargs = case.keywords(sinks, device)
    out, w = attend(q, k, v, **kwargs)
    k_mha, v_mha = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
    out_mha, w_mha = attend(q, k_mha, v_mha, **kwargs)
    what = f"Hq={case.n_heads}, Hkv={case.n_kv_heads}, W={case.window}, {dtype}"
    assert_close(out, out_mha, f"GQA output vs MHA on repeat_interleaved K/V ({what})")
    assert_close(w, w_mha, f"GQA weights vs MHA on repeat_interleaved K/V ({what})")


@pytest.mark.req("GQA-1")
@pytest.mark.needs("gqa")
@pytest.mark.law("head_free")
@given(case=attn_cases())
def test_each_query_head_reads_kv_head_h_div_r(case, device):
    # Per-head decomposition: query head h is single-head attention with KV head h // r and
    # sink h.  With Hkv == Hq this says MHA is H independent heads; with Hkv == 1 it is MQA.
    q, k, v, sinks = case.make(device, PRECISE)
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    for h in range(case.n_heads):
        g = h // case.group
        sink_h = None if sinks is None else sinks[h : h + 1]
        one = (t[:, head : head + 1].contiguous() for t, head in ((q, h), (k, g), (v, g)))
        single = sdpa(*one, **case.keywords(sink_h, device))
        assert_close(out[:, h : h + 1], single, f"query head {h} vs single-head attention on KV head {g}")


@pytest.mark.req("GQA-1")
@pytest.mark.law("head_free")
@given(case=attn_cases(), dtype=st.sampled_from(full_precision()))
def test_mha_when_hkv_equals_hq(case, dtype, device):
    # Hkv == Hq: r = 1, each query head has its own KV head; permuting the heads of q, k, v
    # and the sinks together permutes the output heads.
    case = replace(case, n_kv_heads=case.n_heads)
    q, k, v, sinks = case.make(device, dtype)
    perm = torch.arange(case.n_heads - 1, -1, -1, device=device)  # reverse the heads
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    sinks_p = None if sinks is None else sinks[perm]
    out_p = sdpa(q[:, perm], k[:, perm], v[:, perm], **case.keywords(sinks_p, device))
    # Close, not bitwise: a head computed at another batch-of-heads index may round differently.
    assert_close(out_p, out[:, perm], f"MHA (Hq=Hkv={case.n_heads}) output after reversing the heads")


@pytest.mark.req("GQA-1")
@pytest.mark.needs("gqa")
@given(case=attn_cases(), dtype=st.sampled_from(full_precision()))
def test_mqa_single_kv_head_serves_every_query_head(case, dtype, device):
    case = replace(case, n_kv_heads=1)
    q, k, v, sinks = case.make(device, dtype)
    shape_k = (case.batch, case.n_heads, case.tk, case.head_dim)
    shape_v = (case.batch, case.n_heads, case.tk, case.dv)
    kwargs = case.keywords(sinks, device)
    out = sdpa(q, k, v, **kwargs)
    k_all, v_all = k.expand(shape_k).contiguous(), v.expand(shape_v).contiguous()
    out_mha = sdpa(q, k_all, v_all, **kwargs)
    what = f"MQA (Hq={case.n_heads}, Hkv=1) vs the KV head given to every query head"
    assert_close(out, out_mha, what)


@pytest.mark.req("GQA-1")
@pytest.mark.needs("gqa")
@given(case=grouped_cases(), dtype=st.sampled_from(full_precision()))
def test_head_to_group_mapping_is_interleaved_not_tiled(case, dtype, device):
    # Make every value of KV head g equal to g + 1 and use no sinks: a query head's output is
    # then exactly its KV head's label (weights sum to 1).  Interleaved grouping gives
    # h // r + 1; tiled grouping (k.repeat(1, r, 1, 1)) would give h % Hkv + 1.
    case = replace(case, use_sinks=False)
    q, k, _, _ = case.make(device, dtype)
    labels = torch.arange(1, case.n_kv_heads + 1, dtype=dtype, device=device)
    v = labels.view(1, -1, 1, 1).expand(case.batch, case.n_kv_heads, case.tk, case.dv).contiguous()
    kwargs = case.keywords(None, device)
    out = sdpa(q, k, v, **kwargs)
    expected_group = torch.arange(case.n_heads, device=device) // case.group + 1
    expected = expected_group.to(dtype).view(1, -1, 1, 1).expand_as(out)
    sees = seen_keys(q, k, **kwargs).any(dim=-1, keepdim=True).to(device)  # a row that sees no key is 0
    expected = torch.where(sees, expected, 0.0)
    assert_close(out, expected, f"KV head serving each query head (Hq={case.n_heads}, Hkv={case.n_kv_heads})")


# --- SINK-1 --------------------------------------------------------------------------------


@pytest.mark.req("SINK-1")
@pytest.mark.needs("sinks", "weights")
@given(case=attn_cases(), dtype=st.sampled_from(full_precision()))
def test_minus_inf_sinks_are_no_sinks(case, dtype, device):
    q, k, v, _ = case.make(device, dtype)
    sinks = torch.full((case.n_heads,), -math.inf, dtype=dtype, device=device)
    out, w = attend(q, k, v, **case.keywords(sinks, device))
    plain_out, plain_w = attend(q, k, v, **case.keywords(None, device))
    assert not bool(torch.isnan(out).any()), "NaN with sinks of -inf"
    assert_close(out, plain_out, f"output with -inf sinks vs no sinks (W={case.window}, {dtype})")
    assert_close(w, plain_w, f"weights with -inf sinks vs no sinks (W={case.window}, {dtype})")


@pytest.mark.req("SINK-1")
@pytest.mark.needs("sinks")
@given(case=attn_cases(), seed=seeds)
def test_heads_with_a_minus_inf_sink_attend_as_without_sinks(case, seed, device):
    # Heads whose sink is -inf attend exactly as without sinks, whatever the other heads' sinks.
    case = replace(case, use_sinks=True)
    q, k, v, sinks = case.make(device, PRECISE)
    gen = torch.Generator().manual_seed(seed)
    off = (torch.rand(case.n_heads, generator=gen) < 0.5).to(device)
    sinks = sinks.masked_fill(off, -math.inf)
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    plain = sdpa(q, k, v, **case.keywords(None, device))
    heads = torch.nonzero(off).flatten().tolist()
    assert_close(out[:, off], plain[:, off], f"heads {heads} with a -inf sink vs no sinks")


def dtype_pairs() -> list[tuple[torch.dtype, torch.dtype]]:
    """(activations, sinks): every ordered pair of two dtypes the target declares."""
    return list(itertools.permutations(declared_dtypes(), 2))


@pytest.mark.req("ATTN-10", "ATTN-4", "ATTN-11")
@pytest.mark.needs("sinks", "weights", "float64")
@example(
    case=fit_to_target(
        AttnCase(
            batch=1,
            n_heads=2,
            n_kv_heads=1,
            tq=4,
            tk=5,
            head_dim=2,
            dv=3,
            window=None,
            use_sinks=True,
            seed=0,
        )
    ),
    dtypes=(torch.float32, torch.float64),
)
@given(case=attn_cases(), dtypes=st.sampled_from(dtype_pairs()))
def test_sinks_held_in_another_dtype(case, dtypes, device):
    # Sinks are a parameter and may be kept in another float dtype than the activations (float32
    # or float64 sinks beside half-precision q, k, v): output and weights keep q's dtype and
    # agree with the float64 oracle as in ATTN-4.  The pairs are drawn from what the target
    # declares, so nothing is rejected (an assume() over all pairs failed Hypothesis's health
    # check for a target without "float16").
    q_dtype, sinks_dtype = dtypes
    if not set(dtypes) <= set(float_dtypes(device)):
        pytest.skip(f"{dtypes}: a matmul in one of them does not run on {device}")
    case = replace(case, use_sinks=True)
    q, k, v, _ = case.make(device, q_dtype)
    _, _, _, sinks = case.make(device, sinks_dtype)
    kwargs = case.keywords(sinks, device)
    out, w = attend(q, k, v, **kwargs)
    what = f"q/k/v {q_dtype}, sinks {sinks_dtype}, W={case.window}"
    assert out.dtype == q_dtype and w.dtype == q_dtype, f"output {out.dtype}, weights {w.dtype} ({what})"
    golden_out, golden_w = declared_attention(q, k, v, **kwargs)
    cond = Conditioning(q, k, v, **kwargs)
    if q_dtype in LOW_PRECISION:
        # "float16": scored in float32 beside sinks of any dtype, rounded once (ATTN-11's promise)
        ref_out, ref_w = declared_attention(q, k, v, dtype=torch.float32, **kwargs)
        assert_rounded_once(out, golden_out, ref_out, f"output vs the oracle ({what})", cond)
        assert_rounded_once(w, golden_w, ref_w, f"weights vs the oracle ({what})", cond, "weights")
        return
    if q_dtype == torch.float64:
        ref_out, ref_w = golden_out, golden_w
    else:
        ref_out, ref_w = declared_attention(q, k, v, dtype=q_dtype, **kwargs)
    assert_golden(out, golden_out, ref_out, f"output vs the oracle ({what})", cond)
    assert_golden(w, golden_w, ref_w, f"weights vs the oracle ({what})", cond, "weights")


# --- SINK-2 --------------------------------------------------------------------------------


@pytest.mark.req("SINK-2")
@pytest.mark.needs("sinks", "weights")
@given(case=attn_cases(), dtype=st.sampled_from(full_precision()))
def test_sink_scales_real_weights_by_one_minus_p_sink(case, dtype, device):
    case = replace(case, use_sinks=True)
    q, k, v, sinks = case.make(device, dtype)
    out, w = attend(q, k, v, **case.keywords(sinks, device))
    plain_out, plain_w = attend(q, k, v, **case.keywords(None, device))
    allowed = seen_keys(q, k, **case.keywords(None, device))
    keep = (1 - sink_probability(q, k, sinks, allowed)).unsqueeze(-1).to(device)  # (B, Hq, Tq, 1)
    what = f"with sinks = sink-free * (1 - p_sink) (W={case.window}, {dtype})"
    assert_close(w, (plain_w.double() * keep).to(dtype), f"weights {what}")
    assert_close(out, (plain_out.double() * keep).to(dtype), f"output {what}")


@pytest.mark.req("SINK-2")
@pytest.mark.needs("sinks", "weights", "float64")
@given(case=attn_cases(), delta=st.floats(0.25, 4.0), data=st.data())
def test_raising_a_sink_lowers_that_heads_weights_only(case, delta, data, device):
    case = replace(case, use_sinks=True)
    h = data.draw(st.integers(0, case.n_heads - 1), label="head whose sink rises")
    q, k, v, sinks = case.make(device, PRECISE)
    raised = sinks.clone()
    raised[h] += delta
    out, w = attend(q, k, v, **case.keywords(sinks, device))
    out2, w2 = attend(q, k, v, **case.keywords(raised, device))

    others = [i for i in range(case.n_heads) if i != h]
    assert_exactly_equal(w2[:, others], w[:, others], f"weights of heads {others} after raising sink {h}")
    assert_exactly_equal(out2[:, others], out[:, others], f"outputs of heads {others} after raising sink {h}")

    allowed = seen_keys(q, k, **case.keywords(sinks, device))  # (B, Hq, Tq, Tk)
    head = allowed[:, h].to(device)
    before, after = w[:, h][head], w2[:, h][head]  # visible weights of head h
    assert bool((after <= before).all()), f"raising sink {h} by {delta:.3g} raised a real weight"
    # Strictly lower wherever the sink's share is large enough to show in float64.
    p_sink = sink_probability(q, k, sinks, allowed)[:, h].to(device)  # (B, Tq)
    visible = p_sink.unsqueeze(-1).expand(-1, -1, case.tk)[head] > 1e-12
    assert bool((after[visible] < before[visible]).all()), (
        f"raising sink {h} by {delta:.3g} left a real weight of that head unchanged"
    )
