"""The attention core: softmax(Q K^T * scale + M, sink) V with GQA, windows and sinks.

Laws of the weights (ATTN-1, -2, -3, -6), agreement with the float64 oracle and with torch's
own SDPA (ATTN-4, -5), symmetries and independences (ATTN-7, -8, -9), shapes (ATTN-10) and
gradients (GRAD-1).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from attnspec.kit.asserts import (
    Conditioning,
    assert_attention_golden,
    assert_close,
    assert_exactly_equal,
    assert_exactly_zero,
    assert_golden,
    assert_rounded_once,
    assert_score_mod_applied,
)
from attnspec.kit.loading import current
from attnspec.kit.references import (
    declared_attention,
    declared_keywords,
    declared_mask,
    declared_scores,
    dot_products,
    float_mask_attention,
    seen_keys,
    sink_probability,
)
from attnspec.kit.skips import require_dtype, second_device
from attnspec.kit.strategies import (
    FULL_PRECISION,
    LOW_PRECISION,
    AttnCase,
    attn_cases,
    blind_query_cases,
    causal_flags,
    declared_dtypes,
    distinct_attn_cases,
    fit_to_target,
    float_dtypes,
    full_precision,
    noise_like,
    precise_dtype,
    scales,
    seeds,
    spanning_tiles,
    unmasked_causal,
)
from attnspec.protocol.declared import mod_name
from attnspec.specs.oracle import attention_oracle

TARGET = current()  # the implementation under test (--impl; impl/ by default)
sdpa = TARGET.attention
PRECISE = precise_dtype()  # float64, or float32 for a target that computes through float32

# The properties that check outputs of causal attention run on each attention path of impl/
# (explicit and tiled; see conftest.py, which fails a test that claims the tiled path and never takes
# it).  impl returns weights only from the explicit path, so the laws of the weights alone, of
# non-causal attention and of queries that see no key (Tq > Tk) run once.
both_paths = pytest.mark.usefixtures("attention_path")

# --- local helpers -------------------------------------------------------------------------


def problem(case: AttnCase, dtype: torch.dtype, device: torch.device, causal: bool, scale: float | None):
    """(q, k, v, keyword arguments of the call) for ``case`` in ``dtype``: no window without the
    causal mask, the case's documents; skipped where the device or the target cannot run ``dtype``."""
    require_dtype(dtype, device)
    q, k, v, sinks = case.make(device, dtype)
    return q, k, v, case.keywords(sinks, device, causal=causal, scale=scale)


# (output, weights): the output of a plain call (impl's tiled path where it applies) and the weights
# of a return_weights=True call; weights is None when the target does not return them.
attend = TARGET.outputs


# --- ATTN-1: weights are a distribution (with the sink column) -----------------------------


@pytest.mark.req("ATTN-1")
@pytest.mark.needs("weights")
@given(case=st.one_of(attn_cases(max_t=8), blind_query_cases()), dtype=st.sampled_from(full_precision()))
def test_weights_and_sink_sum_to_one(case, dtype, device):
    q, k, v, sinks = case.make(device, dtype)
    kwargs = case.keywords(sinks, device)
    _, w = sdpa(q, k, v, **kwargs, return_weights=True)
    assert not bool(torch.isnan(w).any()), "NaN in the attention weights"
    assert bool((w >= 0).all()), f"negative attention weight {w.min().item():.3e}"

    allowed = seen_keys(q, k, **kwargs)  # (B, Hq, Tq, Tk) under the declaration
    p_sink = sink_probability(q, k, sinks, allowed)
    total = w.double().sum(dim=-1).cpu() + p_sink  # (B, Hq, Tq)
    live = allowed.any(dim=-1) | (sinks is not None)  # rows that see a key or a sink
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    err = (total[live] - 1).abs()
    worst = err.max().item() if err.numel() else 0.0
    assert worst <= tol, f"real weights + p_sink differ from 1 by {worst:.3e} (> {tol:g}) in {dtype}"
    assert_exactly_zero(w[~live.to(w.device)], "weights of rows that see neither a key nor a sink")


# --- ATTN-2: masked weights are exactly zero ------------------------------------------------


