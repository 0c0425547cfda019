"""Deliberately broken copies of the torch adapter, each with another legitimate convention:
the conformance kit must fail them and name the convention (meta_tests/test_conformance.py).

    pytest properties --impl properties.meta_tests.broken_targets:INCLUSIVE_WINDOW
"""

from __future__ import annotations

from dataclasses import replace

import torch.nn.functional as F

from properties.adapters.torch_sdpa import TARGET, attention


def inclusive_window(q, k, v, *, window=None, **kwargs):
    """A window of W+1 keys: query p sees p-W <= j <= p."""
    return attention(q, k, v, window=None if window is None else window + 1, **kwargs)


def tiled_gqa(q, k, v, **kwargs):
    """Query head h reads KV head h % Hkv (k.repeat instead of repeat_interleave)."""
    r = q.shape[1] // k.shape[1]
    return attention(q, k.repeat(1, r, 1, 1), v.repeat(1, r, 1, 1), **kwargs)


def top_left(q, k, v, *, causal=True, window=None, sinks=None, scale=None):
    """torch's is_causal as it is: query i at position i, also when Tq < Tk."""
    if causal and window is None and sinks is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    return attention(q, k, v, causal=causal, window=window, sinks=sinks, scale=scale)


INCLUSIVE_WINDOW = replace(TARGET, attention=inclusive_window)
TILED_GQA = replace(TARGET, attention=tiled_gqa)
TOP_LEFT = replace(TARGET, attention=top_left)
