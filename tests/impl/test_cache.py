"""The KV cache and streaming decode: CACHE-1..3 and ERR-3.

Prefill a prompt into an empty cache, then feed the rest of the sequence in chunks (one token
at a time included), each at the offset that continues it.  A windowed layer keeps only the
last W positions, so decoding past W exercises eviction; RoPE must keep absolute positions.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from attnspec.impl import AttentionBlock, KVCache, ModelConfig, TransformerStack
from attnspec.kit.asserts import assert_close, assert_exactly_equal, assert_golden
from attnspec.kit.messages import message_names
from attnspec.kit.references import (
    block_oracle,
    block_variants,
    mlp_oracle,
    scheduled_window,
    stack_oracle,
)
from attnspec.kit.strategies import (
    FULL_PRECISION,
    BlockCase,
    block_cases,
    chunk_lists,
    noise_like,
    packed_documents,
    packed_ids,
    seeded_randn,
    split_sequence,
)
from attnspec.specs.oracle import block_qkv_oracle, cache_positions_oracle

# These properties check impl/ beyond the attention core: they run only with --impl impl.  Those that
# run causal attention over more than one tile's queries run on each attention path (explicit and
# tiled; see conftest.py); the checks of configurations, errors and MLP blocks run once.

both_paths = pytest.mark.usefixtures("attention_path")

float_dtypes = st.sampled_from(FULL_PRECISION)
KINDS = ("attention", "transformer", "stack")

# Long streams past a small window, GQA (4 query heads on 2 KV heads) and sinks.
_STREAM = BlockCase(
    d_model=16,
    n_heads=4,
    n_kv_heads=2,
    head_dim=4,
    n_layers=2,
    window=2,
    window_layers="even",
    use_sinks=True,
    activation="swiglu",
    batch=2,
    seq=24,
    seed=3,
)
_ALL_WINDOWED = replace(_STREAM, window=3, window_layers="all", n_layers=3, seed=4)


def new_cache(kind: str, module: torch.nn.Module, max_len: int):
    """An empty cache for the module: one KVCache, or a list of them for a stack."""
    return module.attn.new_cache(max_len) if kind == "transformer" else module.new_cache(max_len)


def decode(module: torch.nn.Module, x: torch.Tensor, chunks: list[int], cache) -> list[torch.Tensor]:
    """The prompt x[:, :chunks[0]] at the default offset, then each chunk at the offset that
    continues the sequence; the outputs, one per chunk."""
    with torch.no_grad():
        outs = [module(x[:, : chunks[0]], cache=cache)]
        start = chunks[0]
        for size in chunks[1:]:
            outs.append(module(x[:, start : start + size], start, cache))
            start += size
    return outs


def whole_sequence_oracle(kind: str, module, cfg: ModelConfig, layer_idx: int, x, dtype=torch.float64):
    """The oracle's output for the whole sequence in one pass (offset 0)."""
    if kind == "attention":
        return block_oracle(module, cfg, layer_idx, x, 0, dtype)
    if kind == "transformer":
        return mlp_oracle(module.mlp, cfg, block_oracle(module.attn, cfg, layer_idx, x, 0, dtype), dtype)
    return stack_oracle(module, cfg, x, 0, dtype)


def layer_caches(cache) -> list[KVCache]:
    return cache if isinstance(cache, list) else [cache]


# --------------------------------------------------------------------------- CACHE-1