@pytest.mark.req("ATTN-2")
@pytest.mark.needs("weights")
@given(case=attn_cases(), data=st.data())
def test_masked_weights_are_exactly_zero(case, data, device):
    dtype = data.draw(st.sampled_from(float_dtypes(device)), label="dtype")
    q, k, v, sinks = case.make(device, dtype)
    kwargs = case.keywords(sinks, device)
    _, w = sdpa(q, k, v, **kwargs, return_weights=True)
    allowed = declared_mask(q, k, **kwargs).to(device)  # (B, Hq, Tq, Tk) under the declaration
    hides = "future / out-of-window keys"
    if TARGET.mask_mod is not None:
        hides = f"keys its mask_mod {mod_name(TARGET.mask_mod)} hides"
    elif case.documents is not None and any(len(row) > 1 for row in case.documents):
        hides += " or other documents' keys"
    what = f"weights on {hides} (W={case.window}, {dtype})"
    masked = w.masked_fill(allowed, 0)  # the weights no query may have, where they sit; 0 elsewhere
    if torch.count_nonzero(masked):
        # name the largest by its (batch, head, query, key), not by its index among the masked weights
        size = masked.double().abs().nan_to_num(nan=float("inf")).cpu()
        batch, head, query, key = torch.nonzero(size == size.max())[0].tolist()
        why = hidden_because(case, kwargs.get("document_ids"), batch, query, key)
        raise AssertionError(
            f"{what}: {int(torch.count_nonzero(masked))} of {int((~allowed).sum())} "
            f"masked weights are not exactly zero; the largest, {w[batch, head, query, key].item():.3e}, at "
            f"(batch, head, query, key) = ({batch}, {head}, {query}, {key}): key {key} is {why}"
        )


def hidden_because(case: AttnCase, document_ids, batch: int, query: int, key: int) -> str:
    """Why the declaration hides ``key`` from ``query`` (of batch element ``batch``), in words."""
    position = case.tk - case.tq + query  # bottom-right alignment
    if TARGET.mask_mod is not None:
        return f"hidden from query {query} (position {position}) by the mask_mod {mod_name(TARGET.mask_mod)}"
    if document_ids is not None and 0 <= position < case.tk:
        docs = document_ids[batch].tolist()
        if docs[key] != docs[position]:
            return f"in document {docs[key]}, query {query} (position {position}) in {docs[position]}"
    if key > position:
        return f"after query {query}'s position {position}"
    keys = f"{case.window} key{'s' * (case.window != 1)}"
    return f"outside query {query}'s window (the {keys} up to position {position})"


@pytest.mark.req("ATTN-2", "MASK-1", "MASK-2")
@pytest.mark.needs("weights")
@given(case=attn_cases())
def test_weight_support_is_exactly_the_mask(case, device):
    # In float64 no visible weight underflows for these magnitudes, so the non-zero pattern of
    # the weights must be the declared mask: masking too little and too much both fail.  In float32
    # (a target without "float64") a correct softmax rounds a visible weight below float32's range
    # to 0 (a score gap of ~90, which head_dim 1 at magnitude 3 reaches): where the float64 oracle's
    # weight is that small (with room for rounding), a visible weight may be 0.
    q, k, v, sinks = case.make(device, PRECISE)
    kwargs = case.keywords(sinks, device)
    _, w = sdpa(q, k, v, **kwargs, return_weights=True)
    allowed = seen_keys(q, k, **kwargs).expand(w.shape)
    support = (w != 0).cpu()
    _, golden_w = declared_attention(q, k, v, **kwargs)
    small = torch.finfo(torch.float64).tiny if PRECISE == torch.float64 else torch.finfo(PRECISE).tiny * 2**8
    support |= allowed & (golden_w < small)
    assert_exactly_equal(support, allowed, f"support of the weights (W={case.window})")


# --- ATTN-3: queries that see no key ----------------------------------------------------------


