"""impl's variants of the logits: soft-capping (ATTN-14) and ALiBi (ATTN-15), in the attention core.

Each is checked against the oracle with the reference mod of attnspec/specs/mods.py, written from its formula
(never from impl/), on both attention paths, with everything else the core takes (windows, sinks,
GQA, decode, queries that see no key, documents, a scale, every dtype), and by a law of its own that
needs no oracle: a soft-capped logit stays within the cap, and ALiBi's weights fall by exactly
e^slope per key of distance when the scores are equal.  The block and the stack draw both variants
too (strategies.block_cases), which takes them through BLOCK-1 and the KV cache (CACHE-1); a
windowed ALiBi block decoded token by token past its window checks that the wrapped cache hands a
token its keys oldest first, as ALiBi's distances need.  The variants' slopes, positions and labels
are made on q's device (run on the meta device, where one made elsewhere fails), and malformed ones
are refused with messages that name the argument and its value (ERR-1, ERR-2).
A target declares such a variant as a score_mod instead (CONVENTIONS.md), and every property follows it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from attnspec.impl import AttentionBlock, ModelConfig, alibi_slopes, scaled_dot_product_attention
from attnspec.kit.asserts import (
    Conditioning,
    assert_close,
    assert_exactly_equal,
    assert_exactly_zero,
    assert_golden,
    assert_rounded_once,
)
from attnspec.kit.messages import message_names
from attnspec.kit.references import block_oracle
from attnspec.kit.skips import require_dtype
from attnspec.kit.strategies import (
    FULL_PRECISION,
    LOW_PRECISION,
    AttnCase,
    BlockCase,
    attn_cases,
    blind_query_cases,
    causal_flags,
    packed_ids,
    seeds,
    spanning_tiles,
)
from attnspec.specs import mods
from attnspec.specs.oracle import Call, attention_oracle, mask_oracle, visible_for

CAPS = (0.5, 2.0, 30.0)  # a cap that binds on logits of unit size, one that binds on large ones, one loose


def variant_keywords(n_heads: int, softcap: float | None, alibi: bool, device) -> tuple[dict, dict]:
    """(impl's keywords, the oracle's) for the variants: softcap= and alibi_slopes= for impl, the
    reference score_mod of the same for the oracle."""
    slopes = alibi_slopes(n_heads, device=device) if alibi else None
    capped = None if softcap is None else mods.soft_cap(softcap)
    biased = mods.alibi(mods.alibi_slopes(n_heads)) if alibi else None
    return {"softcap": softcap, "alibi_slopes": slopes}, {"score_mod": mods.composed(capped, biased)}


PACKED_TILES = replace(spanning_tiles(), documents=((3, 1, 6),))  # documents across the tiles


@pytest.mark.req("ATTN-14", "ATTN-15", "ATTN-4")
@pytest.mark.usefixtures("attention_path")
@pytest.mark.parametrize("dtype", [*FULL_PRECISION, *LOW_PRECISION], ids=str)
@example(case=PACKED_TILES, softcap=2.0, alibi=True, causal=True, scale=0.5)
@given(
    case=st.one_of(attn_cases(max_t=8), blind_query_cases(max_t=6)),
    softcap=st.sampled_from([None, *CAPS]),
    alibi=st.booleans(),
    causal=causal_flags(),
    scale=st.one_of(st.none(), st.floats(0.1, 2.0)),
)
def test_capped_and_biased_logits_match_the_oracle(dtype, case, softcap, alibi, causal, scale, device):
    require_dtype(dtype, device)
    q, k, v, sinks = case.make(device, dtype)
    call = case.keywords(sinks, device, causal=causal, scale=scale)
    variants, declared = variant_keywords(case.n_heads, softcap, alibi, device)
    out = scaled_dot_product_attention(q, k, v, **call, **variants)
    golden, _ = attention_oracle(q, k, v, **call, **declared)
    what = f"output (soft-cap {softcap}, ALiBi {alibi}, {dtype}, causal={causal}, W={call['window']})"
    cond = Conditioning(q, k, v, **call, **declared)
    if dtype in LOW_PRECISION:  # scored in float32, rounded once
        ref32, _ = attention_oracle(q, k, v, dtype=torch.float32, **call, **declared)
        assert_rounded_once(out, golden, ref32, what, cond)
        return
    ref = golden if dtype == torch.float64 else attention_oracle(q, k, v, dtype=dtype, **call, **declared)[0]
    assert_golden(out, golden, ref, what, cond)


@pytest.mark.req("ATTN-14", "ATTN-2")
@given(case=attn_cases(), softcap=st.sampled_from(CAPS), alibi=st.booleans())
def test_soft_capped_logits_stay_within_the_cap_and_hidden_keys_at_zero(case, softcap, alibi, device):
    # Large inputs (logits in the hundreds): capped, any two visible keys' logits differ by less than
    # 2c, plus ALiBi's bias between them; a cap applied after the mask would give hidden keys -c, and
    # weight.  Weights in float64, so that no visible one underflows.
    case = replace(case, magnitude=6.0)
    q, k, v, sinks = case.make(device, torch.float64)
    call = case.keywords(sinks, device)
    variants, _ = variant_keywords(case.n_heads, softcap, alibi, device)
    _, w = scaled_dot_product_attention(q, k, v, **call, **variants, return_weights=True)
    mask = Call(causal=call.get("causal", True), window=case.window, document_ids=call.get("document_ids"))
    allowed = visible_for(q, k, mask).to(device)
    assert_exactly_zero(w.masked_fill(allowed, 0.0), f"weights of hidden keys with soft-cap {softcap}")
    log_w = torch.log(w.masked_fill(~allowed, math.nan))
    spread = log_w.nan_to_num(nan=-math.inf).amax(-1) + (-log_w).nan_to_num(nan=-math.inf).amax(-1)
    slopes = alibi_slopes(case.n_heads).to(device).view(1, -1, 1) if alibi else 0.0
    bound = (2 * softcap + slopes * case.tk) * (1 + 1e-9)  # ALiBi moves a logit by at most slope * Tk
    rows = allowed.expand_as(w).any(dim=-1)
    worst = (spread - bound)[rows]
    assert not bool((worst > 0).any()), (
        f"logits of one query span {spread[rows].max().item():.4g} > 2 * cap (+ ALiBi's span) with "
        f"soft-cap {softcap}: the cap is not applied to the scaled logit"
    )


@pytest.mark.req("ATTN-15")
@example(case=AttnCase(1, 4, 2, 5, 9, 2, 2, None, False, seed=0), causal=True)
@given(case=attn_cases(sinks=False, documents=False), causal=causal_flags())
def test_alibi_weights_fall_by_e_to_the_slope_per_key_of_distance(case, causal, device):
    # q = 0: every score is 0 and only ALiBi's bias m_h (j - p) is left, so neighbouring visible keys'
    # log weights differ by exactly m_h (the nearer one heavier): the slope, its sign and its head.
    q, k, v, _ = case.make(device, torch.float64)
    q = torch.zeros_like(q)
    call = case.keywords(None, device, causal=causal)
    variants, _ = variant_keywords(case.n_heads, None, True, device)
    _, w = scaled_dot_product_attention(q, k, v, **call, **variants, return_weights=True)
    allowed = mask_oracle(case.tq, case.tk, causal=causal, window=call["window"]).to(device)
    both = allowed[:, 1:] & allowed[:, :-1]  # neighbours j - 1, j both visible
    steps = (torch.log(w[..., 1:]) - torch.log(w[..., :-1]))[:, :, both]  # (B, Hq, pairs)
    slopes = torch.tensor(mods.alibi_slopes(case.n_heads), dtype=torch.float64, device=device)
    expected = slopes.view(1, -1, 1).expand_as(steps)
    err = (steps - expected).abs().max().item() if steps.numel() else 0.0
    assert err <= 1e-9, (
        f"log w_j - log w_(j-1) differs from head h's slope 2^(-8(h+1)/H) by {err:.3e} "
        f"(Hq={case.n_heads}; per head {steps.mean(dim=(0, 2)).tolist()}, expected {slopes.tolist()})"
    )


@pytest.mark.req("ATTN-15")
@given(n_heads=st.integers(1, 80))
def test_alibi_slopes_are_the_formulas(n_heads, device):
    slopes = alibi_slopes(n_heads, device=device)
    expected = torch.tensor(mods.alibi_slopes(n_heads), dtype=torch.float64)
    assert slopes.device.type == device.type, f"slopes on {slopes.device}, asked for {device}"
    assert slopes.shape == expected.shape, f"{tuple(slopes.shape)} ALiBi slopes for {n_heads} heads"
    err = ((slopes.cpu() - expected) / expected).abs().max().item()
    assert err <= 1e-15, f"ALiBi slopes of {n_heads} heads {slopes.tolist()}, expected {expected.tolist()}"


@pytest.mark.req("ERR-1")
@pytest.mark.parametrize(
    "variant, error, words",
    [
        ({"softcap": 0.0}, ValueError, ("softcap=0.0",)),
        ({"softcap": -1.0}, ValueError, ("softcap=-1.0",)),
        ({"softcap": True}, TypeError, ("softcap", "bool", "True")),
        ({"alibi_slopes": torch.ones(3, dtype=torch.float64)}, ValueError, ("alibi_slopes", "(2,)", "(3,)")),
        (
            {"alibi_slopes": torch.ones(2, dtype=torch.int64)},
            TypeError,
            ("alibi_slopes", "(2,)", "torch.int64"),
        ),
        ({"alibi_slopes": torch.ones(2, device="meta")}, ValueError, ("alibi_slopes", "meta", "cpu")),
        (
            {"document_ids": torch.zeros(2, 4, dtype=torch.int64)},
            ValueError,
            ("document_ids", "(2, 5)", "(2, 4)"),
        ),
        (
            {"document_ids": torch.zeros(2, 5)},
            TypeError,
            ("document_ids", "an int", "(2, 5)", "torch.float32"),
        ),
        ({"document_ids": torch.zeros(2, 5, dtype=torch.int64, device="meta")}, ValueError, ("meta", "cpu")),
    ],
)
def test_malformed_variants_are_refused(variant, error, words):
    # B = 2 and Hkv = 1, Hq = 2 and Tq = Tk = 5, d = 4: each size a message names is told from the others.
    q, k, v, _ = AttnCase(2, 2, 1, 5, 5, 4, 4, None, False, seed=1).make()
    with pytest.raises(error, match=message_names(*words)):
        scaled_dot_product_attention(q, k, v, **variant)


@pytest.mark.req("ERR-1", "ATTN-15")
@pytest.mark.parametrize("n_heads", [0, -3, True, 2.0, "4"])
def test_alibi_slopes_refuse_a_head_count_that_is_not_a_positive_int(n_heads):
    with pytest.raises(ValueError, match=message_names(f"n_heads={n_heads!r}")):
        alibi_slopes(n_heads)


@pytest.mark.req("ERR-2")
@pytest.mark.parametrize(
    "bad, words",
    [
        ({"softcap": 0.0}, ("softcap", "0.0")),
        ({"softcap": -2.0}, ("softcap", "-2.0")),
        ({"softcap": True}, ("softcap", "True")),
        ({"alibi": 1}, ("alibi", "1")),
        ({"alibi": None}, ("alibi", "None")),
    ],
)
def test_model_config_refuses_a_cap_or_an_alibi_switch_of_the_wrong_kind(bad, words):
    with pytest.raises(ValueError, match=message_names(*words)):
        ModelConfig(d_model=8, n_heads=2, n_kv_heads=1, head_dim=4, **bad)


@pytest.mark.req("ATTN-10", "ATTN-14", "ATTN-15", "ATTN-16")
@example(n_heads=6, tq=3, tk=5)
@given(n_heads=st.integers(1, 12), tq=st.integers(1, 6), tk=st.integers(1, 6))
def test_the_variants_make_their_slopes_bias_and_masks_on_the_device_of_q(n_heads, tq, tk):
    # On the meta device: a slope, a position or a label made on the default device instead of q's
    # meets q's tensors in one operation and fails there (the CPU alone cannot tell them apart).
    slopes = alibi_slopes(n_heads, device="meta")
    assert slopes.device.type == "meta" and slopes.shape == (n_heads,), (
        f"{slopes.device} {tuple(slopes.shape)}"
    )
    q = torch.empty(2, n_heads, tq, 4, device="meta")
    k, v = torch.empty(2, 1, tk, 4, device="meta"), torch.empty(2, 1, tk, 3, device="meta")
    documents = torch.zeros(2, tk, dtype=torch.int64, device="meta")
    out, w = scaled_dot_product_attention(
        q, k, v, softcap=2.0, alibi_slopes=slopes, document_ids=documents, return_weights=True
    )
    assert out.device.type == w.device.type == "meta", f"output on {out.device}, weights on {w.device}"
    assert out.shape == (2, n_heads, tq, 3) and w.shape == (2, n_heads, tq, tk), f"{out.shape} {w.shape}"


_ALIBI_STREAM = BlockCase(
    d_model=16,
    n_heads=4,
    n_kv_heads=2,
    head_dim=4,
    n_layers=1,
    window=3,
    window_layers="all",
    use_sinks=False,
    activation="swiglu",
    batch=2,
    seq=11,
    seed=5,
    softcap=3.0,
    alibi=True,
)


@pytest.mark.req("ATTN-15", "ATTN-16", "CACHE-1")
@example(window=2, seq=9, seed=0, variant="documents", documents=((1, 3, 5), (4, 5)))
@given(
    window=st.integers(1, 4),
    seq=st.integers(2, 12),
    seed=seeds,
    variant=st.sampled_from(["alibi", "documents"]),
    documents=st.lists(st.integers(1, 4), min_size=1, max_size=6)
    .map(tuple)
    .map(lambda row: (row, row[::-1])),
)
def test_a_windowed_block_decoded_token_by_token_is_its_one_pass(window, seq, seed, variant, documents):
    # Token by token past the window the ring buffer has wrapped around, and the keys a decoded token
    # gets must come oldest first: ALiBi counts its distances along them, and a packed row's labels
    # follow the positions (plain attention would not care in which order they come).
    case = replace(_ALIBI_STREAM, window=window, seq=seq, seed=seed, alibi=variant == "alibi")
    block = case.module("attention", dtype=torch.float64)
    x = case.input(dtype=torch.float64)
    ids = packed_ids(documents, case.batch, seq) if variant == "documents" else None
    cache = block.new_cache(seq)
    with torch.no_grad():
        whole = block(x, document_ids=ids)
        outs = [
            block(x[:, t : t + 1], t, cache, document_ids=None if ids is None else ids[:, : t + 1])
            for t in range(seq)
        ]
    what = f"{variant} block, window {window}, {seq} tokens decoded one by one vs one pass"
    assert_close(torch.cat(outs, dim=1), whole, what)
    if variant == "alibi":  # and the one pass is the oracle's
        golden = block_oracle(block, case.config(), 0, x, 0, torch.float64)
        assert_golden(whole, golden, golden, f"ALiBi block, window {window}, vs the oracle")


@pytest.mark.req("ATTN-15", "ATTN-10")
def test_a_block_with_alibi_runs_on_the_meta_device():
    # The block makes its slopes on the device of its input: made anywhere else, they meet q there.
    block = AttentionBlock(_ALIBI_STREAM.config()).to("meta")
    out = block(torch.empty(2, 5, 16, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 5, 16), f"{out.device} {tuple(out.shape)}"


@pytest.mark.req("ERR-1", "ATTN-16")
def test_a_block_refuses_document_ids_that_do_not_cover_the_sequence_so_far():
    block = _ALIBI_STREAM.module("attention")
    x = _ALIBI_STREAM.input()[:, :4]
    with pytest.raises(ValueError, match=message_names("document_ids", "(2, 4)", "(2, 3)")):
        block(x, document_ids=torch.zeros(2, 3, dtype=torch.int64))


@pytest.mark.req("ERR-1", "ATTN-14", "ATTN-15", "ATTN-16")
@given(seed=seeds)
def test_the_variants_accept_their_smallest_values(seed, device):
    # Nothing narrower is refused: one head's slope, a cap of 1e-3, one token in its own document.
    q, k, v, _ = AttnCase(1, 1, 1, 1, 1, 2, 2, None, False, seed=seed).make(device, torch.float64)
    out = scaled_dot_product_attention(
        q,
        k,
        v,
        softcap=1e-3,
        alibi_slopes=alibi_slopes(1, device=device),
        document_ids=torch.zeros(1, 1, dtype=torch.int64, device=device),
    )
    assert_exactly_equal(out, v, "one query over its one key")