@pytest.mark.req("CACHE-1")
@both_paths
@given(
    kind=st.sampled_from(KINDS),
    case=block_cases(max_seq=14),
    layer_idx=st.integers(0, 3),
    sizes=chunk_lists,
    spare=st.integers(0, 20),
    dtype=float_dtypes,
)
@example(kind="stack", case=_STREAM, layer_idx=0, sizes=[1], spare=0, dtype=torch.float64)
@example(kind="stack", case=_ALL_WINDOWED, layer_idx=0, sizes=[2, 7, 1, 3], spare=5, dtype=torch.float32)
@example(kind="attention", case=_STREAM, layer_idx=0, sizes=[5, 3, 2], spare=1, dtype=torch.float32)
def test_decoding_in_chunks_equals_one_pass_over_the_whole_sequence(
    device, kind, case, layer_idx, sizes, spare, dtype
):
    """Prefill, then chunks: the concatenated outputs equal the oracle's single pass."""
    module = case.module(kind, layer_idx, device, dtype)
    cfg = case.config()
    x = case.input(device, dtype)
    chunks = split_sequence(case.seq, sizes)
    outs = decode(module, x, chunks, new_cache(kind, module, case.seq + spare))
    decoded = torch.cat(outs, dim=1)
    assert decoded.dtype == dtype and decoded.device == x.device
    golden = whole_sequence_oracle(kind, module, cfg, layer_idx, x)
    ref_lowp = whole_sequence_oracle(kind, module, cfg, layer_idx, x, dtype)
    what = (
        f"{kind} (layer {layer_idx}, window {cfg.window} on {cfg.window_layers}) decoded in chunks {chunks}"
    )
    assert_golden(decoded, golden, ref_lowp, f"{what} vs one pass of the oracle")


@pytest.mark.req("ATTN-16", "CACHE-1")
@both_paths
@given(kind=st.sampled_from(KINDS), case=block_cases(max_seq=14), data=st.data(), sizes=chunk_lists)
@example(kind="stack", case=_STREAM, data=None, sizes=[5, 1, 7])
def test_a_packed_row_gives_each_document_what_it_gives_alone(device, kind, case, data, sizes):
    """Packed sequences through the block and the stack: each document's outputs are the ones it gets
    alone (its tokens keep the row's positions, which RoPE and ALiBi see as distances only), in one pass
    and decoded in chunks through the cache with the documents so far."""
    module = case.module(kind, 0, device, torch.float64)
    x = case.input(device, torch.float64)
    lengths = ((3, 1, 9, 2, 9), (24,)) if data is None else data.draw(packed_documents(case.batch, case.seq))
    ids = packed_ids(lengths, case.batch, case.seq, device)
    chunks = split_sequence(case.seq, sizes)
    with torch.no_grad():
        full = module(x, document_ids=ids)
        cache, start, outs = new_cache(kind, module, case.seq), 0, []
        for size in chunks:
            stop = start + size
            outs.append(module(x[:, start:stop], start, cache, document_ids=ids[:, :stop]))
            start = stop
        for row in range(case.batch):
            row_ids = ids[row].tolist()
            edges = [0, *(j for j in range(1, case.seq) if row_ids[j] != row_ids[j - 1]), case.seq]
            for lo, hi in zip(edges, edges[1:], strict=False):
                alone = module(x[row : row + 1, lo:hi])
                what = f"{kind}: tokens {lo}..{hi - 1} of row {row} (documents {row_ids}) vs alone"
                assert_close(full[row : row + 1, lo:hi], alone, what)
    assert_close(torch.cat(outs, dim=1), full, f"{kind}: the packed row decoded in chunks {chunks}")


@pytest.mark.req("CACHE-1")
@both_paths
@given(case=block_cases(max_seq=8), prompt=st.integers(1, 8), dtype=float_dtypes)
def test_stack_prefill_is_a_forward_pass_that_fills_one_cache_per_layer(device, case, prompt, dtype):
    """stack.prefill(prompt) returns the plain forward pass and caches that decode on correctly."""
    stack = case.module("stack", 0, device, dtype)
    cfg = case.config()
    x = case.input(device, dtype)
    prompt = min(prompt, case.seq)
    with torch.no_grad():
        out, cache = stack.prefill(x[:, :prompt], case.seq)
        assert [c.window for c in cache] == [scheduled_window(cfg, i) for i in range(cfg.n_layers)]
        assert [c.length for c in cache] == [prompt] * cfg.n_layers
        rest = stack(x[:, prompt:], prompt, cache) if prompt < case.seq else x[:, :0]
    golden = stack_oracle(stack, cfg, x)
    ref_lowp = stack_oracle(stack, cfg, x, dtype=dtype)
    assert_golden(torch.cat([out, rest], dim=1), golden, ref_lowp, f"prefill {prompt} then one chunk")


