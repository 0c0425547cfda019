"""The kernel properties (test_kernels.py) fail every broken copy of the flash-style reference kernel
(broken_kernels.py) and say what broke, while the reference itself passes the whole kit.

Each copy runs against the property that must catch its class of bug, in a subprocess as a user runs
the kit, under the derandomized profile without shrinking that mutation campaigns use (conftest.py):
the same examples every run, so a copy fails every run or none, and a failure is reported at once.
"""

from __future__ import annotations

import pytest

from attnspec.kit.diagnosis import target_diagnosis
from attnspec.kit.loading import load
from attnspec.protocol.targets import ENV
from tests.fixtures.broken_kernels import BUGS
from tests.fixtures.kit_runs import (
    PROPERTIES,
    assert_fails_saying,
    assert_passes,
    run_properties,
)

KERNELS = str(PROPERTIES / "test_kernels.py")


def test_the_reference_kernel_passes_every_property_it_can_run():
    done = run_properties("flash-ref")
    assert_passes(done)


@pytest.mark.parametrize("name", BUGS)
def test_each_broken_kernel_fails_and_says_what_broke(name):
    bug = BUGS[name]
    target = f"tests.fixtures.broken_kernels:{name}"
    done = run_properties(target, "-k", bug.caught_by, profile="mutation", selection=[KERNELS])
    assert_fails_saying(done, bug.says, name)


def test_a_kernel_that_needs_contiguous_inputs_and_declares_it_passes():
    target = "tests.fixtures.broken_kernels:STRIDES_IGNORED_DECLARED"
    done = run_properties(target, "-k", BUGS["STRIDES_IGNORED"].caught_by, selection=[KERNELS])
    assert_passes(done)


# What the run's diagnosis says of each broken kernel whose bug lives in one place of the block walk
# (kit/diagnosis.py: kernel_finding, and the conventions and layout findings).
LOCALISED = {
    "PARTIAL_KEY_BLOCK_DROPPED": "only when the last key or query block is partial",
    "LAST_QUERY_BLOCK_DROPPED": "only when the last key or query block is partial",
    "DIAGONAL_BLOCK_SKIPPED": "only where a query's own key is the first of a key block",
    "ACCUMULATOR_NOT_RESCALED": "only when the keys span several key blocks",
    "SUM_NOT_RESCALED": "only when the keys span several key blocks",
    "MAX_STARTS_AT_ZERO": "only at logits far below zero",
    "MAX_STARTS_AT_A_SENTINEL": "only at logits far below zero",
    "NO_RUNNING_MAX": "only at logits far below zero",
    "SPLITS_NOT_RESCALED": "only on the decode path",
    "SINK_IN_EVERY_SPLIT": "only on the decode path with sinks",
    "STRIDES_IGNORED": "reads its inputs as if they were contiguous",
    "GQA_BY_MODULO": "tile-style GQA",
}


@pytest.mark.parametrize("name", LOCALISED)
def test_the_diagnosis_says_where_a_broken_kernel_goes_wrong(name, monkeypatch):
    monkeypatch.setenv(ENV, f"tests.fixtures.broken_kernels:{name}")
    said = target_diagnosis(load(f"tests.fixtures.broken_kernels:{name}"))
    assert said is not None and LOCALISED[name] in said, said


def test_the_diagnosis_says_nothing_of_the_correct_kernel(monkeypatch):
    monkeypatch.setenv(ENV, "flash-ref")
    assert target_diagnosis(load("flash-ref")) is None
