"""Masks: bottom-right causal alignment, sliding windows, the additive form, the layer schedule.

Every mask property compares impl.attention_mask with specs.oracle.mask_oracle (built key by
key from the formula) and states one law of its own that does not go through the oracle.  The
padding mask a model hands attention (ATTN-13) is checked against the oracle's attention, on both of
impl's attention paths.
"""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from attnspec.impl import additive_mask, attention_mask, layer_window, scaled_dot_product_attention
from attnspec.kit.asserts import assert_exactly_equal, assert_golden
from attnspec.kit.messages import names_value
from attnspec.kit.strategies import (
    AttnCase,
    attn_cases,
    blind_query_cases,
    full_precision,
    seeds,
    spanning_tiles,
)
from attnspec.specs.oracle import attention_oracle, mask_oracle

# These properties check impl/ beyond the attention core: they run only with --impl impl.

both_paths = pytest.mark.usefixtures("attention_path")


@st.composite
def mask_shapes(draw: st.DrawFn, max_t: int = 16) -> tuple[int, int]:
    """(tq, tk) with 1 <= tq <= tk: self-attention and decode-style shapes."""
    tk = draw(st.integers(1, max_t))
    tq = draw(st.one_of(st.just(tk), st.just(1), st.integers(1, tk)))
    return tq, tk


windows = st.one_of(st.just(1), st.integers(1, 20))
bad_patterns = st.one_of(
    st.sampled_from(["", "odd", "Even", "ALL", "even ", "none", "2"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", max_size=6),
).filter(lambda s: s not in ("even", "all"))


# --- MASK-1: causal, bottom-right aligned --------------------------------------------------


@pytest.mark.req("MASK-1")
@given(shape=mask_shapes())
def test_causal_mask_matches_oracle(shape, device):
    tq, tk = shape
    mask = attention_mask(tq, tk, causal=True, device=device)
    assert mask.dtype == torch.bool, f"mask dtype {mask.dtype}, expected torch.bool"
    assert mask.device.type == device.type, f"mask on {mask.device}, asked for {device}"
    assert_exactly_equal(mask.cpu(), mask_oracle(tq, tk, causal=True), f"causal mask tq={tq} tk={tk}")


@pytest.mark.req("MASK-1")
@given(shape=mask_shapes())
def test_causal_mask_row_i_sees_keys_up_to_its_absolute_position(shape, device):
    # Law without the oracle: query i sits at Tk-Tq+i, so it sees exactly the keys 0..Tk-Tq+i
    # (a prefix of length Tk-Tq+i+1); the last query sees every key.
    tq, tk = shape
    mask = attention_mask(tq, tk, device=device).cpu()
    for i in range(tq):
        pos = tk - tq + i
        expected = torch.arange(tk) <= pos
        what = f"row {i} (position {pos}) of the causal mask tq={tq} tk={tk}"
        assert_exactly_equal(mask[i], expected, what)
    assert bool(mask[-1].all()), "the last query must see every key (bottom-right alignment)"


@pytest.mark.req("MASK-1")
@given(shape=mask_shapes())
def test_decode_mask_is_the_bottom_rows_of_the_square_mask(shape, device):
    # A KV cache decodes the last Tq queries of a length-Tk prefix: their mask must be the
    # last Tq rows of the Tk x Tk self-attention mask.
    tq, tk = shape
    square = attention_mask(tk, tk, device=device)
    decode = attention_mask(tq, tk, device=device)
    assert_exactly_equal(decode, square[tk - tq :], f"decode mask tq={tq} tk={tk}")


@pytest.mark.req("MASK-1")
@given(shape=mask_shapes())
def test_non_causal_mask_allows_everything(shape, device):
    tq, tk = shape
    mask = attention_mask(tq, tk, causal=False, device=device).cpu()
    assert_exactly_equal(mask, mask_oracle(tq, tk, causal=False), f"non-causal mask tq={tq} tk={tk}")
    assert bool(mask.all()), "causal=False must allow every (query, key) pair"


@pytest.mark.req("MASK-1", "MASK-2")
@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (True, 2)])
def test_masks_are_made_on_the_device_asked_for(causal, window):
    """ "meta" stands in for a second device: a mask left on the CPU would fail on a GPU."""
    mask = attention_mask(3, 5, causal=causal, window=window, device="meta")
    assert mask.device.type == "meta" and mask.shape == (3, 5) and mask.dtype == torch.bool


@pytest.mark.req("ERR-1", "MASK-1")
@example(sizes=(0, 3))
@example(sizes=(3, 0))
@example(sizes=(0, 0))
@example(sizes=(1, -1))
@given(sizes=st.tuples(st.integers(-3, 6), st.integers(-3, 6)).filter(lambda s: min(s) < 1))
def test_mask_sizes_below_one_are_refused(sizes, device):
    # One size below 1 is enough (the other may be valid); the message names both sizes.
    tq, tk = sizes
    with pytest.raises(ValueError, match=names_value("tq", tq)) as info:
        attention_mask(tq, tk, device=device)
    assert re.search(names_value("tk", tk), str(info.value)), f"message {info.value!r} does not name tk={tk}"


