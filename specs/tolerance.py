"""The numerical tolerance policy (CONVENTIONS.md), in one place.

    max|out - golden| <= FUDGE * max|ref_lowp - golden| + FLOOR[dtype] * max(1, max|golden|)

golden is the oracle in float64, ref_lowp the oracle run in the tested dtype.  In the RoPE and
layer properties that any target runs (test_rope.py, test_attention_layer.py), ref_lowp builds
its angle table in the tested dtype too (rope_oracle's angles_in_dtype), as transformers and
gpt-oss do in float32; impl's own RoPE forms (test_positions.py) and block (BLOCK-1) are held to
exact angles.
"""

from __future__ import annotations

import torch

FUDGE = 4.0
FLOOR = {
    torch.float64: 1e-12,
    torch.float32: 2e-6,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}


def golden_bound(
    golden: torch.Tensor, ref_lowp: torch.Tensor, dtype: torch.dtype, floor_times: float = 1.0
) -> float:
    """The largest error the policy allows for an output of ``dtype`` against ``golden``; a
    requirement whose tolerance says so multiplies the floor by ``floor_times``."""
    golden = golden.detach().cpu().to(torch.float64)
    ref_err = (
        (ref_lowp.detach().cpu().to(torch.float64) - golden).abs().max().item() if golden.numel() else 0.0
    )
    scale = max(1.0, golden.abs().max().item()) if golden.numel() else 1.0
    return FUDGE * ref_err + FLOOR[dtype] * floor_times * scale


def rounded_once_bound(golden: torch.Tensor, ref32: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The elementwise bound (float64, golden's shape) for a half-precision result that was computed
    in float32 and rounded once to ``dtype``: half an ulp of ``dtype`` at the float32 result, plus the
    float32 policy's bound for that result (ref32 is the oracle run in float32).

        |out - golden| <= ulp_dtype(|golden| + b32) / 2 + b32,   b32 = golden_bound(golden, ref32, float32)

    A result rounded to ``dtype`` at an intermediate step too (scores, the softmax, the norm) is off by
    about one such rounding per step, which this does not allow."""
    golden = golden.detach().cpu().to(torch.float64)
    float32_bound = golden_bound(golden, ref32, torch.float32)
    finfo = torch.finfo(dtype)
    _, exponent = torch.frexp(golden.abs() + float32_bound)  # |x| in [2^(e-1), 2^e)
    ulp = torch.ldexp(torch.full_like(golden, finfo.eps), exponent - 1)
    ulp = ulp.clamp_min(finfo.tiny * finfo.eps)  # the spacing of the subnormals
    return ulp / 2 + float32_bound