@pytest.mark.req("ATTN-3")
@pytest.mark.needs("blind")
@given(case=blind_query_cases(), data=st.data())
def test_blind_queries_give_exact_zero_not_nan(case, data, device):
    dtype = data.draw(st.sampled_from(float_dtypes(device)), label="dtype")
    q, k, v, sinks = case.make(device, dtype)
    out, w = attend(q, k, v, **case.keywords(sinks, device))
    assert not bool(torch.isnan(out).any()), "NaN output with fully masked rows"
    blind = case.tq - case.tk  # queries 0 .. blind-1 sit at negative positions
    assert_exactly_zero(out[:, :, :blind], f"output of the {blind} queries that see no key")
    if w is not None:
        assert not bool(torch.isnan(w).any()), "NaN weights with fully masked rows"
        assert_exactly_zero(w[:, :, :blind], f"weights of the {blind} queries that see no key")
    assert bool(torch.isfinite(out[:, :, blind:]).all()), "non-finite output on rows that see keys"


@pytest.mark.req("ATTN-3")
@pytest.mark.needs("blind", "grad")
@given(case=blind_query_cases(max_t=6), dtype=st.sampled_from(full_precision()), seed=seeds)
def test_blind_queries_have_finite_gradients(case, dtype, seed, device):
    q, k, v, sinks = (t if t is None else t.requires_grad_(True) for t in case.make(device, dtype))
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    out.backward(noise_like(out, seed))
    for name, t in (("q", q), ("k", k), ("v", v), ("sinks", sinks)):
        if t is not None:
            assert t.grad is not None, f"no gradient reached {name}"
            assert bool(torch.isfinite(t.grad).all()), f"non-finite gradient for {name}, fully masked rows"
    blind = case.tq - case.tk
    assert_exactly_zero(q.grad[:, :, :blind], "gradient of the queries that see no key (output constant 0)")


# --- ATTN-4: the float64 oracle ---------------------------------------------------------------


@pytest.mark.req("ATTN-4")
@both_paths
@pytest.mark.parametrize("dtype", [*FULL_PRECISION, *LOW_PRECISION], ids=str)
@example(case=spanning_tiles(), causal=True, scale=None)
# Causal decode without a window or sinks: where top-left and bottom-right alignment differ.
@example(case=fit_to_target(AttnCase(1, 2, 1, 3, 5, 4, 4, None, False, seed=3)), causal=True, scale=None)
@given(
    case=st.one_of(attn_cases(max_t=8), blind_query_cases(max_t=6)),
    causal=causal_flags(),
    scale=scales(0.1, 2.0),
)
def test_matches_the_oracle(dtype, case, causal, scale, device):
    q, k, v, kwargs = problem(case, dtype, device, causal, scale)
    out, w = attend(q, k, v, **kwargs)
    golden_out, golden_w = declared_attention(q, k, v, **kwargs)  # float64 from the same (rounded) inputs
    if dtype == torch.float64:
        ref_out, ref_w = golden_out, golden_w
    else:
        ref_out, ref_w = declared_attention(q, k, v, dtype=dtype, **kwargs)
    assert out.dtype == dtype, f"output dtype {out.dtype} for {dtype} inputs"
    what = f"vs the oracle ({dtype}, causal={causal}, W={kwargs['window']}, scale={scale})"
    assert_attention_golden(out, golden_out, ref_out, f"output {what}", q, k, v, **kwargs)
    if w is not None:
        assert_golden(w, golden_w, ref_w, f"weights {what}", Conditioning(q, k, v, **kwargs), "weights")


# --- SCORE-1: a declared score_mod is applied --------------------------------------------------