# --------------------------------------------------------------------------- CACHE-2


@pytest.mark.req("CACHE-2")
@both_paths
@given(
    case=block_cases(max_seq=14),
    layer_idx=st.integers(0, 1),
    sizes=chunk_lists,
    spare=st.integers(0, 20),
    dtype=float_dtypes,
)
@example(case=_STREAM, layer_idx=0, sizes=[1], spare=0, dtype=torch.float64)
@example(case=_STREAM, layer_idx=0, sizes=[3, 7, 1], spare=9, dtype=torch.float64)
def test_cache_holds_the_last_w_positions_rotated_by_their_absolute_position(
    device, case, layer_idx, sizes, spare, dtype
):
    """After each chunk: exactly positions max(0, n-W)..n-1 (or 0..n-1), no buffer larger than
    that allows, keys equal to RoPE(k_p, p) for their absolute p, values unrotated."""
    block = case.module("attention", layer_idx, device, dtype)
    cfg = case.config()
    window = scheduled_window(cfg, layer_idx)
    x = case.input(device, dtype)
    max_len = case.seq + spare
    cache = block.new_cache(max_len)
    assert cache.window == window and cache.max_len == max_len and cache.held() == 0
    params = dict(
        norm_weight=block.norm.weight,
        eps=cfg.norm_eps,
        w_qkv=block.qkv.weight,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim,
        base=cfg.rope_base,
        **block_variants(block, cfg),
    )
    _, golden_k, golden_v = block_qkv_oracle(x, **params)
    _, lowp_k, lowp_v = block_qkv_oracle(x, **params, dtype=dtype)
    seen = 0
    for size in split_sequence(case.seq, sizes):
        with torch.no_grad():
            block(x[:, seen : seen + size], seen, cache)
        seen += size
        held = cache_positions_oracle(seen, window)
        what = f"window {window}, after {seen} positions"
        assert cache.length == seen, f"{what}: length {cache.length}"
        assert cache.positions().tolist() == held, f"{what}: holds {cache.positions().tolist()}"
        assert cache.held() == len(held), f"{what}: held() = {cache.held()}"
        slots = cache.buffers[0].shape[2]
        assert slots <= (max_len if window is None else min(window, max_len)), f"{what}: {slots} slots"
        keys, values = cache.keys_values()
        assert_golden(keys, golden_k[:, :, held], lowp_k[:, :, held], f"{what}: keys vs RoPE(k_p, p)")
        assert_golden(values, golden_v[:, :, held], lowp_v[:, :, held], f"{what}: values")


chunks = st.lists(st.integers(1, 7), min_size=1, max_size=6)


@pytest.mark.req("CACHE-2")
@given(window=st.one_of(st.none(), st.integers(1, 5)), sizes=chunks, any_order=st.booleans())
@example(window=4, sizes=[1, 1, 1, 1], any_order=False)  # the window just filled: still the buffer itself
@example(window=4, sizes=[1, 1, 1, 1, 1], any_order=False)  # the first eviction
@example(window=4, sizes=[1, 1, 1, 1, 1, 1], any_order=True)  # the ring as it lies, not rolled
@example(window=None, sizes=[3, 2, 1], any_order=False)
def test_update_hands_attention_the_positions_its_queries_may_see(window, sizes, any_order):
    """After a chunk of C positions, update returns the keys and values of every position the chunk's
    queries may see, oldest first: one decoded token gets exactly positions p-W+1 .. p (or 0 .. p), a
    longer chunk the positions held before it and its own.  A full layer's, and a decoded token's while
    the oldest position it sees sits in slot 0, are the cache's own buffers rather than a copy; with
    any_order a decoded token's always are, in slot order (position p in slot p % W).  Each key and
    value holds its position."""
    cache = KVCache(64, window)
    seen = 0
    for size in sizes:
        k = torch.arange(seen, seen + size, dtype=torch.float32)[None, None, :, None].expand(1, 2, size, 3)
        order = {"any_order": True} if any_order else {}  # oldest first is the default
        keys, values = cache.update(k, k[..., :2] + 0.5, seen, **order)
        if size == 1 or window is None:  # the last W: what the query at the new position sees
            expected = cache_positions_oracle(seen + size, window)
            if any_order:  # in their slots' order
                expected.sort(key=lambda p: p % cache.buffers[0].shape[2])
        else:  # what the cache held before the chunk, then the chunk
            expected = cache_positions_oracle(seen, window) + list(range(seen, seen + size))
        seen += size
        what = f"window {window}, chunks {sizes}, any_order={any_order}, after {seen} positions"
        got_keys, got_values = keys[0, 0, :, 0].tolist(), (values[0, 0, :, 0] - 0.5).tolist()
        assert got_keys == expected, f"{what}: keys of positions {got_keys}"
        assert got_values == expected, f"{what}: values of positions {got_values}"
        if window is None or (size == 1 and (any_order or expected[0] % window == 0)):
            buffer_k, buffer_v = cache.buffers
            assert keys.data_ptr() == buffer_k.data_ptr() and values.data_ptr() == buffer_v.data_ptr(), (
                f"{what}: update copied the keys and values"
            )