@pytest.mark.req("ERR-1", "MASK-2")
@pytest.mark.parametrize(
    "causal, window, error, words",
    [
        (True, 0, ValueError, "window=0"),
        (True, 1.5, TypeError, "1.5"),
        (False, 2, ValueError, "causal=False"),
    ],
)
def test_the_mask_refuses_a_window_attention_refuses(causal, window, error, words):
    # attention_mask is impl's API too, called without the attention's own checks first.
    with pytest.raises(error, match=re.escape(words)):
        attention_mask(3, 3, causal=causal, window=window)


@pytest.mark.req("ERR-1", "MASK-1", "MASK-2")
@pytest.mark.parametrize("causal, window", [(True, None), (True, 1), (True, 2), (False, None)])
def test_smallest_mask_is_one_allowed_pair(causal, window, device):
    # Nothing narrower is refused: the 1 x 1 mask lets the one query see the one key.
    mask = attention_mask(1, 1, causal=causal, window=window, device=device).cpu()
    assert_exactly_equal(
        mask, torch.ones(1, 1, dtype=torch.bool), f"1 x 1 mask (causal={causal}, W={window})"
    )


# --- MASK-2: sliding window ---------------------------------------------------------------


@pytest.mark.req("MASK-2")
@given(shape=mask_shapes(), window=st.one_of(st.none(), windows))
def test_window_mask_matches_oracle(shape, window, device):
    tq, tk = shape
    mask = attention_mask(tq, tk, causal=True, window=window, device=device).cpu()
    expected = mask_oracle(tq, tk, causal=True, window=window)
    assert_exactly_equal(mask, expected, f"window mask tq={tq} tk={tk} W={window}")


@pytest.mark.req("MASK-2")
@given(shape=mask_shapes(), window=windows)
def test_window_mask_row_sees_the_last_w_keys_up_to_itself(shape, window, device):
    # Law without the oracle: the query at position p sees the contiguous keys
    # max(0, p-W+1) .. p, i.e. min(W, p+1) keys, ending at itself.
    tq, tk = shape
    mask = attention_mask(tq, tk, window=window, device=device).cpu()
    for i in range(tq):
        pos = tk - tq + i
        seen = torch.nonzero(mask[i]).flatten().tolist()
        assert seen == list(range(max(0, pos - window + 1), pos + 1)), (
            f"row {i} (position {pos}) with W={window} sees keys {seen}"
        )
        assert len(seen) == min(window, pos + 1), f"row {i}: {len(seen)} keys visible, W={window}"


@pytest.mark.req("MASK-2")
@given(shape=mask_shapes())
def test_window_one_sees_only_its_own_position(shape, device):
    tq, tk = shape
    mask = attention_mask(tq, tk, window=1, device=device).cpu()
    expected = torch.zeros(tq, tk, dtype=torch.bool)
    for i in range(tq):
        expected[i, tk - tq + i] = True
    assert_exactly_equal(mask, expected, f"W=1 mask tq={tq} tk={tk}")


@pytest.mark.req("MASK-2")
@given(shape=mask_shapes(), extra=st.integers(0, 5))
def test_window_at_least_t_is_full_causal(shape, extra, device):
    tq, tk = shape
    full = attention_mask(tq, tk, device=device)
    wide = attention_mask(tq, tk, window=tk + extra, device=device)
    assert_exactly_equal(wide, full, f"W={tk + extra} >= Tk={tk}")


@pytest.mark.req("MASK-2")
@given(shape=mask_shapes(), window=windows)
def test_window_narrows_the_causal_mask_monotonically(shape, window, device):
    # A window only removes keys: mask(W) is contained in mask(W+1), which is within causal.
    tq, tk = shape
    narrow = attention_mask(tq, tk, window=window, device=device)
    wide = attention_mask(tq, tk, window=window + 1, device=device)
    causal = attention_mask(tq, tk, device=device)
    assert not bool((narrow & ~wide).any()), f"W={window} allows a key that W={window + 1} masks"
    assert not bool((wide & ~causal).any()), "a window allows a key the causal mask forbids"
    # Each query has exactly one key more under W+1 when it has one to gain (p >= W).
    gained = (wide.sum(-1) - narrow.sum(-1)).cpu()
    positions = torch.arange(tk - tq, tk)
    what = f"keys gained going from W={window} to {window + 1}"
    assert_exactly_equal(gained, (positions >= window).long(), what)


# --- MASK-3: additive form ----------------------------------------------------------------


