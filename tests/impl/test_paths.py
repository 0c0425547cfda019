"""The attention paths: which one runs, what each tile is given, and that they agree (ATTN-12).

Every other attention property runs on both paths through the `attention_path` fixture
(conftest.py); this module pins the tiled path's own contract with tiles of 1 to 6 queries.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from attnspec.impl import AttentionOptions
from attnspec.impl import attention as impl_attention
from attnspec.impl import scaled_dot_product_attention as sdpa
from attnspec.kit.asserts import assert_close
from attnspec.kit.patching import recorded_calls
from attnspec.kit.strategies import FULL_PRECISION, AttnCase, attn_cases
from attnspec.specs.oracle import visible_keys

# These properties check impl/ beyond the attention core: they run only with --impl impl.



def expected_calls(tq: int, tk: int, tile: int, window: int | None) -> list[tuple[int, int]]:
    """(queries, keys) of each explicit computation, in any order: all keys at once, or per tile
    of queries the keys that one of them may see (the oracle's visible keys, joined over the tile)."""
    if not tile < tq <= tk:
        return [(tq, tk)]
    calls = []
    for start in range(0, tq, tile):
        rows = range(start, min(start + tile, tq))
        seen = set().union(*(visible_keys(i, tq, tk, window=window) for i in rows))
        calls.append((len(rows), len(seen)))
    return calls


def explicit_calls(tile: int):
    """Tiles of ``tile`` queries; yields the (queries, keys) of every explicit computation."""
    shapes = lambda q, k, v, *_, **__: (q.shape[2], k.shape[2])  # noqa: E731
    return recorded_calls(impl_attention, "explicit_attention", shapes, QUERY_TILE=tile)


def _case(tq: int, tk: int, window: int | None) -> AttnCase:
    return AttnCase(
        batch=1,
        n_heads=2,
        n_kv_heads=1,
        tq=tq,
        tk=tk,
        head_dim=2,
        dv=3,
        window=window,
        use_sinks=True,
        seed=1,
    )


@pytest.mark.req("ATTN-12")
@given(case=attn_cases(max_t=16), tile=st.integers(1, 6), dtype=st.sampled_from(FULL_PRECISION))
# Windows that cut tiles off from their prefix (run first, and under the mutation profile too):
# exactly one tile of queries, several tiles over a long prefix, and decode-style Tq < Tk.
@example(case=_case(3, 8, 2), tile=3, dtype=torch.float64)
@example(case=_case(12, 12, 3), tile=4, dtype=torch.float64)
@example(case=_case(5, 9, 2), tile=2, dtype=torch.float32)
def test_each_tile_is_given_exactly_the_keys_its_queries_may_see(device, case, tile, dtype):
    q, k, v, sinks = case.make(device, dtype)
    with explicit_calls(tile) as calls:
        out = sdpa(q, k, v, window=case.window, sinks=sinks)
    expected = expected_calls(case.tq, case.tk, tile, case.window)
    assert sorted(calls) == sorted(expected), f"tile {tile}: (queries, keys) {calls}, expected {expected}"
    options = AttentionOptions(window=case.window, sinks=sinks)
    reference, _ = impl_attention.explicit_attention(q, k, v, options)
    assert_close(out, reference, f"tiles of {tile} queries vs the explicit formula")


@pytest.mark.req("ATTN-12")
@given(case=attn_cases(max_t=8), tile=st.integers(1, 3))
def test_weights_and_non_causal_attention_take_the_explicit_path(device, case, tile):
    """Weights are a (Tq, Tk) matrix and full attention has no prefix to cut: never tiled."""
    q, k, v, sinks = case.make(device, torch.float64)
    with explicit_calls(tile) as calls:
        sdpa(q, k, v, window=case.window, sinks=sinks, return_weights=True)
        sdpa(q, k, v, causal=False, sinks=sinks)
    assert calls == [(case.tq, case.tk)] * 2, f"tile {tile}: (queries, keys) {calls}"


@pytest.mark.req("ATTN-10", "ATTN-12")
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("tile", [2, 1 << 30])
def test_every_mask_is_built_on_the_device_of_q(causal, tile):
    """On a GPU a mask built on the CPU fails at the first add; on the CPU nothing would show it,
    so the masks' device is read at the call ("meta" stands in for a second device)."""
    q, k, v, _ = _case(6, 6, None).make("meta", torch.float32)
    # non-causal attention needs a mask only for the pads' keys
    pads = None if causal else torch.ones(1, 6, dtype=torch.bool, device="meta")
    device_of = lambda *_, **kwargs: kwargs.get("device")  # noqa: E731
    with recorded_calls(impl_attention, "attention_mask", device_of, QUERY_TILE=tile) as made:
        sdpa(q, k, v, causal=causal, padding_mask=pads)
    assert made and all(device == q.device for device in made), f"masks built on {made}, q on {q.device}"


def first_masked_key(tq: int, tk: int, causal: bool, window: int | None) -> int:
    """The first key that some query which sees a key may not see (Tk when every such query sees every
    key): the mask M is 0 on the keys before it."""
    seeing = [visible_keys(i, tq, tk, causal, window) for i in range(tq)]
    seeing = [keys for keys in seeing if keys]
    unseen = [j for j in range(tk) if any(j not in keys for keys in seeing)]
    return min(unseen, default=tk)


@pytest.mark.req("ATTN-12")
@given(case=attn_cases(max_t=12), causal=st.booleans())
@example(case=_case(1, 5, 5), causal=True)  # one decoding query whose window reaches key 0: no mask
@example(case=_case(1, 6, 5), causal=True)  # ... and one whose window cuts key 0 off
@example(case=_case(4, 4, None), causal=True)
def test_the_mask_is_added_from_the_first_key_some_query_may_not_see(device, case, causal):
    """The explicit formula adds M only where it is not 0 everywhere: a causal mask leaves every key up
    to the first query's position to every query, and one decoding query over the W keys of its window
    needs no mask at all.  The shapes of the masks added tell which keys got one."""
    window = case.window if causal else None
    q, k, v, sinks = case.make(device, torch.float64)
    mask_shape = lambda allowed: tuple(allowed.shape)  # noqa: E731
    with recorded_calls(impl_attention, "additive_mask", mask_shape) as masks:
        options = AttentionOptions(causal=causal, window=window, sinks=sinks)
        impl_attention.explicit_attention(q, k, v, options)
    seeing = case.tq if not causal else min(case.tq, case.tk)  # the blind queries are cut off first
    first = first_masked_key(case.tq, case.tk, causal, window)
    expected = [] if first == case.tk else [(seeing, case.tk - first)]  # no mask that would add only 0
    assert masks == expected, (
        f"Tq={case.tq}, Tk={case.tk}, causal={causal}, window={window}: masks {masks} added, expected "
        f"one on keys {first}..{case.tk - 1}"
    )
