"""Skips of a parametrisation that the target or the device cannot run; a missing capability is
named in the reason (run_report.lacks), so the run's capability table counts the skip."""

from __future__ import annotations

import functools

import pytest
import torch

from attnspec.kit.loading import current
from attnspec.kit.run_report import NO_SECOND_DEVICE, lacks
from attnspec.kit.strategies import LOW_PRECISION, float_dtypes
from attnspec.kit.target_checks import meta_problem
from attnspec.protocol import interpreted


def require_dtype(dtype: torch.dtype, device: torch.device) -> None:
    """Skip a parametrisation in a dtype the target does not declare, or the device cannot run."""
    missing = missing_for(dtype)
    if missing:
        pytest.skip(lacks(current(), missing))
    if dtype == torch.bfloat16 and interpreted.active():
        pytest.skip(interpreted.NO_BFLOAT16)
    if dtype not in float_dtypes(device):
        pytest.skip(f"{dtype}: its matmul does not run on {device}")


def missing_for(dtype: torch.dtype) -> str | None:
    """The capability the target lacks to be checked in ``dtype`` (float32 needs none), or None."""
    needed = "float64" if dtype == torch.float64 else "float16" if dtype in LOW_PRECISION else None
    return needed if needed and not current().supports(needed) else None


def second_device(device: torch.device) -> torch.device:
    """A device other than the run's for the device property (ATTN-10), or a skip that says why none
    is here: "meta" (every torch build has it: shapes and dtypes, no data) when the target runs there,
    else a real one: CUDA for a run on the CPU, the CPU for a run on CUDA."""
    problem = _meta_problem(current().name)
    if problem is None:
        return torch.device("meta")
    if device.type != "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    pytest.skip(
        f"--impl {current().name} cannot run on the meta device ({problem}) and {NO_SECOND_DEVICE}: "
        "this property runs on a machine with a CUDA GPU (tox -e cuda, or attnspec check --device cuda)"
    )


@functools.cache
def _meta_problem(name: str) -> str | None:
    """meta_problem of the current target, probed once per target (its name is the cache key)."""
    return meta_problem(current())
