"""The faults of RoPE alone (a target's rope(x, positions, base)), spelled out with the oracle's: partial
rotary on the wrong features of each head."""

from __future__ import annotations

import torch

from ..oracle import GOLDEN, rope_oracle
from .cases import RopeCase


def _turned(case: RopeCase, t: torch.Tensor) -> torch.Tensor:
    return rope_oracle(t, case.positions, case.base, GOLDEN)


def rope_whole_head(case: RopeCase) -> torch.Tensor | None:
    if case.rotary_dim in (None, case.x.shape[-1]):
        return None
    return _turned(case, case.x)


def rope_last_features(case: RopeCase) -> torch.Tensor | None:
    """The last r features rotated, the first d - r passed through in place."""
    r, d = case.rotary_dim, case.x.shape[-1]
    if r in (None, d):
        return None
    return torch.cat([case.x[..., : d - r], _turned(case, case.x[..., d - r :])], dim=-1)


def rope_rotated_slice_last(case: RopeCase) -> torch.Tensor | None:
    """The first r features rotated but written after the d - r passed through (cat([x_pass, rotated]))."""
    r, d = case.rotary_dim, case.x.shape[-1]
    if r in (None, d):
        return None
    return torch.cat([case.x[..., r:], _turned(case, case.x[..., :r])], dim=-1)
