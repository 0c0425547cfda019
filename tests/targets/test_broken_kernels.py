"""The kernel properties (test_kernels.py) fail every broken copy of the flash-style reference kernel
(broken_kernels.py) and say what broke, while the reference itself passes the whole kit.

Each copy runs against the property that must catch its class of bug, in a subprocess as a user runs
the kit, under the derandomized profile without shrinking that mutation campaigns use (conftest.py):
the same examples every run, so a copy fails every run or none, and a failure is reported at once.
"""

from __future__ import annotations

import pytest

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
