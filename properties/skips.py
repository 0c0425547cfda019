"""Skips of a parametrisation that the target or the device cannot run; a missing capability is
named in the reason (run_report.lacks), so the run's capability table counts the skip."""

from __future__ import annotations

import pytest
import torch

from attnspec.properties.hypothesis_helpers import LOW_PRECISION, float_dtypes
from attnspec.properties.run_report import lacks
from attnspec.properties.targets import current


def require_dtype(dtype: torch.dtype, device: torch.device) -> None:
    """Skip a parametrisation in a dtype the target does not declare, or the device cannot run."""
    target = current()
    needed = "float64" if dtype == torch.float64 else "float16" if dtype in LOW_PRECISION else None
    if needed and not target.supports(needed):
        pytest.skip(lacks(target, needed))
    if dtype not in float_dtypes(device):
        pytest.skip(f"{dtype}: its matmul does not run on {device}")
