"""Blocked, online-softmax kernels: where tiled attention code breaks, and what catches it.

A flash-style kernel walks key blocks with a running max and sum, skips blocks no query may see,
masks the blocks a diagonal or a window edge cuts, and switches path with the problem size.  Its
bugs live at block boundaries (KERN-1, causal and not), in the running statistics (KERN-2), in masks
that cut through a block (KERN-3), at logits or sinks far beyond exp's range (KERN-4) and in the GQA
head index inside the kernel (KERN-5).  None of these properties needs the attention weights.  Cases
land on the target's declared block sizes and path switches (``blocks``/``switches``, kernel_blocks.py),
or on common block sizes when it declares none, so every profile meets a few long sequences.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from attnspec.kit.asserts import (
    Conditioning,
    assert_exactly_equal,
    assert_golden,
    assert_rounded_once,
    rounded_once_excess,
)
from attnspec.kit.conventions import convention_mismatch
from attnspec.kit.kernel_blocks import block_sizes, boundary_lengths, where_in_blocks
from attnspec.kit.kernel_cases import (
    PROFILES,
    Steering,
    kernel_cases,
    rebuild_line,
    steerings,
    windows_near_blocks,
    with_dtype_inputs,
)
from attnspec.kit.loading import current
from attnspec.kit.references import (
    declared_attention_by_rows,
    declared_mask,
    seen_keys,
    sink_probability,
)
from attnspec.kit.skips import require_dtype
from attnspec.kit.strategies import (
    FULL_PRECISION,
    LOW_PRECISION,
    AttnCase,
    fit_to_target,
    noise_like,
    precise_dtype,
    seeds,
)
from attnspec.specs.tolerance import golden_bound

TARGET = current()
sdpa = TARGET.attention
SIZES = block_sizes(TARGET)
PRECISE = precise_dtype()
LONGEST = max(boundary_lengths(TARGET))
B = SIZES[0]  # the smallest block size
# Explicit examples, run first in every profile: Tq = Tk = one block plus one (a partial last block of
# one query and one key) with GQA 4 over 2, a window of a block less one and sinks; three blocks and
# one more key; one query over the most keys the cases reach, with sinks (a decode step); and the
# causal diagonal half a block off the grid.
BLOCK_PLUS_ONE = fit_to_target(AttnCase(1, 4, 2, B + 1, B + 1, 4, 3, B - 1, True, seed=7))
LONG = fit_to_target(AttnCase(1, 2, 1, 3 * B + 1, 3 * B + 1, 4, 4, None, False, seed=8))
DECODE = fit_to_target(AttnCase(1, 4, 2, 1, LONGEST, 4, 4, None, True, seed=9))
OFF_GRID = fit_to_target(AttnCase(1, 2, 2, B + 1, B + 1 + max(1, B // 2), 4, 4, None, False, seed=10))


def oracle_pair(q, k, v, dtype: torch.dtype, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """(the float64 oracle, the oracle run in ``dtype``) from the same inputs, under the declaration:
    the tolerance policy's golden and ref_lowp (src/attnspec/specs/tolerance.py)."""
    golden = declared_attention_by_rows(q, k, v, **kwargs)
    return golden, golden if dtype == torch.float64 else declared_attention_by_rows(
        q, k, v, dtype=dtype, **kwargs
    )


