"""Laws between two runs of a module, compared within the rounding its dtype explains.

A module property compares two runs that a law says are equal (a padded batch and each sequence alone,
chunked decoding and the full pass, a prefix alone and the first rows of the whole), with no oracle to
say what either should be.  ``assert_same_rows`` takes both runs as a function of the dtype the module
runs in, so that it can replay them: bitwise or within the dtype's floor, they agree; otherwise both
are run again with the module copied to float64 (the inputs converted exactly) and the difference is
held to what each side's own rounding, measured against its replay, explains
(specs.tolerance.replayed_bound).  A module that cannot be replayed (no nn.Module, a float64 copy that
raises, rounds to float32 or gives NaN, as transformers' eager masks do for a left pad) is held to a
bound derived from the dtype, the magnitude of its outputs and its depth and width
(specs.tolerance.derived_bound).  A failure says which rows differ and, from the replay, whether they
differ in float64 too: a real difference does, rounding does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnspec.protocol.targets import Target
from attnspec.specs.tolerance import FLOOR, derived_bound, replayed_bound

Runs = Callable[[torch.dtype], tuple[torch.Tensor, torch.Tensor]]
REPLAY = torch.float64


def module_depth(target: Target) -> int:
    """The layers a module's rounding goes through: as many as its schedule declares, else the longest
    list of submodules it holds (a stack's layers), else 1."""
    if target.schedule:
        return len(target.schedule)
    if isinstance(target.module, torch.nn.Module):
        stacks = [len(part) for part in target.module.modules() if isinstance(part, torch.nn.ModuleList)]
        return max(stacks, default=1)
    return 1


def module_width(target: Target) -> int:
    """The longest sum a module's rounding goes through: the widest input of its linear layers (an MLP's
    hidden width, a model's hidden size) and embeddings, else its declared width D."""
    widths = [target.d_model or 0]
    if isinstance(target.module, torch.nn.Module):
        for part in target.module.modules():
            if isinstance(part, torch.nn.Linear):
                widths.append(part.in_features)
            elif isinstance(part, torch.nn.Embedding):
                widths.append(part.embedding_dim)
    return max(widths) or 1


@dataclass(frozen=True)
class Bound:
    """The bound two runs are held to, and how it came about, in words."""

    value: float
    says: str


def _replay(runs: Runs, actual: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, ...] | str:
    """Both runs again in float64, or why they cannot serve as a replay."""
    try:
        replayed = runs(REPLAY)
    except Exception as error:  # a module that will not run in float64 is held to the derived bound
        return f"its float64 copy raised {type(error).__name__}"
    for low, high in zip((actual, expected), replayed, strict=True):
        if not isinstance(high, torch.Tensor) or high.shape != low.shape:
            return "its float64 copy returned another shape"
        if high.dtype != REPLAY:
            return f"its float64 copy returned {high.dtype}"
        if bool((torch.isfinite(low) & ~torch.isfinite(high)).any()):
            return "its float64 copy gives NaN or inf where the run does not"
    return replayed


def relation_bound(runs: Runs, actual: torch.Tensor, expected: torch.Tensor, target: Target) -> Bound:
    """The bound on max|actual - expected| (both from ``runs(dtype)``): from float64 replays of both
    runs where the module can be replayed, else derived from its depth and width."""
    dtype = actual.dtype
    magnitude = largest(expected)
    replayed = _replay(runs, actual, expected) if dtype != REPLAY else "it runs in float64 already"
    if not isinstance(replayed, str):
        a64, b64 = (t.detach().cpu() for t in replayed)
        a, b = actual.detach().cpu().double(), expected.detach().cpu().double()
        sides = ((a - a64).abs() + (b - b64).abs()).max().item() if a.numel() else 0.0
        apart = (a64 - b64).abs().max().item() if a.numel() else 0.0
        value = replayed_bound(sides, magnitude, dtype)
        return Bound(
            value,
            f"each run's own rounding, measured against a float64 replay of it, is at most {sides:.3e}; "
            f"in float64 the two differ by {apart:.3e}",
        )
    depth, width = module_depth(target), module_width(target)
    value = derived_bound(magnitude, dtype, depth, width)
    return Bound(
        value,
        f"derived from {str(dtype).removeprefix('torch.')}'s rounding at outputs up to {magnitude:.3g} "
        f"through {depth} layer(s) {width} wide (no float64 replay: {replayed})",
    )


def largest(t: torch.Tensor) -> float:
    """max|t| over its finite entries (0 for an empty tensor)."""
    return t.detach().abs().nan_to_num(posinf=0.0, neginf=0.0).max().item() if t.numel() else 0.0


def floor(expected: torch.Tensor) -> float:
    """The dtype's floor at the magnitude of ``expected``: what any two roundings may differ by."""
    return FLOOR[expected.dtype] * max(1.0, largest(expected))


def assert_same_rows(runs: Runs, dtype: torch.dtype, what: str, target: Target) -> None:
    """The two runs of ``runs(dtype)`` agree within the rounding ``dtype`` explains (module docstring); a
    failure names the (batch, position) rows that differ and by how much."""
    actual, expected = runs(dtype)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    diff = (actual.detach().double() - expected.detach().double()).abs().nan_to_num(nan=float("inf"))
    worst = diff.max().item() if diff.numel() else 0.0
    if worst <= floor(expected):
        return
    bound = relation_bound(runs, actual, expected, target)
    if worst <= bound.value:
        return
    rows = (diff > bound.value).flatten(2).any(-1) if diff.dim() > 2 else diff > bound.value  # (B, T)
    raise AssertionError(
        f"{what}: rows (batch, position) {torch.nonzero(rows).tolist()[:8]} differ, max |diff| = {worst:.3e} "
        f"exceeds the {str(dtype).removeprefix('torch.')} bound {bound.value:.3e} ({bound.says})"
    )


def changed(actual: torch.Tensor, expected: torch.Tensor, target: Target) -> torch.Tensor:
    """Where an output changed: any change of its bits, or for a module whose kernels round a row
    differently when other rows change (rows_round_together) a change beyond the bound derived from its
    dtype, depth and width."""
    if not target.rows_round_together:
        return actual != expected
    limit = derived_bound(largest(expected), expected.dtype, module_depth(target), module_width(target))
    return (actual.detach().double() - expected.detach().double()).abs() > limit
