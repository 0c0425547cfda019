"""Hypothesis strategies for blocked, online-softmax kernels (test_kernels.py): attention problems
whose lengths and windows land on the target's block sizes and path switches (kernel_blocks.py), and
logits steered to where such kernels break (the largest one in a late block, all far below zero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from hypothesis import strategies as st

from attnspec.kit.kernel_blocks import block_sizes, boundary_lengths
from attnspec.kit.loading import current
from attnspec.kit.strategies import AttnCase, fit_to_target, packed_documents, seeds

# How the logits of every query run over the keys (steer_logits).
PROFILES = ("rise", "fall", "spike", "high", "low")


def lengths() -> st.SearchStrategy[int]:
    """A sequence length on one of the target's boundaries, or a short one (1..12)."""
    return st.one_of(st.sampled_from(boundary_lengths(current())), st.integers(1, 12))


@st.composite
def kernel_cases(
    draw: st.DrawFn,
    *,
    few_queries: bool = False,
    offset_off_grid: bool = False,
    head_dims: tuple[int, ...] = (1, 2, 3, 4, 5, 8),
    windows: bool = True,
    sinks: bool = True,
) -> AttnCase:
    """An attention problem for a blocked kernel, fitted to the target: Tk on a boundary (or short),
    Tq = Tk, a few queries (decode), or a boundary length below Tk; windows of about a block, so
    their edge cuts through key blocks; GQA groups up to 4.

    ``few_queries``: Tq of 1..3 (a decode step, where kernels take a split-keys path);
    ``offset_off_grid``: Tk - Tq is no multiple of any block size, so the causal diagonal runs
    through key blocks rather than along their corners.  A target with "documents" gets packed
    documents, their edges anywhere and on the block edges."""
    target = current()
    tk = draw(lengths())
    if few_queries:
        tq = draw(st.integers(1, min(3, tk)))
    else:
        below = [n for n in boundary_lengths(target) if n <= tk]
        tq = draw(st.one_of(st.just(tk), st.integers(1, min(3, tk)), st.sampled_from(below)))
    if offset_off_grid:
        tk = off_grid(tk, tq, block_sizes(target))
    n_kv_heads = draw(st.integers(1, 2))
    n_heads = n_kv_heads * draw(st.integers(1, 4))
    head_dim = draw(st.sampled_from(head_dims))
    dv = draw(st.one_of(st.just(head_dim), st.integers(1, 6)))
    window = None
    if windows:
        window = draw(st.one_of(st.none(), windows_near_blocks(), st.integers(1, tk + 1)))
    use_sinks = sinks and draw(st.booleans())
    batch = draw(st.integers(1, 2))
    case = AttnCase(batch, n_heads, n_kv_heads, tq, tk, head_dim, dv, window, use_sinks, draw(seeds))
    if target.supports("documents"):  # document edges on the block edges too
        case = replace(case, documents=draw(packed_documents(batch, tk, tuple(boundary_lengths(target)))))
    return fit_to_target(case)


def windows_near_blocks() -> st.SearchStrategy[int]:
    """A window of 1, 2, or a block size of the target's less one, equal or plus one: its edge then
    cuts through key blocks."""
    near = {max(1, size + n) for size in block_sizes(current()) for n in (-1, 0, 1)}
    return st.sampled_from(sorted(near | {1, 2}))


def off_grid(tk: int, tq: int, sizes: tuple[int, ...]) -> int:
    """The smallest Tk' >= tk for which Tk' - tq is a multiple of no size in ``sizes``."""
    while any((tk - tq) % size == 0 for size in sizes):
        tk += 1
    return tk


@dataclass(frozen=True)
class Steering:
    """How steer_logits shapes the logits: ``profile`` (PROFILES) over a span of ``size``, a spike
    at key ``at`` (a fraction of Tk)."""

    profile: str
    size: float
    at: float = 1.0


def steerings(sizes: tuple[float, ...]) -> st.SearchStrategy[Steering]:
    return st.builds(Steering, st.sampled_from(PROFILES), st.sampled_from(sizes), st.floats(0, 1))


def steer_logits(
    q: torch.Tensor, k: torch.Tensor, steering: Steering, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k whose logits follow ``steering`` (float64, before any rounding to the tested dtype).

    Feature 0 of every query is set to a power of two a and feature 0 of key j to t_j / (scale a),
    so that every logit is about t_j plus the other features' dot product (a ~ sqrt(size / scale) keeps
    both factors within fp16's range while their product may exceed it): t_j rises from 0 to
    ``size`` over the keys ("rise": the running max grows in every key block), falls ("fall": the
    first block holds it), is ``size`` at one key and 0 elsewhere ("spike"), or is +size ("high")
    or -size ("low") at
    every key (far beyond exp's range, above or below)."""
    tk = k.shape[2]
    j = torch.arange(tk, dtype=torch.float64)
    ramp = j / max(tk - 1, 1) * steering.size
    t = {
        "rise": ramp,
        "fall": ramp.flip(0),
        "spike": (j == min(int(steering.at * tk), tk - 1)).double() * steering.size,
        "high": torch.full_like(j, steering.size),
        "low": torch.full_like(j, -steering.size),
    }[steering.profile]
    a = 2.0 ** max(0, round(math.log2(math.sqrt(max(steering.size, 1.0) / scale))))
    q, k = q.clone(), k.clone()
    # Every feature on a grid of 1/8 (the others within +-4), a a power of two: each q . k is then a
    # multiple of 1/64 below 2^17, which float32 holds exactly in any order of summation (and so does
    # the rounding to fp16/bf16, which keeps a multiple of 1/8 one).  Otherwise a logit of 16384 is
    # only known to float32's 0.002, and the target and the oracle would round it differently.
    q[..., 1:] = (q[..., 1:] * 8).round().clamp(-32, 32) / 8
    k[..., 1:] = (k[..., 1:] * 8).round().clamp(-32, 32) / 8
    q[..., 0] = a
    k[..., 0] = (t / (scale * a) * 8).round() / 8
    return q, k


def with_dtype_inputs(case: AttnCase, steering: Steering, scale: float, device, dtype):
    """(q, k, v, sinks) of ``case`` steered (steer_logits), then rounded to ``dtype`` on ``device``."""
    q, k, v, sinks = case.make("cpu", torch.float64)
    q, k = steer_logits(q, k, steering, scale)
    return tuple(None if t is None else t.to(device=device, dtype=dtype) for t in (q, k, v, sinks))


def rebuild_line(case: AttnCase, steering: Steering, scale: float, dtype: torch.dtype) -> str:
    """The one line that rebuilds a steered property's failing inputs, for its failure message."""
    return (
        "rebuild the inputs: from attnspec.kit.kernel_cases import *; q, k, v, sinks = "
        f"with_dtype_inputs({case!r}, {steering!r}, {scale!r}, 'cpu', {dtype})"
    )
