"""The progress of `attnspec check`: how many properties are done, how long it has run, an estimate of
what is left, and the property running now.

On a terminal it is one line, rewritten in place after each property, in place of pytest's dots; in a
log (CI), a line every ``INTERVAL`` seconds, beside the dots.  The estimate is the time per property
so far times the properties left: properties differ, so it firms up as the run goes.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import TextIO

import pytest

INTERVAL = 15.0  # seconds between two lines in a log


class Progress:
    def __init__(self, stream: TextIO | None = None, verbose: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() and not verbose  # -v prints a line per test: no live line
        self.total = 0
        self.done = 0
        self.running = ""
        self.started = time.monotonic()
        self.shown = self.started
        self.pid = os.getpid()

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)
        self.started = self.shown = time.monotonic()

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config):
        """No dot per test on a terminal: the live line says more.  The category and the word are
        pytest's own, so the counts and the verdict are unchanged."""
        if not self.live:
            return None
        if report.when in ("setup", "teardown") and report.passed:
            return "", "", ""
        return report.outcome, "", report.outcome.upper()

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:
        if os.getpid() == self.pid:
            self.running = nodeid.rsplit("/", 1)[-1]

    @pytest.hookimpl
    def pytest_runtest_logfinish(self, nodeid: str, location: tuple) -> None:
        if os.getpid() != self.pid:  # a worker of --jobs: the check's own process shows the progress
            return
        self.done += 1
        now = time.monotonic()
        if self.live:
            self._write("\r" + self.line(now)[: shutil.get_terminal_size().columns - 1] + "\x1b[K")
        elif now - self.shown >= INTERVAL and self.done < self.total:
            self._write(f"\n{self.line(now)}\n")
            self.shown = now

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.live and self.done and os.getpid() == self.pid:
            self._write("\r\x1b[K")

    def line(self, now: float) -> str:
        elapsed = now - self.started
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        return (
            f"[{self.done}/{self.total} properties, {duration(elapsed)}, about {duration(left)} left] "
            f"{self.running}"
        )

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# --- how long a check will take, and fitting it to a budget --------------------------------------

SLOW_CALL = 0.25  # seconds: a warm call slower than this gets a word at the start of the check
# calls of the target an example of a property makes, on average: one for most, two or three for
# those that compare calls (a prefix, a second shape, the weights); measured 1.4-1.7 on slow kernels
CALLS_PER_EXAMPLE = 1.6
OVERHEAD = 0.005  # seconds of the kit's own work per example (strategies, oracle), about


def seconds_per_example(call: float) -> float:
    return CALLS_PER_EXAMPLE * call + OVERHEAD


def estimate(properties: int, examples: int, call: float, jobs: int) -> float:
    """Seconds the properties take at ``examples`` each, from what a call of the target takes."""
    return properties * examples * seconds_per_example(call) / max(1, jobs)


def examples_within(budget: float, spent: float, properties: int, call: float, jobs: int, most: int) -> int:
    """Examples a property that fit what is left of ``budget`` seconds after ``spent``: between 1 and
    ``most`` (the profile's)."""
    left = max(0.0, budget - spent)
    fits = int(left * max(1, jobs) / (max(1, properties) * seconds_per_example(call)))
    return max(1, min(most, fits))
