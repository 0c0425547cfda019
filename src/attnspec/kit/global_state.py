"""torch's global state a property runs under, and the changes a target makes to it.

A property starts from the same state whatever ran before it (the user's own tests under `pytest
--attnspec`, an earlier target's call): grad mode on, float32 as the default dtype, deterministic
algorithms, anomaly detection and float32 matmul precision as torch starts, and the random
generator as it was when the run began.  A target that changes one of them during a property is told
so, by name, and the state is put back (conftest.py, around each property).  The random generator
is restored but not watched: drawing from it is no fault.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass(frozen=True)
class State:
    grad_mode: bool = True
    default_dtype: torch.dtype = torch.float32
    deterministic: bool = False
    deterministic_warn_only: bool = False
    anomaly_detection: bool = False
    float32_matmul_precision: str = "highest"


CLEAN = State()

# what a change of each field is called in a failure
WORDS = {
    "grad_mode": lambda value: f"switched grad mode {'on' if value else 'off'} (torch.set_grad_enabled)",
    "default_dtype": lambda value: f"set the default dtype to {value} (torch.set_default_dtype)",
    "deterministic": lambda value: (
        f"turned deterministic algorithms {'on' if value else 'off'} (torch.use_deterministic_algorithms)"
    ),
    "deterministic_warn_only": lambda value: (
        f"set deterministic algorithms' warn_only to {value} (torch.use_deterministic_algorithms)"
    ),
    "anomaly_detection": lambda value: (
        f"turned anomaly detection {'on' if value else 'off'} (torch.autograd.set_detect_anomaly)"
    ),
    "float32_matmul_precision": lambda value: (
        f"set float32 matmul precision to {value!r} (torch.set_float32_matmul_precision)"
    ),
}


def snapshot() -> State:
    return State(
        grad_mode=torch.is_grad_enabled(),
        default_dtype=torch.get_default_dtype(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
        anomaly_detection=torch.is_anomaly_enabled(),
        float32_matmul_precision=torch.get_float32_matmul_precision(),
    )


def restore(state: State) -> None:
    torch.set_grad_enabled(state.grad_mode)
    torch.set_default_dtype(state.default_dtype)
    torch.use_deterministic_algorithms(state.deterministic, warn_only=state.deterministic_warn_only)
    torch.autograd.set_detect_anomaly(state.anomaly_detection)
    torch.set_float32_matmul_precision(state.float32_matmul_precision)


def changes(before: State, after: State) -> list[str]:
    """What changed from ``before`` to ``after``, in words, one phrase per field."""
    return [
        WORDS[field.name](getattr(after, field.name))
        for field in fields(State)
        if getattr(before, field.name) != getattr(after, field.name)
    ]


class ChangedGlobalState(AssertionError):
    """A property during which the target changed torch's global state."""