@pytest.mark.req("MASK-3")
@given(seed=seeds, rows=st.integers(1, 9), cols=st.integers(1, 9))
def test_additive_mask_is_zero_or_minus_inf(seed, rows, cols, device):
    gen = torch.Generator().manual_seed(seed)
    allowed = (torch.rand(rows, cols, generator=gen) < 0.5).to(device)
    added = additive_mask(allowed)
    assert added.is_floating_point(), f"additive mask dtype {added.dtype} is not a float dtype"
    assert added.shape == allowed.shape, f"additive mask shape {tuple(added.shape)} != {tuple(allowed.shape)}"
    assert added.device == allowed.device, f"additive mask on {added.device}, mask on {allowed.device}"
    assert bool((added[allowed] == 0).all()), "an allowed entry of the additive mask is not exactly 0"
    assert bool(torch.isneginf(added[~allowed]).all()), "a masked entry of the additive mask is not -inf"


@pytest.mark.req("MASK-3")
@given(shape=mask_shapes(), window=st.one_of(st.none(), windows))
def test_additive_mask_of_the_attention_mask(shape, window, device):
    # exp(M) is the 0/1 indicator of the allowed keys: 0 -> 1 and -inf -> 0, exactly.
    tq, tk = shape
    added = additive_mask(attention_mask(tq, tk, window=window, device=device))
    expected = mask_oracle(tq, tk, window=window).to(torch.float32)
    assert_exactly_equal(torch.exp(added).cpu(), expected, f"exp(additive mask) tq={tq} tk={tk} W={window}")


# --- MASK-4: layer schedule ---------------------------------------------------------------


@pytest.mark.req("MASK-4")
@given(layer=st.integers(0, 64), window=st.one_of(st.none(), st.integers(1, 4096)))
def test_even_layers_are_windowed_odd_layers_full(layer, window):
    expected = window if layer % 2 == 0 else None
    assert layer_window(layer, window, "even") == expected, f"layer {layer} window {window} (even schedule)"
    assert layer_window(layer, window) == expected, f"layer {layer}: the default schedule must be 'even'"


@pytest.mark.req("MASK-4")
@given(layer=st.integers(0, 64), window=st.one_of(st.none(), st.integers(1, 4096)))
def test_all_schedule_windows_every_layer(layer, window):
    assert layer_window(layer, window, "all") == window, f"layer {layer} under the 'all' schedule"


@pytest.mark.req("MASK-4")
@given(layer=st.integers(0, 64), pattern=bad_patterns)
def test_unknown_schedule_is_a_value_error(layer, pattern):
    with pytest.raises(ValueError, match="window_layers"):
        layer_window(layer, 8, pattern)


@pytest.mark.req("MASK-4")
@given(n_layers=st.integers(2, 12), window=st.integers(1, 64))
def test_even_schedule_alternates(n_layers, window):
    schedule = [layer_window(layer, window, "even") for layer in range(n_layers)]
    assert schedule[0] == window, "layer 0 must use the sliding window"
    for a, b in zip(schedule, schedule[1:], strict=False):
        assert (a is None) != (b is None), f"the schedule {schedule} does not alternate windowed / full"


# --- ATTN-13: a padding mask (impl's own argument) -----------------------------------------------


def padding_masks(case: AttnCase, seed: int, real: float, device) -> torch.Tensor:
    """(B, Tk) bool: each key real with probability ``real``, so that some queries see only pads."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(case.batch, case.tk, generator=generator) < real).to(device)


@pytest.mark.req("ATTN-13")
@both_paths
@example(case=spanning_tiles(), seed=2, real=0.5, dtype=torch.float32, causal=True)
@example(case=spanning_tiles(), seed=3, real=0.5, dtype=torch.float64, causal=False)
@given(
    case=st.one_of(attn_cases(), blind_query_cases(max_t=6)),
    seed=seeds,
    real=st.sampled_from([0.0, 0.4, 0.7, 1.0]),
    dtype=st.sampled_from(full_precision()),
    causal=st.sampled_from([True, True, False]),
)
def test_a_padding_mask_hides_the_pads_keys(case, seed, real, dtype, causal, device):
    """What the model's padded batches need: the pads' keys are never seen, and a query that sees
    only pads (one before every real token) outputs 0, with or without sinks, causal or not."""
    q, k, v, sinks = case.make(device, dtype)
    padding_mask = padding_masks(case, seed, real, device)
    kwargs = case.keywords(sinks, device, causal=causal)  # the case's documents too
    out = scaled_dot_product_attention(q, k, v, **kwargs, padding_mask=padding_mask)
    kwargs = dict(kwargs, padding_mask=padding_mask.cpu())
    golden, _ = attention_oracle(q, k, v, **kwargs)
    reference = golden if dtype == torch.float64 else attention_oracle(q, k, v, dtype=dtype, **kwargs)[0]
    assert_golden(out, golden, reference, f"output with padding_mask {padding_mask.int().tolist()} ({dtype})")
