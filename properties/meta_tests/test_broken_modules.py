"""Module targets: the example modules (a learner's block and stack, nanoGPT's attention, with and
without declarations) pass the whole kit, and every broken copy (broken_modules.py) fails the property
aimed at its bug with words that say what broke, each run in a subprocess as a user runs the kit."""

from __future__ import annotations

import pytest

from attnspec.properties.meta_tests.broken_modules import BUGS
from attnspec.properties.meta_tests.kit_runs import (
    PROPERTIES,
    assert_fails_saying,
    assert_passes,
    run_properties,
)

MODULES = str(PROPERTIES / "test_modules.py")
EXAMPLES = (
    "examples.learner_block:MODEL",
    "examples.learner_block:STACK",
    "examples.nanogpt_attention:ATTENTION",
    "examples.nanogpt_attention:PLAIN",  # no declarations at all
)


@pytest.mark.parametrize("target", EXAMPLES)
def test_each_example_module_passes_the_whole_kit(target):
    done = run_properties(target, as_user=True)
    assert_passes(done)


@pytest.mark.parametrize("name", BUGS)
def test_each_broken_module_fails_and_says_what_broke(name):
    bug = BUGS[name]
    target = f"attnspec.properties.meta_tests.broken_modules:{name}"
    done = run_properties(target, "-k", bug.caught_by, profile="mutation", selection=[MODULES], as_user=True)
    assert_fails_saying(done, bug.says, name)