def assert_matches_oracle(out: torch.Tensor, q, k, v, what: str, **kwargs) -> None:
    """The output agrees with the float64 oracle from the same (rounded) inputs: within the golden
    bound in float32/float64, the float32 result rounded once in fp16/bf16 (the "float16"
    capability).  A failure says where the wrong rows sit in the kernel's blocks, and which other
    convention (if any) the output follows."""
    dtype = out.dtype
    cond = Conditioning(q, k, v, **kwargs)
    low = dtype in LOW_PRECISION
    golden, ref = oracle_pair(q, k, v, torch.float32 if low else dtype, **kwargs)
    assert out.shape == golden.shape, f"{what}: shape {tuple(out.shape)} != {tuple(golden.shape)}"
    try:
        (assert_rounded_once if low else assert_golden)(out, golden, ref, what, cond)
    except AssertionError as failure:
        if low:
            wrong = rounded_once_excess(out, golden, ref, cond, "out")[0] > 0
        else:
            err = (out.detach().cpu().double() - golden).abs().nan_to_num(nan=math.inf)
            wrong = err > golden_bound(golden, ref, dtype, cond.term("out"))
        wrong = wrong.flatten(0, 1).any(dim=0).any(dim=-1)  # (Tq,)
        tq, tk = q.shape[2], k.shape[2]
        where = where_in_blocks(wrong, tq, tk, kwargs.get("window"), kwargs.get("causal", True), SIZES)
        if not bool(torch.isfinite(out).all()):
            where = f"non-finite output ({int((~torch.isfinite(out)).sum())} entries); {where}"
        explained = convention_mismatch(out, golden, q, k, v, **kwargs)
        raise AssertionError("\n".join(filter(None, [explained, f"{what}: {where}", str(failure)]))) from None


def shape_of(case: AttnCase) -> str:
    sizes = (
        f"B={case.batch} Hq={case.n_heads} Hkv={case.n_kv_heads} Tq={case.tq} Tk={case.tk} d={case.head_dim}"
    )
    return f"{sizes} W={case.window}"


# --- KERN-1: block boundaries and path switches -------------------------------------------------


@pytest.mark.req("KERN-1")
@pytest.mark.parametrize("dtype", [*FULL_PRECISION, *LOW_PRECISION], ids=str)
@example(case=BLOCK_PLUS_ONE)
@given(case=kernel_cases())
def test_lengths_around_the_block_sizes_match_the_oracle(dtype, case, device):
    require_dtype(dtype, device)
    q, k, v, sinks = case.make(device, dtype)
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    what = f"output at block-boundary lengths vs the oracle ({shape_of(case)}, {dtype})"
    assert_matches_oracle(out, q, k, v, what, **case.keywords(sinks, device))


@pytest.mark.req("KERN-1", "ATTN-4")
@pytest.mark.needs("non_causal")
@example(case=LONG)
@given(case=kernel_cases(windows=False))
def test_non_causal_attention_over_many_blocks_matches_the_oracle(case, device):
    # Without the causal mask every query block visits every key block: a kernel that keeps its causal
    # bounds on a non-causal call (a query block stops at its diagonal) loses the later keys.
    q, k, v, sinks = case.make(device, PRECISE)
    kwargs = case.keywords(sinks, device, causal=False)
    out = sdpa(q, k, v, **kwargs)
    what = f"non-causal output over key blocks vs the oracle ({shape_of(case)})"
    assert_matches_oracle(out, q, k, v, what, **kwargs)


@pytest.mark.req("KERN-1")
@pytest.mark.needs("decode")
@example(case=DECODE)
@given(case=kernel_cases(few_queries=True))
def test_a_few_queries_over_many_keys_match_the_oracle(case, device):
    # Decode: kernels switch to a split-keys path for a query or two over a long cache, and combine
    # the parts' statistics at the end (the sink once).
    q, k, v, sinks = case.make(device, PRECISE)
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    what = f"decode output vs the oracle ({shape_of(case)})"
    assert_matches_oracle(out, q, k, v, what, **case.keywords(sinks, device))