# --------------------------------------------------------------------------- CACHE-3


@pytest.mark.req("CACHE-3")
@both_paths
@given(
    kind=st.sampled_from(KINDS),
    case=block_cases(max_seq=12),
    layer_idx=st.integers(0, 1),
    sizes=chunk_lists,
    cut=st.integers(1, 11),
)
@example(kind="stack", case=_STREAM, layer_idx=0, sizes=[1], cut=5)
@example(kind="stack", case=_STREAM, layer_idx=0, sizes=[5, 3, 2], cut=6)  # cut inside chunk [5, 8)
def test_later_tokens_never_change_what_decoding_returned(device, kind, case, layer_idx, sizes, cut):
    """Outputs already returned stay bitwise the same while decoding goes on, and a run whose
    tokens from position ``cut`` on differ (same chunks; ``cut`` may fall inside a chunk), once
    decoded to the end, returned bitwise the same outputs at every position before ``cut``."""
    assume(case.seq > 1)
    cut = 1 + (cut - 1) % (case.seq - 1)  # a position in 1..seq-1, whatever seq was drawn
    module = case.module(kind, layer_idx, device, torch.float64)
    x = case.input(device, torch.float64)
    chunks = split_sequence(case.seq, sizes)
    other = torch.cat([x[:, :cut], noise_like(x[:, cut:], case.seed + 7)], dim=1)

    cache = new_cache(kind, module, case.seq)
    outs, kept = [], []
    with torch.no_grad():
        start = 0
        for size in chunks:
            outs.append(module(x[:, start : start + size], start, cache))
            kept.append(outs[-1].clone())
            start += size
    # Both runs decode the whole sequence, each with its own continuation, before any output is
    # compared: the chunk that holds ``cut`` sees different tokens after it in each run.
    other_outs = decode(module, other, chunks, new_cache(kind, module, case.seq))
    for i, (out, copy) in enumerate(zip(outs, kept, strict=True)):
        assert_exactly_equal(out, copy, f"output of chunk {i} after decoding went on")
    assert_exactly_equal(
        torch.cat(other_outs, dim=1)[:, :cut],
        torch.cat(outs, dim=1)[:, :cut],
        f"positions 0..{cut - 1} (chunks {chunks}) with different tokens from position {cut} on",
    )


@pytest.mark.req("CACHE-3")
@both_paths
@given(kind=st.sampled_from(KINDS), case=block_cases(max_seq=10), sizes=chunk_lists, batch=st.integers(1, 3))
def test_a_reset_cache_behaves_like_a_new_one(device, kind, case, sizes, batch):
    """Decode one sequence, reset, decode another (any batch size): bitwise what a new cache gives."""
    module = case.module(kind, 0, device, torch.float64)
    x = case.input(device, torch.float64)
    second = seeded_randn(case.seed + 5, batch, case.seq, case.d_model, device=device, dtype=torch.float64)
    chunks = split_sequence(case.seq, sizes)
    cache = new_cache(kind, module, case.seq)
    decode(module, x, chunks, cache)
    for layer in layer_caches(cache):
        layer.reset()
        assert layer.length == 0 and layer.held() == 0 and layer.positions().tolist() == []
        with pytest.raises(ValueError, match=message_names("cache", "empty", "reset")):
            layer.keys_values()
    again = decode(module, second, chunks, cache)
    fresh = decode(module, second, chunks, new_cache(kind, module, case.seq))
    for i, (a, b) in enumerate(zip(again, fresh, strict=True)):
        assert_exactly_equal(a, b, f"chunk {i} through a reset cache vs a new one")


