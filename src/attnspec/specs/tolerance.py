"""The numerical tolerance policy (CONVENTIONS.md), in one place.

    max|out - golden| <= FUDGE * max|ref_lowp - golden| + conditioning + FLOOR[dtype] * max(1, max|golden|)

golden is the oracle in float64, ref_lowp the oracle run in the tested dtype.  For attention outputs
and weights, ``conditioning`` (attention_conditioning) is what the problem itself lets any correct
formulation in the scoring dtype be off by: each logit rounded at its own magnitude (a scale that is
no power of two, log2(e) folded into it for exp2, q scaled before the product), carried through the
softmax.  ref_lowp is one formulation's error; this term covers the others, where the oracle's own
formulation happens to be exact (logits on a grid, a power-of-two scale).  In the RoPE and
layer properties that any target runs (test_rope.py, test_attention_layer.py), ref_lowp builds
its angle table in the tested dtype too (rope_oracle's angles_in_dtype), as transformers and
gpt-oss do in float32; impl's own RoPE forms (test_positions.py) and block (BLOCK-1) are held to
exact angles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .mods import score_slopes
from .oracle import call_of, visible

FUDGE = 4.0
FLOOR = {
    torch.float64: 1e-12,
    torch.float32: 2e-6,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}


# The roundings a correct formulation may apply to each logit at (about) its own magnitude before the
# row's maximum is subtracted: the dot product's last one, the scale, a constant folded into it (log2 e
# for exp2), and the subtraction itself.
LOGIT_ROUNDINGS = 4


def golden_bound(
    golden: torch.Tensor, ref_lowp: torch.Tensor, dtype: torch.dtype, conditioning: torch.Tensor | None = None
) -> float:
    """The largest error the policy allows for an output of ``dtype`` against ``golden``;
    ``conditioning`` (golden's shape, attention_conditioning) adds its largest entry."""
    golden = golden.detach().cpu().to(torch.float64)
    ref_err = (
        (ref_lowp.detach().cpu().to(torch.float64) - golden).abs().max().item() if golden.numel() else 0.0
    )
    scale = max(1.0, golden.abs().max().item()) if golden.numel() else 1.0
    extra = conditioning.max().item() if conditioning is not None and conditioning.numel() else 0.0
    return FUDGE * ref_err + extra + FLOOR[dtype] * scale


def scoring_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a target scores ``dtype`` inputs in: float64 in float64, everything else in float32
    (fp16/bf16 by the "float16" capability's promise)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@dataclass
class LogitErrors:
    """What a correct formulation scoring in a dtype may be off by, logit by logit (logit_errors)."""

    probabilities: torch.Tensor  # (B, Hq, Tq, Tk [+ 1 with sinks]): the float64 softmax, sink last
    delta: torch.Tensor  # the same shape: how far each (modified) logit may be off; 0 where hidden
    slope: torch.Tensor | None  # (B, Hq, Tq, Tk): the score_mod's slope, None without one
    values: torch.Tensor  # (B, Hq, Tk, dv): each query head's values, float64
    largest: float  # the largest |logit| a query sees
    normaliser: torch.Tensor  # (B, Hq, Tq, 1): how far a row's own log-sum-exp may be off; 0 where blind
    own: torch.Tensor  # probabilities' shape: each weight's relative error from exp(s - lse) itself

    @property
    def keys(self) -> torch.Tensor:
        """The real keys' probabilities (B, Hq, Tq, Tk)."""
        return self.probabilities[..., : self.values.shape[2]]

    def weight_errors(self) -> torch.Tensor:
        """|delta p_ij| <= p_ij (delta_ij + sum_l p_il delta_il + eps_i + w_ij), first order, (B, Hq, Tq, Tk):
        eps_i the row's log-sum-exp (normaliser), w_ij the weight's own roundings (own)."""
        tk = self.values.shape[2]
        mean_delta = (self.probabilities * self.delta).sum(dim=-1, keepdim=True)
        return self.keys * (self.delta[..., :tk] + mean_delta + self.normaliser + self.own[..., :tk])


def logit_errors(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, dtype: torch.dtype = torch.float32, **options: Any
) -> LogitErrors:
    """How far each logit of a correct formulation that scores in ``dtype`` may be from the oracle's,
    and the float64 probabilities it perturbs (attention_conditioning has the derivation)."""
    call = call_of(options, "logit_errors", padding=False)
    scale, sinks, score_mod = call.scale, call.sinks, call.score_mod
    u = torch.finfo(dtype).eps / 2
    q, k, v = (t.detach().cpu().to(torch.float64) for t in (q, k, v))
    batch, n_heads, tq, head_dim = q.shape
    tk = k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    heads = torch.arange(n_heads) // (n_heads // k.shape[1])
    k, v = k[:, heads], v[:, heads]
    s = (q @ k.transpose(-2, -1)) * scale
    delta = u * (LOGIT_ROUNDINGS * s.abs() + q.abs() @ k.abs().transpose(-2, -1) * abs(scale))
    allowed = visible(batch, n_heads, tq, tk, call)
    slope = None
    if score_mod is not None:
        modified, slope = score_slopes(score_mod, s)
        allowed = allowed & (modified > -math.inf)  # a score_mod may hide a key with -inf too
        # the mod's own roundings, at its result and at its offset from the tangent through 0 (a bias):
        # up to the largest offset a row sees, since a formulation may shift a row's biases by any
        # constant (BLOOM adds slope * j for ALiBi's slope * (j - i))
        offset = (modified - slope * s).abs().masked_fill(~allowed, 0.0)
        row_shift = offset.amax(dim=-1, keepdim=True) if tk else offset
        own = u * LOGIT_ROUNDINGS * (modified.abs().nan_to_num(posinf=0.0) + offset + row_shift)
        delta, s = slope.abs() * (delta + u * s.abs()) + own, modified
    logits = s.masked_fill(~allowed, -math.inf)
    if sinks is not None:
        sink = sinks.detach().cpu().to(torch.float64).view(1, n_heads, 1, 1).expand(batch, n_heads, tq, 1)
        logits = torch.cat([logits, sink], dim=-1)
        delta = torch.cat([delta, u * LOGIT_ROUNDINGS * sink.abs().nan_to_num(posinf=0.0)], dim=-1)
    top = logits.amax(dim=-1, keepdim=True)
    p = torch.exp(logits - torch.where(top == -math.inf, 0.0, top))
    total = p.sum(dim=-1, keepdim=True)
    p = torch.where(total > 0, p / torch.where(total > 0, total, 1.0), 0.0)
    delta = torch.where(p > 0, delta, 0.0)
    # lse_i = m_i + log Z_i (Z_i = sum_j exp(s_ij - m_i), 1 <= Z_i <= Tk + 1), rounded at its magnitude by the
    # addition and at log Z_i by the log; then exp(s_ij - lse_i) rounds at |s_ij - lse_i| = log(1/p_ij)
    # and once more itself (attention_conditioning)
    log_z = torch.log(torch.where(total > 0, total, 1.0))
    normaliser = torch.where(total > 0, u * ((top + log_z).abs() + log_z), 0.0)
    own = torch.where(p > 0, u * (1.0 - torch.log(torch.where(p > 0, p, 1.0))), 0.0)
    seen = s.abs().masked_fill(~allowed, 0.0)
    largest = seen.max().item() if seen.numel() else 0.0
    return LogitErrors(p, delta, slope, v, largest, normaliser, own)


def attention_conditioning(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **problem) -> tuple:
    """(output term (B, Hq, Tq, dv), weights term (B, Hq, Tq, Tk), the largest |logit| a query sees):
    how far a correct formulation that scores in ``dtype`` may be from the float64 oracle because it
    rounds each logit at its own magnitude (``problem``: causal, window, sinks, scale, dtype and the
    declaration's score_mod, mask_mod and document_ids).

    With u the unit roundoff of ``dtype``, logit s_ij = scale q_i.k_j and a_ij = scale sum_f |q_if k_jf|,
    a formulation may carry each logit with an error of up to

        delta_ij = u (LOGIT_ROUNDINGS |s_ij| + a_ij)        (q scaled before the product: the a_ij term)

    and a sink logit with u LOGIT_ROUNDINGS |sink|.  To first order the softmax turns logit errors into

        |d o_if| <= sum_j p_ij delta_ij |v_jf - o_if|   (the sink column's value is 0)
        |d p_ij| <= p_ij (delta_ij + sum_l p_il delta_il)

    both doubled for the second order and for exp (or exp2) itself.  Nothing here depends on the order
    of the summations, which ref_lowp and the floor price in.

    That holds where the weights are divided by their sum, so that a row's common error cancels.  A
    formulation that normalises by a log-sum-exp instead (lse_i = logsumexp(s_i) in the scoring dtype,
    then p_ij = exp(s_ij - lse_i), never divided: exact references, FlashAttention's stored lse) carries
    lse_i's own rounding into every weight of its row as one relative error.  With m_i the row's largest
    logit and Z_i = sum_j exp(s_ij - m_i) (1 <= Z_i <= Tk + 1, the sink counted), lse_i = m_i + log Z_i is
    rounded at its magnitude by the addition and at log Z_i by the log (the logits' own errors move it by
    sum_l p_il ds_il, the divided formulation's term above); exp(s_ij - lse_i) rounds its argument at
    |s_ij - lse_i| = log(1/p_ij) and its result once.  So, first order,

        eps_i = u (|lse_i| + log Z_i)        w_ij = u (1 + log(1/p_ij))
        |d o_if| += eps_i |o_if| + sum_j p_ij w_ij |v_jf|     |d p_ij| += p_ij (eps_i + w_ij)

    also doubled.  eps_i is about u times the row's largest logit: 7e-6 at a logit of 120 in float32,
    which moves such a kernel's outputs by a few 1e-6 where the divided formulation's term is ~1e-7 (logits
    on a grid).  sum_j p_ij w_ij <= u (1 + log(Tk + 1)) is at most a few 1e-7 of the values.

    A declared ``score_mod`` f (attnspec/specs/mods.py) carries a logit's error through its slope and rounds
    on its own: the modified logit s' = f(s) may be off by

        |f'(s)| (delta_ij + u |s_ij|) + u LOGIT_ROUNDINGS (|s'_ij| + |b_ij| + max_l |b_il|)

    with b = s' - f'(s) s its offset (a bias: the division inside a soft-cap's tanh, a bias computed
    and added in the dtype, and a bias shifted by a row's constant, which the softmax ignores); the
    mask is the declaration's (``mask_mod``, ``document_ids``)."""
    errors = logit_errors(q, k, v, **problem)
    keys, values, tk = errors.keys, errors.values, errors.values.shape[2]
    out = keys @ values
    spread = (values[:, :, None] - out[:, :, :, None]).abs()  # (B, Hq, Tq, Tk, dv)
    out_term = torch.einsum("bhij,bhijf->bhif", keys * errors.delta[..., :tk], spread)
    if errors.probabilities.shape[-1] > tk:  # the sink column
        out_term = out_term + (errors.probabilities[..., tk:] * errors.delta[..., tk:]) * out.abs()
    # weights exp(s - lse) never divided by their sum: lse's rounding scales the row, each exp its weight
    out_term = out_term + errors.normaliser * out.abs() + (keys * errors.own[..., :tk]) @ values.abs()
    return 2 * out_term, 2 * errors.weight_errors(), errors.largest


def gradient_conditioning(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d_out: torch.Tensor, **problem
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ term (B, Hq, Tq, d), dK term (B, Hkv, Tk, d), dV term (B, Hkv, Tk, dv)): the logits' errors
    of attention_conditioning carried through the backward's formulas to first order (doubled, as the
    outputs' are), for the upstream gradient ``d_out``.  With e_ij the weights' error bound (a stored
    log-sum-exp's rounding included: a backward that recomputes p = exp(s - lse) carries it),

        |d dV_j| <= sum_i e_ij |dO_i|      |d D_i| <= sum_j e_ij |dp_ij|      (dp_ij = dO_i . v_j)
        |d ds_ij| <= (e_ij |dp_ij - D_i| + p_ij |d D_i|) |f'_ij|
        |d dQ_i| <= scale sum_j |d ds_ij| |k_j|      |d dK_j| <= scale sum_i |d ds_ij| |q_i|

    a KV head gathering its query heads' terms.  A gradient's own ref_lowp need not see these: the
    oracle's formulation happens to be exact where another formulation's rounding is not."""
    errors = logit_errors(q, k, v, **problem)
    q, k = (t.detach().cpu().to(torch.float64) for t in (q, k))
    d_out = d_out.detach().cpu().to(torch.float64)
    n_heads, n_kv_heads = q.shape[1], k.shape[1]
    scale = problem.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    keys, e = errors.keys, errors.weight_errors()
    dp = d_out @ errors.values.transpose(-2, -1)  # (B, Hq, Tq, Tk)
    big_d = (keys * dp).sum(dim=-1, keepdim=True)
    d_big_d = (e * dp.abs()).sum(dim=-1, keepdim=True)
    d_ds = e * (dp - big_d).abs() + keys * d_big_d
    if errors.slope is not None:
        d_ds = d_ds * errors.slope.abs()
    heads = torch.arange(n_heads) // (n_heads // n_kv_heads)
    d_dq = abs(scale) * d_ds @ k[:, heads].abs()
    per_head_dk = abs(scale) * d_ds.transpose(-2, -1) @ q.abs()  # (B, Hq, Tk, d)
    per_head_dv = e.transpose(-2, -1) @ d_out.abs()  # (B, Hq, Tk, dv)

    def gathered(per_query_head: torch.Tensor) -> torch.Tensor:  # each KV head sums its query heads'
        shape = (per_query_head.shape[0], n_kv_heads, n_heads // n_kv_heads, *per_query_head.shape[2:])
        return per_query_head.reshape(shape).sum(dim=2)

    return 2 * d_dq, 2 * gathered(per_head_dk), 2 * gathered(per_head_dv)


def rounded_once_bound(
    golden: torch.Tensor, ref32: torch.Tensor, dtype: torch.dtype, conditioning: torch.Tensor | None = None
) -> torch.Tensor:
    """The elementwise bound (float64, golden's shape) for a half-precision result that was computed
    in float32 and rounded once to ``dtype``: half an ulp of ``dtype`` at the float32 result, plus the
    float32 policy's bound for that result (ref32 is the oracle run in float32).

        |out - golden| <= ulp_dtype(|golden| + b32) / 2 + b32,   b32 = golden_bound(golden, ref32, float32)
                                                                        + conditioning (elementwise)

    A result rounded to ``dtype`` at an intermediate step too (scores, the softmax, the norm) is off by
    about one such rounding per step, which this does not allow."""
    golden = golden.detach().cpu().to(torch.float64)
    float32_bound = torch.full_like(golden, golden_bound(golden, ref32, torch.float32))
    if conditioning is not None:
        float32_bound = float32_bound + conditioning.detach().cpu().to(torch.float64)
    finfo = torch.finfo(dtype)
    _, exponent = torch.frexp(golden.abs() + float32_bound)  # |x| in [2^(e-1), 2^e)
    ulp = torch.ldexp(torch.full_like(golden, finfo.eps), exponent - 1)
    ulp = ulp.clamp_min(finfo.tiny * finfo.eps)  # the spacing of the subnormals
    return ulp / 2 + float32_bound


# --- laws between two runs of a black box ------------------------------------------------------------
#
# A module property compares two runs that a law says are equal (a padded batch and each sequence alone,
# chunked decoding and the full pass, a prefix alone and the first rows): no oracle, so no golden value.
# Each side is replayed in float64 (the module copied to float64, the inputs converted exactly) and the
# float32 difference is held to what the two sides' own float32 rounding, measured against those replays,
# can explain: by the triangle inequality |a - b| <= |a - a64| + |a64 - b64| + |b64 - b|, and a correct
# module's float64 runs agree to ~1e-14.  Where a replay is not possible (the module is no nn.Module,
# computes in float32 whatever it is given, or gives NaN in float64: transformers' eager masks do, for a
# left pad), the bound is derived from the dtype, the magnitude of the outputs and the module's depth and
# width instead.

# A float32 sum of W products is off by up to ~W u of its terms' magnitude, and each of L layers adds its
# own.  Measured on correct transformers models (Llama, Qwen2, Gemma 2, BLOOM; hidden 64 to 256, 2 to 6
# layers, vocab 128 to 4096, 20 seeds; padded vs alone and chunked decoding vs the full pass): at most
# 0.034 u max|out| L W with parameters drawn as randomize_ draws them, 0.5 with a std of 0.5 whatever the
# width (a saturated softmax); the fudge leaves 4x room over the worst.
DEPTH_FUDGE = 2.0


def replayed_bound(sides_error: float, magnitude: float, dtype: torch.dtype) -> float:
    """The bound on max|a - b| for two runs in ``dtype`` that a law says are equal, where
    ``sides_error`` = max(|a - a64| + |b - b64|) is their own rounding measured against float64 replays:

        FUDGE * sides_error + FLOOR[dtype] * max(1, magnitude)      (magnitude: max|b|)"""
    return FUDGE * sides_error + FLOOR[dtype] * max(1.0, magnitude)


def derived_bound(magnitude: float, dtype: torch.dtype, depth: int, width: int) -> float:
    """The bound on max|a - b| for two runs in ``dtype`` of a module ``depth`` layers deep and ``width``
    features wide that a law says are equal, without a float64 replay:

        DEPTH_FUDGE * u * max(1, magnitude) * depth * width + FLOOR[dtype] * max(1, magnitude)"""
    u = torch.finfo(dtype).eps / 2
    scale = max(1.0, magnitude)
    return DEPTH_FUDGE * u * scale * max(1, depth) * max(1, width) + FLOOR[dtype] * scale
