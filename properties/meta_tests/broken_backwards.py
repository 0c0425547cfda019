"""Broken copies of the flash-style reference kernel's backward (properties/adapters/flash_ref.py): each
has the exact forward and one bug of the kinds kernel authors make in a hand-written backward.

test_broken_backwards.py runs each against the gradient property that must catch it.  Every copy is a
subclass that overrides one step of the backward, so the rest is the reference itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnspec.properties.adapters.flash_ref import FlashReference, Problem
from attnspec.properties.meta_tests.broken_kernels import broken


class DeltasOverTheWrongAxis(FlashReference):
    """D = rowsum(dO * O) summed over every head of a token, not over one head's value features."""

    def row_deltas(self, out, d_out):
        return (d_out * out).sum(dim=-1, keepdim=True).sum(dim=1, keepdim=True)


class DqWithoutTheScale(FlashReference):
    """dQ = dS K, the softmax scale left out."""

    def query_gradient(self, ds, keys, scale):
        return ds @ keys


class DkWithoutTheScale(FlashReference):
    """dK = dS^T Q from the unscaled queries: the softmax scale left out."""

    def key_gradient(self, ds, scaled_queries, scale):
        return ds.transpose(-2, -1) @ (scaled_queries / scale)


class GqaGradientFromOneHead(FlashReference):
    """A KV head's dK and dV taken from the first query head of its group, not summed over the group."""

    def fold_heads(self, grad, n_kv_heads):
        batch, n_heads, length, width = grad.shape
        return grad.view(batch, n_kv_heads, n_heads // n_kv_heads, length, width)[:, :, 0].contiguous()


class SinkGradientMissing(FlashReference):
    """The sinks get no gradient (zeros), as if they were a constant column."""

    def sink_gradient(self, sink, lse, big_d):
        return None if sink is None else torch.zeros(sink.shape[1], dtype=big_d.dtype, device=big_d.device)


class MaskForgottenInTheRecomputation(FlashReference):
    """The backward recomputes each block's logits without the mask the forward applied."""

    def recomputed_scores(self, problem, start, stop, first, last):
        s = problem.q[:, :, start:stop] @ problem.k[:, :, first:last].transpose(-2, -1)
        return s, problem.v[:, :, first:last]


class WindowForgottenInTheRecomputation(FlashReference):
    """The backward's mask is causal only: keys a window cuts off inside a block come back."""

    def recomputed_scores(self, problem, start, stop, first, last):
        causal = Problem(problem.q, problem.k, problem.v, problem.causal, None, problem.offset, problem.scale)
        return self.scores(causal, start, stop, first, last)


class LseWithoutTheSink(FlashReference):
    """The saved log-sum-exp leaves the sink out, so the recomputed P sums to more than the forward's."""

    def forward_pass(self, problem, sink):
        out, lse = super().forward_pass(problem, sink)
        if sink is None:
            return out, lse
        keys_only = lse + torch.log1p(-torch.exp(sink - lse).clamp(max=1.0))
        return out, torch.where(torch.isfinite(keys_only), keys_only, lse)


class UnnormalisedExponentials(FlashReference):
    """P recomputed as exp(S - the block's maximum), not exp(S - L): dV and dS from unnormalised weights."""

    def probabilities(self, s, lse):
        top = s.amax(dim=-1, keepdim=True)
        return torch.exp(s - torch.where(top > -math.inf, top, torch.zeros_like(top)))


@dataclass(frozen=True)
class Bug:
    """A broken backward, the property that catches it (a pytest -k expression over test_gradients.py)
    and what its message says."""

    kernel: type[FlashReference]
    caught_by: str
    says: str


MATCH = "test_gradients_match_the_oracle and float32"
ZERO = "test_what_no_query_sees"
UNSEEN = "that no query sees"
BUGS = {
    "DELTAS_OVER_THE_WRONG_AXIS": Bug(DeltasOverTheWrongAxis, MATCH, "wrong gradients: dQ, dK, dsinks"),
    "DQ_WITHOUT_THE_SCALE": Bug(DqWithoutTheScale, MATCH, "wrong gradients: dQ\n"),
    "DK_WITHOUT_THE_SCALE": Bug(DkWithoutTheScale, MATCH, "wrong gradients: dK\n"),
    "GQA_GRADIENT_FROM_ONE_HEAD": Bug(GqaGradientFromOneHead, MATCH, "wrong gradients: dK, dV\n"),
    "SINK_GRADIENT_MISSING": Bug(SinkGradientMissing, MATCH, "wrong gradients: dsinks\n"),
    "MASK_FORGOTTEN_IN_THE_RECOMPUTATION": Bug(MaskForgottenInTheRecomputation, ZERO, "that no query sees"),
    "WINDOW_FORGOTTEN_IN_THE_RECOMPUTATION": Bug(
        WindowForgottenInTheRecomputation, ZERO, "that no query sees"
    ),
    "LSE_WITHOUT_THE_SINK": Bug(LseWithoutTheSink, MATCH, "wrong gradients: dQ, dK, dV, dsinks"),
    "UNNORMALISED_EXPONENTIALS": Bug(UnnormalisedExponentials, MATCH, "wrong gradients: dQ, dK, dV, dsinks"),
}


for _name in BUGS:
    globals()[_name] = broken(_name, BUGS)
