"""How `attnspec check` fits a slow target's check to a time, once the properties are collected (cli._Check,
progress.py): without --budget or --profile, a target whose default check would run past DEFAULT_BUDGET
draws fewer examples a property (never fewer than FEWEST), says so before the properties run and in the
verdict; a profile asked for runs whole; a fast target is left alone.  The timings are the probe's
(run_report.RunReport: the first call, a warm one, one on new sizes), given here; the last test shows the
probe (target_checks.first_calls) timing targets that sleep, on every call or on new shapes only."""

from __future__ import annotations

import os
import re
import time
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine

from attnspec import cli
from attnspec.cli import _Check
from attnspec.kit.run_report import NAME
from attnspec.kit.target_checks import WARM_UP, first_calls
from attnspec.protocol.targets import as_target
from attnspec.runner.progress import FEWEST, default_examples, estimate, parallelism, shrinking_within

PROFILE = 25  # the default profile's examples a property


@pytest.fixture(autouse=True)
def default_profile(monkeypatch):
    """The kit's default profile (25 examples) while a test runs, then the session's own again, and
    Hypothesis's limit on shrinking as it was; a machine of 2 idle cores."""
    monkeypatch.setattr(cli, "usable_cores", lambda: 2)
    current = getattr(settings, "get_current_profile_name", None)
    name = current() if current else settings._current_profile
    shrinking = engine.MAX_SHRINKING_SECONDS
    settings.register_profile("attnspec-fit-test", max_examples=PROFILE)
    settings.load_profile("attnspec-fit-test")
    yield
    settings.load_profile(name)
    engine.MAX_SHRINKING_SECONDS = shrinking


def a_property():
    @given(st.integers())
    def test_property(x):
        pass

    return test_property


class Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def collected(plugin: _Check, properties: int, first: float, warm: float, new_sizes: float):
    """``plugin`` told that ``properties`` properties were collected for a target of those timings: the
    properties' test functions and what the check printed."""
    functions = [a_property() for _ in range(properties)]
    timed = SimpleNamespace(first_call=first, call=warm, new_sizes_call=new_sizes)
    terminal = Terminal()
    plugins = {NAME: timed, "terminalreporter": terminal}
    items = [SimpleNamespace(function=f, get_closest_marker=lambda name: None) for f in functions]
    session = SimpleNamespace(
        items=items, config=SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=plugins.get))
    )
    # the check's time spent so far: none here (building the properties above, slow under load, is the
    # test's, and ate into a 10 s budget on a busy CI machine)
    plugin.started = time.monotonic()
    plugin.pytest_collection_finish(session)
    return [f._hypothesis_internal_use_settings.max_examples for f in functions], terminal.lines


def test_a_slow_target_draws_what_fits_the_default_time_and_says_so_first():
    # 20 properties at 0.3 s a call on 2 processes: 25 examples would take about 2 minutes
    plugin = _Check(jobs=2, fit=True)
    examples, said = collected(plugin, 20, 0.3, 0.3, 0.3)
    assert examples == [12] * 20  # 60 s * 2 processes / (20 properties * (1.6 calls * 0.3 s + 5 ms))
    assert said == [
        "a slow target (0.30 s a call): 12 examples a property instead of 25 to fit about 60 s; "
        "--budget SECONDS or --profile default/ci for more"
    ]
    assert plugin.coverage == "12 of 25 examples a property (a slow target)"  # for the verdict
    # a failure is shrunk for a property's share of the time, not Hypothesis's 5 minutes, until the run ends
    try:
        assert engine.MAX_SHRINKING_SECONDS == shrinking_within(60, 20, 2) == 6
    finally:
        plugin.pytest_unconfigure(None)
    assert engine.MAX_SHRINKING_SECONDS == 300


def test_a_target_that_compiles_per_shape_is_timed_on_new_sizes():
    # eager FlexAttention: milliseconds warm, a Dynamo trace on each new shape, a first call of imports;
    # a property pays the trace on its first calls and on a share of the rest (NEW_SIZES_FIRST, _SHARE)
    assert estimate(30, 25, 0.01, 2, 0.4) > 5 * estimate(30, 25, 0.01, 2)
    assert estimate(30, 5, 0.01, 2, 0.4) > estimate(30, 25, 0.01, 2, 0.4) / 5  # fewer examples save less
    plugin = _Check(jobs=2, fit=True)
    examples, said = collected(plugin, 30, 1.8, 0.01, 0.4)
    # what is left of 60 s once each process has paid the first call's warm-up, about 1.8 s
    assert examples == [default_examples(60, 1.79, 30, 0.01, 2, PROFILE, 0.4)] * 30 == [15] * 30
    assert re.fullmatch(
        r"a slow target \(0\.01 s a call warm, 0\.40 s on new sizes, 1\.80 s the first\): 15 examples a "
        r"property instead of 25 to fit about 60 s; --budget SECONDS or --profile default/ci for more",
        said[0],
    ), said


