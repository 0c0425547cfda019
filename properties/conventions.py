"""Other legitimate attention conventions, and which one a failing output follows.

When an output misses the oracle, these re-run the oracle under a neighbouring convention (a window of
W+1 or W-1 keys, tile-style GQA, top-left alignment, interleaved RoPE pairs) and name the one the
output matches, so that a failure says "convention mismatch" instead of describing a bug."""

from __future__ import annotations

from collections.abc import Callable

import torch

from specs.oracle import attention_layer_oracle, attention_oracle, rope_oracle


def first_match(out: torch.Tensor, golden: torch.Tensor, candidates) -> str | None:
    """The description of the first (description, expected output thunk) that ``out`` matches,
    within a loose tolerance of its dtype (a convention changes outputs by far more); None if none.
    A candidate that matches ``golden`` (attnspec's convention) just as well is no explanation on
    this case (a window wider than the sequence, RoPE pairs of one feature pair) and is skipped."""
    tolerance = 1e-6 if out.dtype == torch.float64 else 1e-3 if out.dtype == torch.float32 else 3e-2

    def matches(actual: torch.Tensor, expected: torch.Tensor) -> bool:
        err = (actual.detach().cpu().double() - expected).abs().max().item()
        return err <= tolerance * max(1.0, expected.abs().max().item())

    for description, expected_output in candidates:
        expected = expected_output()
        if matches(out, expected) and not matches(golden, expected):
            return description
    return None


def window_candidates(window: int | None, oracle: Callable) -> list:
    """The windows one key too wide and one too narrow, as convention_mismatch candidates."""
    if window is None:
        return []
    inclusive = f"a window of W+1 = {window + 1} keys (p-W <= j <= p: an inclusive bound)"
    candidates = [(inclusive, lambda: oracle(window=window + 1))]
    if window > 1:
        candidates.append((f"a window of W-1 = {window - 1} keys", lambda: oracle(window=window - 1)))
    return candidates


INTERLEAVED = "interleaved RoPE pairs (x_2i, x_2i+1), as GPT-J and Meta's original Llama code rotate"
TILED_GQA = "tile-style GQA (query head h reads KV head h % Hkv, like k.repeat)"


def convention_mismatch(
    out: torch.Tensor, golden: torch.Tensor, q, k, v, *, causal=True, window=None, sinks=None, scale=None
):
    """The other, legitimate attention convention that ``out`` follows, if it follows one: a window
    of W+1 or W-1 keys, tile-style GQA, or top-left alignment; None if none explains it."""
    tq, tk, r = q.shape[2], k.shape[2], q.shape[1] // k.shape[1]
    same = {"causal": causal, "window": window, "sinks": sinks, "scale": scale}

    def oracle(q=q, k=k, v=v, **change):
        return attention_oracle(q, k, v, **{**same, **change})[0]

    def top_left():  # query i at position i: the bottom-right oracle of row i over keys 0..i
        return torch.cat(
            [oracle(q[:, :, i : i + 1], k[:, :, : i + 1], v[:, :, : i + 1]) for i in range(tq)], dim=2
        )

    candidates = window_candidates(window, oracle) if causal else []
    if r > 1:
        candidates.append((TILED_GQA, lambda: oracle(k=k.repeat(1, r, 1, 1), v=v.repeat(1, r, 1, 1))))
    if causal and tq != tk:
        candidates.append(("top-left alignment (query i at position i, like torch's is_causal)", top_left))
    return first_match(out, golden, candidates)


def layer_convention_mismatch(
    out: torch.Tensor, golden: torch.Tensor, x: torch.Tensor, **layer
) -> str | None:
    """convention_mismatch for a whole layer (``layer``: the keywords of attention_layer_oracle):
    interleaved RoPE pairs, a window of W+1 or W-1 keys, or tile-style GQA."""

    def oracle(**change):
        return attention_layer_oracle(x, **{**layer, **change})

    candidates = [(INTERLEAVED, lambda: oracle(pairs="interleaved"))]
    candidates += window_candidates(layer["window"], oracle)
    if layer["n_heads"] != layer["n_kv_heads"]:
        candidates.append((TILED_GQA, lambda: oracle(gqa="tiled")))
    return first_match(out, golden, candidates)


def rope_convention_mismatch(
    out: torch.Tensor, golden: torch.Tensor, x: torch.Tensor, positions: list[int], base: float
) -> str | None:
    """convention_mismatch for RoPE alone: interleaved pairs."""
    candidates = [(INTERLEAVED, lambda: rope_oracle(x, positions, base, pairs="interleaved"))]
    return first_match(out, golden, candidates)


CONVENTIONS = (
    "bottom-right queries, p-W < j <= p, KV head h // r and half-split RoPE pairs "
    "(CONVENTIONS.md in the attnspec repository)"
)
