"""Per-token decode time of one attention block: a full-attention layer vs a W=128 window.

Each round decodes ONE token at a fixed cache length: the setup restores the cache to the
prefilled state (outside the timing), so the cache never grows from round to round.
Benches report times only; they never assert on speed.
"""

from __future__ import annotations

import pytest
import torch

from attnspec.impl import AttentionBlock, KVCache, ModelConfig
from benches.decode_curve import SIZES, allocated_bytes, held_bytes

WINDOW = 128
MAX_LEN = 4096 + 1  # room for the largest prefill plus the decoded token
PREFILL_CHUNK = 512


def make_block(kind: str) -> AttentionBlock:
    torch.manual_seed(0)
    window = None if kind == "full" else WINDOW
    block = AttentionBlock(ModelConfig(window=window, window_layers="all", **SIZES), layer_idx=0)
    return block.eval()


def prefill(block: AttentionBlock, length: int) -> KVCache:
    cache = block.new_cache(MAX_LEN)
    prompt = torch.randn(1, length, block.config.d_model, generator=torch.Generator().manual_seed(1))
    for start in range(0, length, PREFILL_CHUNK):
        block(prompt[:, start : start + PREFILL_CHUNK], offset=start, cache=cache)
    return cache


def buffers(cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
    """The cache's key and value buffers (all their slots), written in place by each decode."""
    assert cache.buffers is not None, "the cache was never written"
    return cache.buffers


@pytest.mark.parametrize("length", [512, 4096])
@pytest.mark.parametrize("kind", ["full", f"window{WINDOW}"])
def test_decode_one_token(benchmark, kind: str, length: int) -> None:
    with torch.no_grad():
        block = make_block(kind)
        cache = prefill(block, length)
        keys, values = buffers(cache)
        slot = length if cache.window is None else length % cache.window  # the one the round writes
        saved_k, saved_v = keys[:, :, slot].clone(), values[:, :, slot].clone()
        token = torch.randn(1, 1, block.config.d_model, generator=torch.Generator().manual_seed(2))

        def restore():
            # Undo the previous round: the slot it wrote (a ring slot evicts a position) and the length.
            keys[:, :, slot] = saved_k
            values[:, :, slot] = saved_v
            cache.length = length
            return (token,), {"offset": length, "cache": cache}

        benchmark.extra_info.update(
            kind=kind,
            cache_length=length,
            positions_held=cache.held(),
            cache_held_bytes=held_bytes(cache),
            cache_allocated_bytes=allocated_bytes(cache),
        )
        prefilled_k, prefilled_v = keys.clone(), values.clone()
        out = benchmark.pedantic(block, setup=restore, rounds=50, iterations=1, warmup_rounds=5)
        assert out.shape == token.shape  # the decode ran; no assertion on its speed
        assert cache.length == length + 1
        restore()  # every round started from the prefilled cache, not a grown one
        assert buffers(cache)[0] is keys and buffers(cache)[1] is values  # restored in place
        assert torch.equal(keys, prefilled_k) and torch.equal(values, prefilled_v)