def test_never_fewer_than_the_fewest_examples_and_the_time_they_take_is_said():
    plugin = _Check(jobs=1, fit=True)
    examples, said = collected(plugin, 30, 2.0, 2.0, 2.0)
    assert examples == [FEWEST] * 30 == [5] * 30  # the quick profile's; the explicit examples run besides
    assert said[0].startswith(
        "a slow target (2.00 s a call): 5 examples a property instead of 25 to fit about 60 s, "
    )
    assert "the fewest it runs: about 8.0 min; --budget SECONDS" in said[0], said  # 30 * 5 * 3.205 s


@pytest.mark.parametrize("profile", [25, 150])
def test_a_profile_asked_for_runs_whole(profile):
    # --profile or $HYPOTHESIS_PROFILE (ci in CI): every example of it, and the estimate said instead
    settings.register_profile("attnspec-fit-test", max_examples=profile)
    settings.load_profile("attnspec-fit-test")
    plugin = _Check(jobs=2, fit=False)
    examples, said = collected(plugin, 20, 0.3, 0.3, 0.3)
    assert examples == [profile] * 20
    assert re.fullmatch(
        rf"the target takes 0\.30 s a call: 20 properties at {profile} examples each take about [\d.]+ "
        r"(s|min) here; --profile quick \(5 examples\) or --budget SECONDS fits the check to a time",
        said[0],
    ), said
    assert plugin.coverage == "" and plugin.shrinking is None


def test_a_budget_asked_for_wins_over_the_default_fit():
    plugin = _Check(budget=10, jobs=2, fit=True)
    examples, said = collected(plugin, 20, 0.3, 0.3, 0.3)
    assert examples == [2] * 20  # below the default fit's fewest: the budget is the user's
    assert said == [
        "--budget 10 s: 2 examples a property instead of 25: a weaker check, 8% of the drawn cases"
    ]
    assert plugin.coverage == "2 of 25 examples a property (--budget 10)"


def test_a_fast_target_is_left_alone():
    plugin = _Check(jobs=2, fit=True)
    examples, said = collected(plugin, 70, 0.004, 0.002, 0.002)
    assert examples == [PROFILE] * 70 and said == [] and plugin.coverage == ""
    assert plugin.shrinking is None and engine.MAX_SHRINKING_SECONDS == 300


def test_other_work_on_the_machine_leaves_the_check_fewer_cores():
    # n runnable processes share the cores: the jobs run slower where they and the other work outnumber
    # the cores (the probe, a second or two, ran at about a core's speed whatever the load)
    assert parallelism(2, 2) == 2 and parallelism(1, 2, others=1) == 1
    assert parallelism(4, 2) == 2  # jobs beyond the cores share them
    assert parallelism(2, 2, others=2) == 1
    idle, _ = collected(_Check(jobs=2, fit=True), 20, 0.3, 0.3, 0.3)
    crowded, _ = collected(_Check(jobs=2, fit=True, others=lambda: 2.0), 20, 0.3, 0.3, 0.3)
    assert crowded[0] < idle[0] == 12
    assert 0 <= cli.other_work() <= os.cpu_count() * 64  # what the machine says, or 0


def sleeping(on_new_shapes_only: bool):
    """An attention function that sleeps 0.3 s a call, or only on shapes it has not met (as a kernel that
    compiles per shape does)."""
    seen: set = set()

    def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
        shapes = (tuple(q.shape), tuple(k.shape))
        if not on_new_shapes_only or shapes not in seen:
            time.sleep(0.3)
        seen.add(shapes)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return as_target("sleeping", attention)


def test_the_probe_times_a_warm_call_and_one_on_new_sizes():
    problems, first, warm, new_sizes = first_calls(sleeping(on_new_shapes_only=True))
    assert problems == [] and first >= 0.3 and warm < 0.3 <= new_sizes
    problems, first, warm, new_sizes = first_calls(sleeping(on_new_shapes_only=False))
    assert problems == [] and min(first, warm, new_sizes) >= 0.3
    fast = as_target(
        "fast", lambda q, k, v, **kwargs: torch.nn.functional.scaled_dot_product_attention(q, k, v)
    )
    problems, first, warm, new_sizes = first_calls(fast)
    assert problems == [] and (first > WARM_UP or first == warm == new_sizes)  # a fast first call: no more