@pytest.mark.req("KERN-1")
@pytest.mark.needs("decode")
@given(case=kernel_cases(), data=st.data())
def test_the_last_queries_alone_give_the_last_rows(case, data, device):
    # Bottom-right alignment makes the last n queries over all keys the same problem as rows Tq-n..
    # of the whole call: the two calls take other query blocks, and often other paths.
    q, k, v, sinks = case.make(device, PRECISE)
    on_boundaries = [m for m in boundary_lengths(TARGET) if m <= case.tq]
    n = data.draw(st.one_of(st.integers(1, min(3, case.tq)), st.sampled_from(on_boundaries)), label="n")
    whole = sdpa(q, k, v, **case.keywords(sinks, device))[:, :, case.tq - n :]
    alone = sdpa(q[:, :, case.tq - n :].contiguous(), k, v, **case.keywords(sinks, device))  # contiguous
    golden, ref = oracle_pair(q[:, :, case.tq - n :], k, v, PRECISE, **case.keywords(sinks, device))
    worst = (alone.double() - whole.double()).abs().nan_to_num(nan=math.inf).max().item()
    bound = 2 * golden_bound(golden, ref, PRECISE)  # each call within its bound of the oracle
    if not worst <= bound:  # with the conditioning term, computed only when it is needed
        cond = Conditioning(q[:, :, case.tq - n :], k, v, **case.keywords(sinks, device))
        bound = 2 * golden_bound(golden, ref, PRECISE, cond.term("out"))
    assert worst <= bound, (
        f"the last {n} of {case.tq} queries over {case.tk} keys alone disagree with the same rows of the "
        f"whole call: max |diff| = {worst:.3e} > {bound:.3e} ({shape_of(case)})"
    )


# --- KERN-2: the running statistics -------------------------------------------------------------


@pytest.mark.req("KERN-2")
@example(case=LONG, steering=Steering("rise", 30.0))
@given(case=kernel_cases(head_dims=(1, 4, 16)), steering=steerings((8.0, 30.0)))
def test_wherever_the_largest_logit_falls_the_output_matches_the_oracle(case, steering, device):
    # Logits that rise over the keys make the running max grow in every key block (each growth must
    # rescale the sum and the accumulator); falling ones put it in the first block; a spike in any.
    q, k, v, sinks = with_dtype_inputs(case, steering, 1 / math.sqrt(case.head_dim), device, PRECISE)
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    rebuild = rebuild_line(case, steering, 1 / math.sqrt(case.head_dim), PRECISE)
    what = f"output with logits that {describe(steering)} vs the oracle ({shape_of(case)}; {rebuild})"
    assert_matches_oracle(out, q, k, v, what, **case.keywords(sinks, device))


@pytest.mark.req("KERN-2", "ATTN-1")
@example(case=LONG, steering=Steering("rise", 30.0))
@given(case=kernel_cases(), steering=steerings((0.0, 30.0)))
def test_values_constant_over_the_keys_come_out_scaled_by_one_minus_the_sink(case, steering, device):
    # Weights that sum to one, without the weights: with v_j = c for every key of a KV head, the
    # output is c * (1 - p_sink), or exactly c without sinks, whatever the logits.  A sum l that is
    # not rescaled, or counted twice across key blocks or splits, scales it.
    q, k, _, sinks = with_dtype_inputs(case, steering, 1 / math.sqrt(case.head_dim), device, PRECISE)
    level = torch.arange(1, case.n_kv_heads + 1, dtype=PRECISE, device=device) * 0.75
    v = level.view(1, -1, 1, 1).expand(case.batch, case.n_kv_heads, case.tk, case.dv).contiguous()
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    golden, ref = oracle_pair(q, k, v, PRECISE, **case.keywords(sinks, device))
    sink = "1 - p_sink" if sinks is not None else "1"
    rebuild = rebuild_line(case, steering, 1 / math.sqrt(case.head_dim), PRECISE)
    what = f"output for values constant over the keys ({sink} times the value; {shape_of(case)}; {rebuild})"
    assert_golden(out, golden, ref, what)