# --------------------------------------------------------------------------- ERR-3


def _filled(window: int | None = None, length: int = 3, max_len: int = 8, shape=(2, 3, 4), dv: int = 4):
    """A cache that has seen ``length`` positions of keys (B, Hkv, ., d) and values (., dv)."""
    batch, heads, d = shape
    cache = KVCache(max_len, window)
    cache.update(torch.zeros(batch, heads, length, d), torch.zeros(batch, heads, length, dv), 0)
    return cache


def _kv(batch=2, heads=3, t=1, d=4, dv=4, dtype=torch.float32, device="cpu"):
    k = torch.zeros(batch, heads, t, d, dtype=dtype, device=device)
    return k, torch.zeros(batch, heads, t, dv, dtype=dtype, device=device)


@pytest.mark.req("ERR-3")
@pytest.mark.parametrize("max_len", [0, -1, True, 2.0, "3", None])
def test_cache_refuses_a_max_len_that_is_not_a_positive_int(max_len):
    with pytest.raises(ValueError, match=message_names("max_len", max_len)):
        KVCache(max_len)


@pytest.mark.req("ERR-3")
@pytest.mark.parametrize(
    "window, error", [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_cache_refuses_a_window_that_is_not_a_positive_int_or_none(window, error):
    with pytest.raises(error, match=message_names("window", window)):
        KVCache(4, window)


@pytest.mark.req("ERR-3")
@pytest.mark.parametrize("window", [None, 1, 5])
def test_cache_accepts_the_edges_of_its_ranges(window):
    """max_len 1, a window of 1, values of another width than the keys: all legitimate."""
    assert KVCache(1, window).max_len == 1
    cache = _filled(window, length=2, max_len=3, dv=7)
    keys, values = cache.update(*_kv(dv=7), 2)  # exactly max_len positions
    assert cache.length == 3 and values.shape[-1] == 7 and keys.shape[-1] == 4


@pytest.mark.req("ERR-3")
@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("offset", [0, 2, 4, 30, -3, True, 3.0, "3"])
def test_cache_refuses_an_offset_that_does_not_continue_it(window, offset):
    """After 3 positions only offset 3 continues the sequence (not a bool or a float 3.0)."""
    cache = _filled(window, length=3)
    with pytest.raises(ValueError, match=message_names("offset", offset, "3")):
        cache.update(*_kv(), offset)
    assert cache.length == 3, "a refused update changed the cache"


@pytest.mark.req("ERR-3")
def test_cache_refuses_bool_offsets_at_position_1():
    cache = _filled(length=1)
    with pytest.raises(ValueError, match=message_names("offset", True)):
        cache.update(*_kv(), True)


@pytest.mark.req("ERR-3")
@pytest.mark.parametrize("window", [None, 2])
def test_cache_refuses_positions_past_max_len(window):
    cache = _filled(window, length=3, max_len=4)
    with pytest.raises(ValueError, match=message_names("max_len", 4, "3..4")):
        cache.update(*_kv(t=2), 3)
    with pytest.raises(ValueError, match=message_names("max_len", 1)):
        KVCache(1, window).update(*_kv(t=2), 0)


@pytest.mark.req("ERR-3")
@pytest.mark.parametrize(
    "change, words",
    [
        ({"batch": 1}, ("batch size", 1, 2)),
        ({"heads": 1}, ("number of KV heads", 1, 3)),
        ({"d": 6}, ("key head_dim", 6, 4)),
        ({"dv": 2}, ("value head_dim", 2, 4)),
    ],
)
@pytest.mark.parametrize("window", [None, 2])
def test_cache_refuses_keys_of_another_shape_than_it_holds(change, words, window):
    cache = _filled(window)
    with pytest.raises(ValueError, match=message_names(*words)):
        cache.update(*_kv(**change), 3)


@pytest.mark.req("ERR-3")
def test_cache_refuses_another_dtype_or_device_than_it_holds():
    cache = _filled()
    with pytest.raises(TypeError, match=message_names("dtype", "torch.float64", "torch.float32")):
        cache.update(*_kv(dtype=torch.float64), 3)
    with pytest.raises(ValueError, match=message_names("device", "meta", "cpu")):
        cache.update(*_kv(device="meta"), 3)


@pytest.mark.req("ERR-3")
@pytest.mark.parametrize(
    "k, v, words",
    [
        (torch.zeros(2, 3, 4), torch.zeros(2, 3, 1, 4), ("k", "(2, 3, 4)")),
        (torch.zeros(2, 3, 1, 4), torch.zeros(3, 1, 4), ("v", "(3, 1, 4)")),
        ([[0.0]], torch.zeros(2, 3, 1, 4), ("k", "list")),
        (torch.zeros(2, 3, 1, 4), torch.zeros(2, 3, 2, 4), ("do not match", "(2, 3, 1, 4)", "(2, 3, 2, 4)")),
        (torch.zeros(2, 3, 1, 4), torch.zeros(2, 2, 1, 4), ("do not match", "(2, 2, 1, 4)")),
        (
            torch.zeros(2, 3, 1, 4),
            torch.zeros(2, 3, 1, 4, dtype=torch.float64),
            ("do not match", "torch.float64"),
        ),
        (torch.zeros(2, 3, 1, 4), torch.zeros(2, 3, 1, 4, device="meta"), ("do not match", "meta")),
        (torch.zeros(2, 3, 0, 4), torch.zeros(2, 3, 0, 4), ("0 positions", "(2, 3, 0, 4)")),
    ],
)
def test_cache_refuses_malformed_keys_and_values(k, v, words):
    cache = KVCache(8, 2)
    with pytest.raises(ValueError, match=message_names(*words)):
        cache.update(k, v, 0)
    assert cache.length == 0 and cache.buffers is None


@pytest.mark.req("ERR-3")
@given(case=block_cases(max_seq=4), other=st.one_of(st.none(), st.integers(1, 6)))
def test_a_layer_refuses_a_cache_made_for_another_window(case, other):
    block = case.module("attention", 0, "cpu", torch.float32)
    assume(other != block.window)  # the matching window is the legitimate case, decoded above
    with pytest.raises(ValueError, match=message_names(f"window={other}", f"window={block.window}")):
        block(case.input(), 0, KVCache(case.seq, other))


@pytest.mark.req("ERR-3")
@pytest.mark.parametrize("n_caches", [0, 1, 3])
def test_a_stack_refuses_a_cache_with_the_wrong_number_of_layers(n_caches):
    stack = TransformerStack(
        ModelConfig(d_model=8, n_heads=2, n_kv_heads=1, head_dim=4, n_layers=2, window=2)
    )
    cache = [KVCache(4, 2) for _ in range(n_caches)]
    with pytest.raises(ValueError, match=message_names("2 layers", f"has {n_caches}")):
        stack(torch.zeros(1, 3, 8), 0, cache)


@pytest.mark.req("ERR-3", "CACHE-1")
def test_a_cache_decodes_only_the_layer_it_was_made_for():
    """new_cache follows the layer schedule: an odd layer's cache is a full one under "even"."""
    cfg = ModelConfig(d_model=8, n_heads=2, n_kv_heads=1, head_dim=4, n_layers=2, window=2)
    assert AttentionBlock(cfg, 1).new_cache(4).window is None
    assert AttentionBlock(cfg, 2).new_cache(4).window == 2
    with pytest.raises(ValueError, match=message_names("window=2", "window=None")):
        AttentionBlock(cfg, 1)(torch.zeros(1, 3, 8), 0, AttentionBlock(cfg, 0).new_cache(4))
