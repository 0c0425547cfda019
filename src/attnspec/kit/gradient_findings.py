"""Where a target's gradients go wrong, for one whose output is right: which of dQ, dK and dV miss the
oracle's, on which problem (a plain causal one, one with sinks, one with GQA), and whether a gradient is
off by exactly the softmax scale.  A hand-written backward (FlashAttention's: a delta pre-pass, a dK/dV
kernel and a dQ kernel, each recomputing the weights from the saved log-sum-exp) breaks in one of those
places, and the failing gradient property alone says only which input its Jacobian misses.
"""

from __future__ import annotations

import math

import torch

from attnspec.kit.conventions import loosely_equal
from attnspec.kit.localisation import probe_randn
from attnspec.kit.references import declared_attention, declared_gradients
from attnspec.kit.target_checks import KEYWORDS
from attnspec.protocol.memory_layouts import as_given
from attnspec.protocol.targets import Target

NAMES = ("dQ", "dK", "dV")

ONLY_DQ = (
    "only dQ is wrong (the output, dK and dV are right): the dQ pass: dS = P * (dP - delta), with delta = "
    "rowsum(dO * O) from the pre-pass, and P recomputed from the saved log-sum-exp under the forward's mask"
)
ONLY_DKDV = (
    "only {names} {are} wrong (the output and dQ are right): the dK/dV pass: dV = P^T dO, dK = dS^T Q "
    "times the softmax scale, over every query block that sees the key block, P under the forward's mask"
)
SCALE_DROPPED = (
    "{name} is off by exactly the softmax scale (the output and the other gradients are right): the scale "
    "left out of {name} (dS scaled for one of dQ and dK, not the other)"
)
EVERY_GRADIENT = (
    "every gradient is wrong while the output is right: the statistics the backward recomputes the weights "
    "from (the saved log-sum-exp{sinks}), or delta = rowsum(dO * O) itself"
)
ONLY_SINKS = (
    "only with sinks (the gradients without them are right, and the output with them): the log-sum-exp "
    "the backward reads must count the sink, its max included, as the forward's softmax did"
)
ONLY_GQA = (
    "only with GQA ({names} wrong where query heads share a KV head; with one query head a KV head they are "
    "right): a KV head's dK and dV sum the gradients of every query head of its group"
)


def _gradients(target: Target, n_heads: int, n_kv_heads: int, sinks: bool, device, dtype):
    """(the target's output, its dQ, dK, dV, the oracle's output, dQ, dK, dV) on a causal problem of 6
    queries over 6 keys; None where the target's output misses the oracle's (not a backward's fault)."""
    d = target.head_size(4)
    n_heads, n_kv_heads = target.head_counts(n_heads, n_kv_heads)
    q = probe_randn(1, n_heads, 6, d, seed=1, dtype=dtype)
    k, v = (probe_randn(1, n_kv_heads, 6, d, seed=seed, dtype=dtype) for seed in (2, 3))
    d_out = probe_randn(1, n_heads, 6, d, seed=4, dtype=dtype)
    keywords = dict(KEYWORDS, sinks=torch.linspace(-1.0, 1.5, n_heads, dtype=dtype) if sinks else None)
    leaves = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
    moved = {name: value.to(device) if torch.is_tensor(value) else value for name, value in keywords.items()}
    with torch.enable_grad(), as_given():
        out = target.attention(*leaves, **moved)
        out = out[0] if isinstance(out, tuple) else out
        grads = torch.autograd.grad(out, leaves, d_out.to(device))
    if not loosely_equal(out.detach(), declared_attention(q, k, v, **keywords)[0]):
        return None
    expected = declared_gradients(q, k, v, d_out, **keywords)[:3]
    return [g.detach().cpu() for g in grads], expected


def gradient_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """For a target with "grad" whose output is right: the first of a plain problem, one with sinks and
    one with GQA whose gradients miss the oracle's, said as the place in a backward it points at."""
    if not target.supports("grad") or target.attention is None:
        return None
    plain = _gradients(target, 2, 2, False, device, dtype)
    if plain is None:
        return None
    grads, expected = plain
    wrong = [name for name, g, e in zip(NAMES, grads, expected, strict=True) if not loosely_equal(g, e)]
    if wrong:
        return _which(wrong, grads, expected, target)
    if target.supports("sinks"):
        with_sinks = _gradients(target, 2, 2, True, device, dtype)
        if with_sinks is not None and not all(map(loosely_equal, *with_sinks)):
            return ONLY_SINKS
    if target.supports("gqa"):
        grouped = _gradients(target, 4, 2, False, device, dtype)
        if grouped is not None:
            wrong = [name for name, g, e in zip(NAMES, *grouped, strict=True) if not loosely_equal(g, e)]
            if wrong:
                return ONLY_GQA.format(names=" and ".join(wrong))
    return None


def _which(wrong: list[str], grads, expected, target: Target) -> str:
    """The finding for the gradients ``wrong`` on the plain problem."""
    if len(wrong) == 3:
        return EVERY_GRADIENT.format(sinks=", the sink in it" if target.supports("sinks") else "")
    scale = 1 / math.sqrt(target.head_size(4))
    if len(wrong) == 1 and wrong[0] in ("dQ", "dK"):
        index = NAMES.index(wrong[0])
        got, want = grads[index].double(), expected[index].double()
        if loosely_equal(got * scale, want) or loosely_equal(got / scale, want):
            return SCALE_DROPPED.format(name=wrong[0])
    if wrong == ["dQ"]:
        return ONLY_DQ
    if "dQ" not in wrong:
        return ONLY_DKDV.format(names=" and ".join(wrong), are="are" if len(wrong) > 1 else "is")
    return f"{' and '.join(wrong)} are wrong (the output is right): the backward's passes that make them"