@pytest.mark.req("KERN-2", "ATTN-1", "ATTN-2")
@example(case=BLOCK_PLUS_ONE)
@given(case=kernel_cases())
def test_every_output_lies_between_the_least_and_largest_value_it_may_see(case, device):
    # Weights that are non-negative, zero off the mask and sum to 1 - p_sink make each output feature a
    # mean of the values its query may see, times 1 - p_sink.  With positive values, a sum l that is
    # too large or too small, a leaked key or a lost block pushes it out of that range.
    q, k, v, sinks = case.make(device, PRECISE)
    v = v.abs() + 0.5
    kwargs = case.keywords(sinks, device)
    out = sdpa(q, k, v, **kwargs).detach().cpu().double()
    allowed = seen_keys(q, k, **kwargs)  # (B, Hq, Tq, Tk)
    seen = v.detach().cpu().double()[:, torch.arange(case.n_heads) // case.group, None]  # (B, Hq, 1, Tk, dv)
    hidden = ~allowed[..., None]
    keep = 1 - sink_probability(q, k, sinks, allowed)[..., None]  # (B, Hq, Tq, 1)
    sees = allowed.any(dim=-1, keepdim=True)  # a row a declared mask leaves without a key outputs 0
    least = torch.where(sees, seen.masked_fill(hidden, math.inf).amin(dim=-2) * keep, 0.0)
    largest = torch.where(sees, seen.masked_fill(hidden, -math.inf).amax(dim=-2) * keep, 0.0)
    slack = 64 * torch.finfo(PRECISE).eps * largest.abs().clamp_min(1)
    excess = torch.maximum(least - slack - out, out - largest - slack).nan_to_num(nan=math.inf)
    outside = (excess > 0).flatten(0, 1).any(-1).any(0)  # (Tq,)
    if bool(outside.any()):
        b, h, i, f = torch.nonzero(excess == excess.max())[0].tolist()
        raise AssertionError(
            f"outputs outside the range of the values their queries may see ({shape_of(case)}, "
            f"sinks={sinks is not None}): at batch {b}, head {h}, query {i}, feature {f} "
            f"the output is {out[b, h, i, f].item():.6g}, the visible values times 1 - p_sink span "
            f"{least[b, h, i, f].item():.6g}..{largest[b, h, i, f].item():.6g}; "
            + where_in_blocks(outside, case.tq, case.tk, case.window, True, SIZES)
        )


# --- KERN-3: masks that cut through blocks ------------------------------------------------------


@pytest.mark.req("KERN-3", "MASK-1")
@example(case=OFF_GRID)
@given(case=kernel_cases(offset_off_grid=True, windows=False))
def test_a_causal_diagonal_inside_key_blocks_matches_the_oracle(case, device):
    # Tk - Tq on no block multiple: the diagonal of a query block runs through the middle of its key
    # blocks, two of which may need the mask, not only the last.
    q, k, v, sinks = case.make(device, PRECISE)
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    what = f"output with the causal diagonal inside key blocks vs the oracle ({shape_of(case)})"
    assert_matches_oracle(out, q, k, v, what, **case.keywords(sinks, device))


@pytest.mark.req("KERN-3", "MASK-2")
@pytest.mark.needs("window")
@example(case=LONG, w=B - 1)
@given(case=kernel_cases(), w=windows_near_blocks())
def test_window_edges_inside_key_blocks_match_the_oracle(case, w, device):
    # A window of about a block: its lower edge cuts through key blocks, and a query block's earliest
    # key blocks are wholly outside the band of its later queries (a row with nothing to see in a
    # block must stay neutral, not turn NaN).
    case = replace(case, window=w)
    q, k, v, sinks = case.make(device, PRECISE)
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    what = f"output with a window of {w} over key blocks vs the oracle ({shape_of(case)})"
    assert_matches_oracle(out, q, k, v, what, **case.keywords(sinks, device))


@pytest.mark.req("KERN-3", "ATTN-2")
@pytest.mark.law("hidden_keys")
@given(case=kernel_cases(), seed=seeds, data=st.data())
def test_keys_no_query_may_see_change_nothing(case, seed, data, device):
    # Keys no query may see (with Tq < Tk and a window of W <= Tk - Tq, keys 0 .. Tk-Tq-W lie before every
    # query's window; earlier documents lie outside the last queries' own; a mask_mod may hide keys from
    # every query): whatever they hold, however extreme, the output is bitwise the same.  A kernel that
    # lets them into its running max (the max taken before the mask) or its sums fails.
    if TARGET.supports("decode"):  # fewer queries than keys: the earliest keys are behind them all
        case = replace(case, tk=case.tk + 1) if case.tk == 1 else case
        case = replace(case, tq=min(case.tq, case.tk - 1))
    if TARGET.supports("window", "decode"):
        case = replace(case, window=data.draw(st.integers(1, case.tk - case.tq), label="window"))
    q, k, v, sinks = case.make(device, PRECISE)
    kwargs = case.keywords(sinks, device)
    seen = declared_mask(q, k, **kwargs).any(dim=2)  # (B, Hq, Tk): a key some query of a head sees
    hidden = ~seen.view(case.batch, case.n_kv_heads, case.group, case.tk).any(dim=2)  # (B, Hkv, Tk)
    out = sdpa(q, k, v, **kwargs)
    where = hidden[..., None].to(device)
    k2 = torch.where(where, noise_like(k, seed) * 1e3, k)
    v2 = torch.where(where, noise_like(v, seed + 1) * 1e6, v)
    changed = sdpa(q, k2, v2, **kwargs)
    keys = torch.nonzero(hidden.any(dim=(0, 1))).flatten().tolist()
    what = f"outputs after changing keys {keys}, which no query sees ({shape_of(case)})"
    assert_exactly_equal(changed, out, what)


@pytest.mark.req("KERN-3", "MASK-1")
@given(case=kernel_cases(windows=False), seed=seeds)
def test_extreme_keys_behind_the_diagonal_do_not_leak(case, seed, device):
    # The last key block holds keys with logits and values far larger than the rest: only the queries
    # that may see them (bottom-right) may be moved by them.  A diagonal left unmasked in any block
    # lets them swamp earlier queries.
    q, k, v, sinks = case.make(device, PRECISE)
    last = max(0, case.tk - SIZES[0])
    k[:, :, last:] = noise_like(k[:, :, last:], seed) * 8
    v[:, :, last:] = noise_like(v[:, :, last:], seed + 1) * 100
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    what = f"output with extreme keys {last}..{case.tk - 1} vs the oracle ({shape_of(case)})"
    assert_matches_oracle(out, q, k, v, what, **case.keywords(sinks, device))


# --- KERN-4: numerical range ------------------------------------------------------------------------


FAR = 98304.0  # 3 * 2^15: logits far below any finite sentinel a running max may start at (-1e4, -5e4)


def range_sizes(dtype: torch.dtype, head_dim: int) -> tuple[float, ...]:
    """Logit spans beyond exp's range in the dtype the kernel scores in: past 88.7 for float32, 709.8
    for float64; for fp16/bf16 inputs (scored in float32) dot products past the fp16 maximum, 65504,
    as well; and in every dtype FAR, where a row whose every logit lies below a running max that
    starts at a finite sentinel instead of -inf sums to 0 (steer_logits keeps such logits exact)."""
    if dtype == torch.float64:
        return (800.0, FAR)
    if dtype == torch.float32:
        return (120.0, FAR)
    return (120.0, 65536.0 / math.sqrt(head_dim), FAR)


@pytest.mark.req("KERN-4")
@pytest.mark.parametrize("dtype", [*FULL_PRECISION, *LOW_PRECISION], ids=str)
@example(case=LONG, profile="high", data=None)
@example(case=LONG, profile="low", data=None)
@given(case=kernel_cases(head_dims=(1, 4, 16)), profile=st.sampled_from(PROFILES), data=st.data())
def test_logits_far_beyond_exps_range_match_the_oracle(dtype, case, profile, data, device):
    # Every logit far above zero (exp overflows without the max subtracted), far below (exp underflows
    # when the running max starts at 0 instead of -inf), or one spike far above the rest.
    require_dtype(dtype, device)
    sizes = range_sizes(dtype, case.head_dim)
    size = sizes[-1] if data is None else data.draw(st.sampled_from(sizes), label="size")
    steering = Steering(profile, size, 0.5 if data is None else data.draw(st.floats(0, 1), label="at"))
    q, k, v, sinks = with_dtype_inputs(case, steering, 1 / math.sqrt(case.head_dim), device, dtype)
    out = sdpa(q, k, v, **case.keywords(sinks, device))
    rebuild = rebuild_line(case, steering, 1 / math.sqrt(case.head_dim), dtype)
    what = f"output with logits that {describe(steering)} vs the oracle ({dtype}, {shape_of(case)})"
    what = f"{what}; {rebuild}"
    assert_matches_oracle(out, q, k, v, what, **case.keywords(sinks, device))


@pytest.mark.req("KERN-4", "SINK-2")
@pytest.mark.needs("sinks")
@given(case=kernel_cases(), far=st.sampled_from([-300.0, -60.0, 60.0, 300.0]), seed=seeds)
def test_sinks_far_above_or_below_every_logit_match_the_oracle(case, far, seed, device):
    # A sink far above every logit takes nearly all the weight (the output goes to 0); far below, it
    # takes none.  A sink folded into the sum without the running max overflows or underflows.
    q, k, v, _ = case.make(device, PRECISE)
    signs = torch.where(noise_like(torch.empty(case.n_heads, dtype=torch.float64), seed) < 0, -1.0, 1.0)
    sinks = (signs * far).to(device=device, dtype=PRECISE)  # some heads far above, some far below
    kwargs = case.keywords(sinks, device)
    out = sdpa(q, k, v, **kwargs)
    what = f"output with sinks at +-{abs(far):g} ({shape_of(case)}) vs the oracle"
    assert_matches_oracle(out, q, k, v, what, **kwargs)


# --- KERN-5: GQA inside the kernel ---------------------------------------------------------------------


@pytest.mark.req("KERN-5", "GQA-1")
@pytest.mark.needs("gqa")
@given(case=kernel_cases(sinks=False), r=st.integers(2, 4))
def test_each_query_head_reads_kv_head_h_div_r_in_every_block(case, r, device):
    # KV head g holds the value g + 1 at every key: query head h must output exactly h // r + 1, in
    # every row of every block, whatever its logits.
    case = fit_to_target(replace(case, n_heads=case.n_kv_heads * r))  # the head counts the target takes
    hkv, r = case.n_kv_heads, case.group
    q, k, _, _ = case.make(device, PRECISE)
    v = torch.arange(1, hkv + 1, dtype=PRECISE, device=device).view(1, hkv, 1, 1)
    v = v.expand(case.batch, hkv, case.tk, case.dv).contiguous()
    kwargs = case.keywords(None, device)
    out = sdpa(q, k, v, **kwargs)
    sees = seen_keys(q, k, **kwargs).any(dim=-1).to(device)  # (B, Hq, Tq): a row that sees no key is 0
    for h in range(hkv * r):
        got = out[:, h].double()
        label = torch.where(sees[:, h, :, None], float(h // r + 1), 0.0).to(got).expand_as(got)
        if not torch.allclose(got, label, rtol=1e-5, atol=1e-5):
            raise AssertionError(
                f"query head {h} of {hkv * r} (r={r}) reads KV head ~{got.mean().item() - 1:.2f}, not "
                f"{h // r} (h // r), inside the kernel ({shape_of(case)})"
            )


def describe(steering: Steering) -> str:
    return {
        "rise": f"rise over the keys by {steering.size:g}",
        "fall": f"fall over the keys by {steering.size:g}",
        "spike": f"spike by {steering.size:g} at {steering.at:.0%} of the keys",
        "high": f"all sit near +{steering.size:g}",
        "low": f"all sit near -{steering.size:g}",
    }[steering.profile]
