"""The progress line of `attnspec check` and its estimate of what a check costs (runner/progress.py)."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

from attnspec.runner import progress
from attnspec.runner.progress import Progress, estimate, examples_within


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def collected(plugin: Progress, n: int) -> None:
    plugin.pytest_collection_finish(SimpleNamespace(items=[object()] * n))


def test_a_log_gets_a_line_now_and_then_with_an_estimate(monkeypatch):
    monkeypatch.setattr(progress, "INTERVAL", 0.0)
    log = io.StringIO()
    plugin = Progress(log)
    collected(plugin, 4)
    for i in range(4):
        plugin.pytest_runtest_logstart(f"attnspec/kit/properties/test_attention.py::test_{i}", ("", 0, ""))
        plugin.pytest_runtest_logfinish(f"attnspec/kit/properties/test_attention.py::test_{i}", ("", 0, ""))
    lines = [line for line in log.getvalue().splitlines() if line]
    assert len(lines) == 3, lines  # none once every property is done: pytest's summary follows
    assert re.fullmatch(r"\[1/4 properties, \d+ s, about \d+ s left\] test_attention.py::test_0", lines[0])
    assert lines[2].startswith("[3/4 properties,")
    # in a log, pytest's own dots stay
    report = SimpleNamespace(when="call", passed=True, outcome="passed")
    assert plugin.pytest_report_teststatus(report, None) is None


def test_a_terminal_gets_one_line_in_place_of_the_dots():
    terminal = Terminal()
    plugin = Progress(terminal)
    collected(plugin, 2)
    plugin.pytest_runtest_logstart("attnspec/kit/properties/test_kernels.py::test_x", ("", 0, ""))
    plugin.pytest_runtest_logfinish("attnspec/kit/properties/test_kernels.py::test_x", ("", 0, ""))
    assert terminal.getvalue().startswith("\r[1/2 properties, 0 s, about 0 s left] test_kernels.py::test_x")
    assert "\n" not in terminal.getvalue()
    passed = SimpleNamespace(when="call", passed=True, outcome="passed")
    assert plugin.pytest_report_teststatus(passed, None) == ("passed", "", "PASSED")  # counted, no dot
    set_up = SimpleNamespace(when="setup", passed=True, outcome="passed")
    assert plugin.pytest_report_teststatus(set_up, None) == ("", "", "")
    assert Progress(Terminal(), verbose=True).live is False  # -v prints a line per test instead


def test_a_budget_buys_the_examples_it_can_pay_for():
    # 10 properties, a call of 0.1 s (1.6 calls an example, and 5 ms of the kit's): 0.165 s an example
    assert examples_within(65, 5, 10, 0.1, 2, 25) == 25  # 60 s left would pay for 72: the profile's 25
    assert examples_within(20, 5, 10, 0.1, 2, 25) == 18  # 15 s left on 2 processes: 30 / (10 * 0.165)
    assert examples_within(5, 9, 10, 0.1, 2, 25) == 1  # spent already: one example, never none
    assert abs(estimate(10, 25, 0.1, 2) - 10 * 25 * 0.165 / 2) < 1e-9
