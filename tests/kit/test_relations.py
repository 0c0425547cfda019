"""Laws between two runs of a module (src/attnspec/kit/relations.py): rounding that float32 explains passes at
the sizes people build, where a fixed rtol/atol failed, and a real difference fails, saying that the
two runs differ in float64 too; a module that cannot be replayed is held to the bound derived from its
depth and width."""

from __future__ import annotations

from copy import deepcopy as copy_module

import pytest
import torch
from torch import nn

from attnspec.kit.relations import (
    assert_same_rows,
    changed,
    module_depth,
    module_width,
    relation_bound,
)
from attnspec.protocol.targets import as_target
from attnspec.specs.tolerance import derived_bound
from tests.fixtures.kit_runs import assert_passes, run_properties


class Stack(nn.Module):
    """Wide linear layers with a softmax mix over the tokens: outputs of magnitude ~10, whose float32
    sums of hundreds of terms round differently when the rows are summed in another order."""

    def __init__(self, width: int = 256, depth: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for layer in self.layers:
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 2 / width**0.5)
                layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            mixed = torch.softmax(x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5, dim=-1) @ x
            x = x + layer(mixed)
        return x


def inputs(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(2, 7, 256, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)


def other_order(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The same function, each row computed on its own: another blocking of every sum."""
    return torch.cat([module(x[b : b + 1]) for b in range(x.shape[0])])


TARGET = as_target("stack", Stack())


def runs_of(module: nn.Module, wrong: float = 0.0):
    """(batch run, row-by-row run) in a dtype, the second off by ``wrong`` relative when asked."""
    copies: dict[torch.dtype, nn.Module] = {}

    def runs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        copy = copies.setdefault(dtype, copy_module(module).to(dtype))
        x = inputs().to(dtype)
        with torch.no_grad():
            return copy(x), other_order(copy, x) * (1 + wrong)

    return runs


def test_rounding_that_a_fixed_tolerance_fails_passes_against_the_replay():
    actual, expected = runs_of(TARGET.module)(torch.float32)
    assert not torch.allclose(actual, expected, rtol=1.3e-6, atol=1e-5), "it must defeat the old default"
    assert_same_rows(runs_of(TARGET.module), torch.float32, "batch vs rows", TARGET)


def test_a_real_difference_fails_and_the_replay_says_it_is_no_rounding():
    with pytest.raises(AssertionError, match=r"in float64 the two differ by [1-9]\.\d+e-02"):
        assert_same_rows(runs_of(TARGET.module, wrong=1e-4), torch.float32, "batch vs rows", TARGET)


def test_a_module_without_a_float64_replay_is_held_to_the_derived_bound():
    def runs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        actual, expected = runs_of(TARGET.module)(torch.float32)
        if dtype == torch.float64:  # a float64 copy that gives NaN (transformers' masks, a left pad)
            return actual.double() * torch.nan, expected.double()
        return actual, expected

    actual, expected = runs(torch.float32)
    bound = relation_bound(runs, actual, expected, TARGET)
    assert "no float64 replay: its float64 copy gives NaN" in bound.says
    magnitude = expected.abs().max().item()
    assert bound.value == derived_bound(magnitude, torch.float32, depth=3, width=256)
    assert_same_rows(runs, torch.float32, "batch vs rows", TARGET)
    with pytest.raises(AssertionError, match="through 3 layer"):
        assert_same_rows(lambda dtype: (actual, expected * (1 + 1e-2)), torch.float32, "wrong", TARGET)


def test_depth_and_width_are_read_from_the_module():
    assert (module_depth(TARGET), module_width(TARGET)) == (3, 256)


def test_a_change_of_bits_counts_unless_rows_round_together():
    expected = torch.ones(1, 4, 8) * 10
    nudged = expected.clone()
    nudged[0, 1, 0] = torch.nextafter(torch.tensor(10.0), torch.tensor(11.0))
    assert changed(nudged, expected, TARGET).sum().item() == 1
    from dataclasses import replace

    together = replace(TARGET, rows_round_together=True)
    assert not bool(changed(nudged, expected, together).any())
    moved = expected.clone()
    moved[0, 2, 3] += 1e-2
    assert changed(moved, expected, together).sum().item() == 1


REALISTIC = "tests.fixtures.realistic_models"


def test_a_model_at_the_sizes_people_build_passes_the_module_properties():
    assert_passes(run_properties(f"{REALISTIC}:MODEL", "-k", "test_modules", as_user=True))


def test_a_model_at_the_sizes_people_build_that_attends_to_its_pads_fails():
    done = run_properties(f"{REALISTIC}:LEAKY_PADS", "-k", "padded", profile="mutation", as_user=True)
    assert done.returncode == 1, done.stdout[-3000:]
    said = "in float64 the two differ by" in done.stdout or "through 4 layer" in done.stdout
    assert said, done.stdout[-3000:]