@pytest.mark.req("SCORE-1")
@given(case=attn_cases(max_t=8), spread=st.sampled_from([4.0, 16.0, 64.0]))
def test_a_declared_score_mod_is_applied_where_it_bends_the_logits(case, spread, device):
    """Queries ``spread`` times larger than unit scale reach logits where a soft-cap bends them (a cap of 50
    leaves logits of a few units alone): the output follows the oracle with the declared score_mod, not
    without it; a case where the mod changes nothing is drawn again."""
    if TARGET.score_mod is None:
        pytest.skip(f"--impl {TARGET.name} declares no score_mod")
    dtype = precise_dtype()
    q, k, v, sinks = case.make(device, dtype)
    q = q * spread
    kwargs = case.keywords(sinks, device)
    golden = declared_attention(q, k, v, **kwargs)[0]
    unmodified = attention_oracle(q, k, v, **{**declared_keywords(q, k, **kwargs), "score_mod": None})[0]
    assume((golden - unmodified).abs().max().item() > 1e-3 * max(1.0, golden.abs().max().item()))
    out, _ = attend(q, k, v, **kwargs)
    scale = kwargs["scale"] if kwargs["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    largest = (dot_products(q, k) * scale).abs().max().item()
    what = f"queries at {spread:g} times unit scale, logits up to {largest:.3g} ({case})"
    assert_score_mod_applied(out, golden, unmodified, what, TARGET.score_mod)


# --- ATTN-5: torch's own SDPA -----------------------------------------------------------------


def sdpa_mask(q, k, kwargs: dict) -> torch.Tensor:
    """(B, Hq, Tq, Tk) float64 on q's device: the declaration as torch SDPA's additive float mask, its
    score_mod's bias where a key is visible (the "additive" law) and -inf where it is hidden."""
    scale = kwargs["scale"] if kwargs["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    bias = declared_scores(q, k, kwargs["scale"]) - (dot_products(q, k) * scale).cpu()
    return bias.masked_fill(~declared_mask(q, k, **kwargs), -math.inf).to(q.device)


@pytest.mark.req("ATTN-5")
@pytest.mark.law("additive")
@both_paths
@pytest.mark.parametrize("dtype", [*FULL_PRECISION, *LOW_PRECISION], ids=str)
@example(case=spanning_tiles(), causal=True, scale=None)
@given(case=attn_cases(), causal=causal_flags(), scale=scales(0.1, 2.0))
def test_matches_torch_sdpa(dtype, case, causal, scale, device):
    # torch's SDPA with the declared mask (and a score_mod's bias) as its float mask, sinks as one extra
    # zero key: the same problem computed by torch's kernels
    q, k, v, kwargs = problem(case, dtype, device, causal, scale)
    out = sdpa(q, k, v, **kwargs)
    mask, sinks = sdpa_mask(q, k, kwargs), kwargs["sinks"]
    double = None if sinks is None else sinks.double()
    golden = float_mask_attention(q.double(), k.double(), v.double(), mask, sinks=double, scale=scale)
    ref = golden if dtype == torch.float64 else float_mask_attention(q, k, v, mask, sinks=sinks, scale=scale)
    what = f"output vs torch SDPA ({dtype}, causal={causal}, W={kwargs['window']})"
    assert_golden(out, golden, ref, what, Conditioning(q, k, v, **kwargs))


# --- ATTN-6: the scale ------------------------------------------------------------------------


@pytest.mark.req("ATTN-6")
@pytest.mark.needs("weights", "float64")
@given(case=attn_cases(), causal=causal_flags(), scale=scales(0.05, 1.0))
def test_log_weight_differences_are_scaled_dot_products(case, causal, scale, device):
    # log w_j - log w_r = f(q.k_j * s) - f(q.k_r * s) for the scale s and the declared score_mod f
    # (the identity without one), against a reference key r each query sees (its first).
    q, k, v, sinks = case.make(device, PRECISE)
    kwargs = case.keywords(sinks, device, causal=causal, scale=scale)
    _, w = sdpa(q, k, v, **kwargs, return_weights=True)
    expected_scale = 1.0 / math.sqrt(case.head_dim) if scale is None else scale
    allowed = seen_keys(q, k, **kwargs)  # (B, Hq, Tq, Tk)
    live = allowed.any(dim=-1, keepdim=True)
    reference = allowed.int().argmax(dim=-1, keepdim=True)  # the first key each query sees
    scores = declared_scores(q, k, expected_scale)
    log_w = torch.log(w.double().cpu())
    lhs = log_w - log_w.gather(-1, reference)
    rhs = scores - scores.gather(-1, reference)
    err = (lhs - rhs)[allowed & live].abs()
    worst = err.max().item() if err.numel() else 0.0
    mod = "" if TARGET.score_mod is None else f" through the score_mod {mod_name(TARGET.score_mod)}"
    assert worst <= 1e-9, (
        f"log w_j - log w_r differs from (q.k_j - q.k_r)*{expected_scale:.6g}{mod} by {worst:.3e} "
        f"(scale={'default 1/sqrt(d)' if scale is None else scale})"
    )


@pytest.mark.req("ATTN-6")
@pytest.mark.needs("weights")
@pytest.mark.law("permutable", "plain_scores")
@pytest.mark.parametrize("head_dim", sorted({TARGET.head_size(d) for d in (16, 64, 256)}))
def test_unit_variance_inputs_give_unit_variance_scores(head_dim, device):
    # N independent heads over two keys: D = log w_1 - log w_0 = s_1 - s_0 of each head's first
    # query (two queries, Tq = Tk, and dv = d: a target without "decode" or "value_dim" runs it).
    # With the 1/sqrt(d) scale each score has variance 1, so Var(D) = 2.  The sample variance of
    # N iid D's has relative standard deviation sqrt((2 + 6/d) / N) (D's excess kurtosis is 6/d);
    # the bound is 5 of those, on a fixed seed: deterministic, no flakes.
    n = 4096
    heads = TARGET.head_counts(n, n)[0]  # N heads, or batches of the head count a target declares
    shape = (n // heads, heads, 2, head_dim)
    gen = torch.Generator().manual_seed(20240611 + head_dim)
    q = torch.randn(*shape, generator=gen, dtype=torch.float64).to(device, PRECISE)
    k = torch.randn(*shape, generator=gen, dtype=torch.float64).to(device, PRECISE)
    v = torch.zeros(*shape, dtype=PRECISE, device=device)
    _, w = sdpa(q, k, v, causal=unmasked_causal(), return_weights=True)
    diff = (torch.log(w[..., 0, 1]) - torch.log(w[..., 0, 0])).flatten().cpu()
    per_score_variance = diff.var().item() / 2
    n = diff.numel()
    bound = 5 * math.sqrt((2 + 6 / head_dim) / n)
    assert abs(per_score_variance - 1) <= bound, (
        f"d={head_dim}: recovered scores have variance {per_score_variance:.4f}, expected 1 +- {bound:.3f} "
        f"(variance d={head_dim} means no scale, 1/d means scaled by 1/d)"
    )


# --- ATTN-7: permutation symmetries without a mask --------------------------------------------


@pytest.mark.req("ATTN-7")
@pytest.mark.law("permutable")
@given(case=attn_cases(windows=False, documents=False), seed=seeds)
def test_permuting_keys_and_values_together_changes_nothing(case, seed, device):
    q, k, v, sinks = case.make(device, PRECISE)
    perm = torch.randperm(case.tk, generator=torch.Generator().manual_seed(seed)).to(device)
    causal = unmasked_causal()
    out, w = attend(q, k, v, causal=causal, sinks=sinks)
    out_p, w_p = attend(q, k[:, :, perm], v[:, :, perm], causal=causal, sinks=sinks)
    assert_close(out_p, out, f"output after permuting keys+values by {perm.tolist()}")
    if w is not None:
        assert_close(w_p, w[..., perm], f"weights after permuting keys+values by {perm.tolist()}")


@pytest.mark.req("ATTN-7")
@pytest.mark.law("permutable")
@given(case=attn_cases(windows=False, documents=False), seed=seeds)
def test_permuting_queries_permutes_output_rows(case, seed, device):
    q, k, v, sinks = case.make(device, PRECISE)
    perm = torch.randperm(case.tq, generator=torch.Generator().manual_seed(seed)).to(device)
    out = sdpa(q, k, v, causal=unmasked_causal(), sinks=sinks)
    out_p = sdpa(q[:, :, perm], k, v, causal=unmasked_causal(), sinks=sinks)
    assert_close(out_p, out[:, :, perm], f"output rows after permuting queries by {perm.tolist()}")


# --- ATTN-8: batch independence ---------------------------------------------------------------


@pytest.mark.req("ATTN-8")
@both_paths
@given(
    case=attn_cases(),
    which=st.sampled_from(["q", "k", "v", "qkv"]),
    seed=seeds,
    dtype=st.sampled_from(full_precision()),
    data=st.data(),
)
def test_batch_elements_are_independent(case, which, seed, dtype, data, device):
    if TARGET.max_batch == 1:
        pytest.skip(f"--impl {TARGET.name} declares max_batch = 1: a batch of one has no other element")
    case = replace(case, batch=max(case.batch, 2))
    b = data.draw(st.integers(0, case.batch - 1), label="changed batch element")
    q, k, v, sinks = case.make(device, dtype)
    changed = {"q": q.clone(), "k": k.clone(), "v": v.clone()}
    for n, name in enumerate("qkv"):
        if name in which:
            changed[name][b] = noise_like(changed[name][b], seed + n)
    kwargs = case.keywords(sinks, device)
    out, w = attend(q, k, v, **kwargs)
    q2, k2, v2 = changed["q"], changed["k"], changed["v"]
    out2, w2 = attend(q2, k2, v2, **kwargs)
    others = [i for i in range(case.batch) if i != b]
    what = f"batch elements {others} after changing {which}[{b}]"
    assert_exactly_equal(out2[others], out[others], f"outputs of {what}")
    if w is not None:
        assert_exactly_equal(w2[others], w[others], f"weights of {what}")


# --- ATTN-9: prefix invariance ----------------------------------------------------------------


@pytest.mark.req("ATTN-9")
@pytest.mark.law("causal")
@both_paths
@given(
    case=attn_cases(self_attention=True, min_tq=2),
    which=st.sampled_from(["q", "k", "v", "qkv"]),
    seed=seeds,
    data=st.data(),
)
def test_future_positions_do_not_change_the_prefix(case, which, seed, data, device):
    dtype = data.draw(st.sampled_from(float_dtypes(device)), label="dtype")
    t = data.draw(st.integers(0, case.tq - 2), label="last unchanged position t")
    q, k, v, sinks = case.make(device, dtype)
    changed = {"q": q.clone(), "k": k.clone(), "v": v.clone()}
    for n, name in enumerate("qkv"):
        if name in which:
            changed[name][:, :, t + 1 :] = noise_like(changed[name][:, :, t + 1 :], seed + n) * 3
    kwargs = case.keywords(sinks, device)
    out, w = attend(q, k, v, **kwargs)
    q2, k2, v2 = changed["q"], changed["k"], changed["v"]
    out2, w2 = attend(q2, k2, v2, **kwargs)
    what = f"positions <= {t} after changing {which} at positions > {t} (W={case.window}, {dtype})"
    assert_exactly_equal(out2[:, :, : t + 1], out[:, :, : t + 1], f"outputs at {what}")
    if w is not None:
        assert_exactly_equal(w2[:, :, : t + 1], w[:, :, : t + 1], f"weights at {what}")


# --- ATTN-16: packed sequences ----------------------------------------------------------------


def document_spans(case: AttnCase, row: int) -> list[tuple[int, int]]:
    """(first key, one past the last) of each document of batch row ``row`` (AttnCase.document_ids)."""
    ids = case.document_ids()[row].tolist()
    edges = [j for j in range(1, case.tk) if ids[j] != ids[j - 1]]
    return list(zip([0, *edges], [*edges, case.tk], strict=True))


@pytest.mark.req("ATTN-16")
@pytest.mark.needs("documents")
@pytest.mark.law("relative")
@both_paths
@example(case=fit_to_target(replace(spanning_tiles(), documents=((2, 1, 5, 2),))))
@given(case=attn_cases(max_t=10))
def test_each_packed_document_is_attended_as_if_alone(case, device):
    # Scores and mask that depend on distances alone (RoPE-style, ALiBi, windows, causal): the queries of
    # a document see its keys as if it were the only sequence, at positions from 0.  A boundary off by
    # one, or a document that sees its predecessor, moves its first rows.
    q, k, v, sinks = case.make(device, PRECISE)
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    first = case.tk - case.tq  # the position of query 0
    for row in range(case.batch):
        for start, end in document_spans(case, row):
            lo = max(start, first)  # the document's first query
            if lo >= end:
                continue  # no query in it
            alone = replace(case, batch=1, tq=end - lo, tk=end - start, documents=None)
            queries = q[row : row + 1, :, lo - first : end - first].contiguous()
            keys, values = (t[row : row + 1, :, start:end].contiguous() for t in (k, v))
            got = sdpa(queries, keys, values, **alone.keywords(sinks, device))
            what = f"rows of document {start}..{end - 1} in row {row} vs that document alone (Tq={case.tq})"
            assert_close(out[row : row + 1, :, lo - first : end - first], got, what)


# --- ATTN-10: shapes --------------------------------------------------------------------------


@pytest.mark.req("ATTN-10")
@both_paths
@given(case=distinct_attn_cases(), data=st.data())
def test_output_and_weight_shapes(case, data, device):
    dtype = data.draw(st.sampled_from(float_dtypes(device)), label="dtype")
    q, k, v, sinks = case.make(device, dtype)
    kwargs = case.keywords(sinks, device)
    out = sdpa(q, k, v, **kwargs)
    out_w, w = attend(q, k, v, **kwargs)
    expected_out = (case.batch, case.n_heads, case.tq, case.dv)
    expected_w = (case.batch, case.n_heads, case.tq, case.tk)
    assert isinstance(out, torch.Tensor), f"without return_weights the result is a {type(out).__name__}"
    assert tuple(out.shape) == expected_out, f"output shape {tuple(out.shape)}, (B,Hq,Tq,dv)={expected_out}"
    assert tuple(out_w.shape) == expected_out, f"output shape {tuple(out_w.shape)} with return_weights"
    results = [("output", out)]
    if w is not None:
        assert tuple(w.shape) == expected_w, f"weights shape {tuple(w.shape)}, (B,Hq,Tq,Tk)={expected_w}"
        results.append(("weights", w))
    for name, t in results:
        assert t.dtype == dtype, f"{name} dtype {t.dtype} for {dtype} inputs"
        assert t.device == q.device, f"{name} on {t.device}, inputs on {q.device}"


@pytest.mark.req("ATTN-10")
@both_paths
@example(case=spanning_tiles(), causal=True, dtype=torch.float32)
@given(
    case=distinct_attn_cases(),
    causal=causal_flags(),
    dtype=st.sampled_from(declared_dtypes()),
)
def test_output_and_weights_stay_on_the_device_of_q(case, causal, dtype, device):
    # On another device than the run's: every mask, score and sink tensor must be made on q's device,
    # and the results keep q's device, dtype and the (B,Hq,Tq,dv) / (B,Hq,Tq,Tk) shapes.  "meta" is a
    # second device in every torch build (shapes and dtypes, no data), so this runs without a GPU for a
    # target that can run there; one that reads values from tensors (.item()) needs a real second
    # device (skips.second_device).
    other = second_device(device)
    if dtype not in float_dtypes(other) and other.type != "meta":
        pytest.skip(f"{dtype}: its matmul does not run on {other}")
    q, k, v, sinks = case.make(other, dtype)
    out, w = attend(q, k, v, **case.keywords(sinks, other, causal=causal))
    results = [("output", out, (case.batch, case.n_heads, case.tq, case.dv))]
    if w is not None:
        results.append(("weights", w, (case.batch, case.n_heads, case.tq, case.tk)))
    for name, t, shape in results:
        assert t.device == q.device, f"{name} on {t.device}, inputs on {q.device} (causal={causal})"
        assert t.dtype == dtype, f"{name} dtype {t.dtype} for {dtype} inputs"
        assert tuple(t.shape) == shape, f"{name} shape {tuple(t.shape)}, expected {shape}"


# --- ATTN-11: half precision is scored in float32 ----------------------------------------------

FP16_MAX = torch.finfo(torch.float16).max  # 65504


@st.composite
def fp16_overflow_cases(draw: st.DrawFn) -> tuple[AttnCase, int]:
    """A small attention problem with head_dim 64 or 256 (values of at most 4 features where the target
    has "value_dim") and a count of "outlier" features."""
    case = draw(attn_cases(max_t=6))
    # 1/sqrt(d) a power of two (1/8, 1/16), so that the scaled logits stay on the grid (see below)
    head_dim = TARGET.head_size(draw(st.sampled_from([64, 256])))
    dv = min(case.dv, 4) if TARGET.supports("value_dim") else head_dim
    case = replace(case, batch=1, head_dim=head_dim, dv=dv, magnitude=1.0)
    return case, draw(st.sampled_from([1, 4, 16]))


def fp16_spanning_tiles() -> tuple[AttnCase, int]:
    """spanning_tiles() with head_dim 64 and 4 outliers: an explicit example that takes impl's tiled
    path in every profile (20 derandomized examples need not draw a causal case with Tq > 3)."""
    case = spanning_tiles()
    head_dim = TARGET.head_size(64)
    return replace(case, head_dim=head_dim, dv=case.dv if TARGET.supports("value_dim") else head_dim), 4


@pytest.mark.req("ATTN-11")
@pytest.mark.needs("float16", "weights")
@both_paths
@example(case_outliers=fp16_spanning_tiles())
@given(case_outliers=fp16_overflow_cases())
def test_fp16_dot_products_beyond_the_fp16_range(case_outliers, device):
    # A few outlier features of size a shared by every query and key (like the massive
    # activations of real models) push every unscaled q.k past 65504, while the other features
    # keep the softmax spread out.  In fp16 the scores would be inf and the output NaN; scored
    # in float32 they stay finite and agree with the float64 oracle (on the same fp16 inputs)
    # within the fp16 floor.  The inputs lie on a 1/8 grid, so every product and partial sum of
    # q.k (< 2^18) is exact in float32 whatever order a matmul sums in: what is measured is the
    # float32 scoring the requirement promises, not the summation order of the BLAS.  So is the
    # default scale, 1/sqrt(d) for d = 64 or 256: 1/sqrt(128) would round every scaled product.
    require_dtype(torch.float16, device)
    case, n_outliers = case_outliers
    q, k, v, sinks = case.make("cpu", torch.float64)
    q, k = (torch.round(t * 8) / 8 for t in (q, k))
    a = math.ceil(math.sqrt(FP16_MAX / n_outliers)) + 8  # n * a^2 > 65504 with room to spare
    q[..., :n_outliers] = a
    k[..., :n_outliers] = a
    q, k, v, sinks = (
        None if t is None else t.to(device=device, dtype=torch.float16) for t in (q, k, v, sinks)
    )
    kwargs = case.keywords(sinks, device)
    dots = dot_products(q, k).cpu()[declared_mask(q, k, **kwargs)]  # none where a mask_mod hides all
    assert not dots.numel() or dots.min().item() > FP16_MAX, (
        f"the inputs must overflow fp16: smallest q.k {dots.min().item():.0f}"
    )

    out, w = attend(q, k, v, **kwargs)
    what = f"fp16, d={case.head_dim}, {n_outliers} outliers of {a}, W={case.window}"
    assert bool(torch.isfinite(out).all()), f"non-finite output ({what}): the scores overflowed"
    assert bool(torch.isfinite(w).all()), f"non-finite weights ({what}): the scores overflowed"
    golden_out, golden_w = declared_attention(q, k, v, **kwargs)
    # The requirement's promise, scored in float32 and rounded once: the oracle scored in float32 (in
    # fp16 it overflows), and the conditioning of logits in the thousands, which a correct float32
    # formulation rounds at their magnitude (scale * log2 e folded in, for one).
    ref_out, ref_w = declared_attention(q, k, v, dtype=torch.float32, **kwargs)
    cond = Conditioning(q, k, v, **kwargs)
    assert_rounded_once(out, golden_out, ref_out, f"output vs the oracle ({what})", cond)
    assert_rounded_once(w, golden_w, ref_w, f"weights vs the oracle ({what})", cond, "weights")


@pytest.mark.req("ATTN-11")
@pytest.mark.needs("float16")
@both_paths
@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
@example(case=spanning_tiles(), causal=True, scale=None)
@given(case=attn_cases(), causal=causal_flags(), scale=scales(0.1, 2.0))
def test_half_precision_is_the_float32_result_rounded_once(dtype, case, causal, scale, device):
    # "Scored and normalised in float32" for bf16 as for fp16: the output (and the weights) are the
    # float32 computation on the half-precision inputs, rounded once to their dtype.  ATTN-4's bound
    # (4x the half-precision oracle's own error plus the dtype's floor) lets a softmax run in bf16
    # pass; half an ulp plus the float32 bound does not.
    q, k, v, kwargs = problem(case, dtype, device, causal, scale)
    out, w = attend(q, k, v, **kwargs)
    golden_out, golden_w = declared_attention(q, k, v, **kwargs)  # float64 on the rounded inputs
    f32_out, f32_w = declared_attention(q, k, v, dtype=torch.float32, **kwargs)
    what = f"({dtype}, causal={causal}, W={kwargs['window']}, sinks={case.use_sinks}, scale={scale})"
    cond = Conditioning(q, k, v, **kwargs)
    assert_rounded_once(out, golden_out, f32_out, f"output {what}", cond)
    if w is not None:
        assert_rounded_once(w, golden_w, f32_w, f"weights {what}", cond, "weights")
