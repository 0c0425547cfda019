"""Module targets: the example modules (a learner's block and stack, nanoGPT's attention, with and
without declarations) pass the whole kit, and every broken copy (broken_modules.py) fails the property
aimed at its bug with words that say what broke, each run in a subprocess as a user runs the kit."""

from __future__ import annotations

import pytest

from attnspec.kit.diagnosis import target_diagnosis
from tests.fixtures.broken_modules import BUGS, NO_ROPE_FINDING, UNDECLARED_NO_ROPE
from tests.fixtures.kit_runs import (
    PROPERTIES,
    assert_fails_saying,
    assert_passes,
    run_properties,
)

MODULES = str(PROPERTIES / "test_modules.py")
LAYERS = str(PROPERTIES / "test_attention_layer.py")
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
    # a module without its white box is told what that leaves unseen, in its capability table
    assert ("--   white box" in done.stdout) == target.endswith(":PLAIN"), done.stdout[-3000:]


@pytest.mark.parametrize("name", BUGS)
def test_each_broken_module_fails_and_says_what_broke(name):
    bug = BUGS[name]
    target = f"tests.fixtures.broken_modules:{name}"
    selection = [LAYERS if bug.white_box else MODULES]
    done = run_properties(target, "-k", bug.caught_by, profile="mutation", selection=selection, as_user=True)
    assert_fails_saying(done, bug.says, name)


@pytest.mark.parametrize("name", [name for name, bug in BUGS.items() if bug.white_box])
def test_a_white_box_bug_passes_every_black_box_property(name):
    """What the layer oracle is for: the module stays causal, batch-independent and deterministic."""
    target = f"tests.fixtures.broken_modules:{name}"
    assert_passes(run_properties(target, profile="mutation", selection=[MODULES], as_user=True))


def test_a_layer_without_rope_that_does_not_say_so_is_diagnosed_as_no_rope():
    """nanoGPT wrapped to the RoPE layer protocol (rope=True by default) fails LAYER-1 alone, and the
    failure says that no RoPE explains it and what to report instead."""
    diagnosis = target_diagnosis(UNDECLARED_NO_ROPE)
    assert diagnosis is not None and diagnosis.startswith(NO_ROPE_FINDING), diagnosis
    done = run_properties(
        "tests.fixtures.broken_modules:UNDECLARED_NO_ROPE", profile="mutation"
    )
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout[-3000:]
    assert "test_layer_matches_the_oracle_layer" in done.stdout and "Layer(rope=False)" in done.stdout


@pytest.mark.parametrize(
    ("name", "fails"), [("ROUNDING_DECLARED", False), ("ROUNDING_UNDECLARED", True), ("LEAK_DECLARED", True)]
)
def test_rows_that_round_together_excuse_the_last_bits_and_no_leak(name, fails):
    """MOD-1 is bitwise unless the module declares that its rows round together; then a change within
    the dtype's tolerance passes and a real leak of the future still fails."""
    target = f"tests.fixtures.broken_modules:{name}"
    done = run_properties(
        target, "-k", "test_later_tokens", profile="mutation", selection=[MODULES], as_user=True
    )
    if fails:
        assert_fails_saying(done, "outputs 0..", name)
    else:
        assert_passes(done)
