"""The gradient properties (test_gradients.py) fail every broken backward of the flash-style reference
kernel (broken_backwards.py), each with an exact forward, and name the wrong gradients and where their
rows sit in the kernel's blocks; the reference's own backward passes the whole kit
(test_broken_kernels.py runs it).

Each copy runs in a subprocess as a user runs the kit, under the derandomized profile of the mutation
campaigns: the same examples every run.
"""

from __future__ import annotations

import pytest
import torch

from attnspec.adapters.flash_ref import FlashReference
from attnspec.kit.strategies import AttnCase
from tests.fixtures.broken_backwards import BUGS
from tests.fixtures.kit_runs import PROPERTIES, assert_fails_saying, run_properties

GRADIENTS = str(PROPERTIES / "test_gradients.py")


@pytest.mark.parametrize("name", BUGS)
def test_each_broken_backward_fails_and_names_the_gradient(name):
    bug = BUGS[name]
    target = f"tests.fixtures.broken_backwards:{name}"
    done = run_properties(target, "-k", bug.caught_by, profile="mutation", selection=[GRADIENTS])
    assert_fails_saying(done, bug.says, name)


@pytest.mark.parametrize("name", BUGS)
def test_the_forward_of_every_broken_backward_is_exact(name):
    """The bug is the backward's alone: the copy's outputs are bitwise the reference's, on the three
    paths (one block, several blocks with a window cutting them, a split-keys decode step)."""
    reference, broken = FlashReference(), BUGS[name].kernel()
    for tq, tk, window in ((5, 5, None), (40, 40, 15), (1, 60, None)):
        q, k, v, sinks = AttnCase(2, 4, 2, tq, tk, 4, 3, window, True, seed=tk).make()
        expected = reference.attention(q, k, v, window=window, sinks=sinks)
        assert torch.equal(broken.attention(q, k, v, window=window, sinks=sinks), expected), (name, tq, tk)
