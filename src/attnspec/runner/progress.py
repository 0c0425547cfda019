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

SLOW_CALL = 0.25  # seconds: a call slower than this gets a word at the start of the check
# calls of the target an example of a property makes, on average: one for most, two or three for
# those that compare calls (a prefix, a second shape, the weights); measured 1.4-1.7 on slow kernels
CALLS_PER_EXAMPLE = 1.6
OVERHEAD = 0.005  # seconds of the kit's own work per example (strategies, oracle), about
# Calls of a property that meet sizes new to the process making them: where a target compiles per shape,
# those pay the compile and the rest what a warm call does.  Each property draws its own lengths, head
# counts, dtypes, memory layouts and sizes of 1, and runs its explicit examples, so its first calls
# meet new shapes at once and later ones less often: NEW_SIZES_FIRST, and NEW_SIZES_SHARE of its calls.
# Eager FlexAttention (Dynamo traces each new shape, 0.2-0.5 s, then runs in milliseconds) met 6.5 new
# shapes a property at 8 examples (13 calls) and 7-13 at 25 (40 calls).
NEW_SIZES_FIRST = 4
NEW_SIZES_SHARE = 0.2
DEFAULT_BUDGET = 60.0  # seconds a default check of a slow target fits itself to (no --budget, no --profile)
# examples a property the default fit never goes below (the quick profile's); the explicit ones run besides
FEWEST = 5


def parallelism(jobs: int, cores: int, others: float = 0.0) -> float:
    """How many processes running at the speed of a process alone on a core the check's ``jobs``
    processes are worth, where other work (``others`` runnable processes) shares the ``cores``: n
    runnable processes get min(1, cores / n) of a core each.  ``jobs`` on idle cores; fewer where the
    jobs outnumber the cores or other work crowds them.  (The probe of the target, a second or two,
    ran at nearly a core's speed beside the same work: 0.3 s on new sizes at a load of 4, as at 0.)"""
    return jobs * cores / max(cores, others + jobs)


def seconds_a_property(examples: int, call: float, new_sizes: float | None = None) -> float:
    """Seconds a property takes at ``examples``, from what a warm call of the target takes (``call``) and
    a call on new sizes (the warm call's where not given)."""
    calls = CALLS_PER_EXAMPLE * examples
    new = min(calls, NEW_SIZES_FIRST + NEW_SIZES_SHARE * calls)
    return new * max(call, new_sizes or call) + (calls - new) * call + OVERHEAD * examples


def estimate(
    properties: int, examples: int, call: float, jobs: float, new_sizes: float | None = None
) -> float:
    """Seconds the properties take at ``examples`` each, from what a call of the target takes, in ``jobs``
    processes (their parallelism)."""
    return properties * seconds_a_property(examples, call, new_sizes) / max(1, jobs)


def examples_within(
    budget: float,
    spent: float,
    properties: int,
    call: float,
    jobs: float,
    most: int,
    new_sizes: float | None = None,
) -> int:
    """Examples a property that fit what is left of ``budget`` seconds after ``spent``: between 1 and
    ``most`` (the profile's)."""
    left = max(0.0, budget - spent)
    fits = [n for n in range(1, most + 1) if estimate(properties, n, call, jobs, new_sizes) <= left]
    return max([1, *fits])


def default_examples(
    budget: float, spent: float, properties: int, call: float, jobs: float, most: int, new_sizes: float
) -> int:
    """Examples a property for a check without --budget or --profile: the profile's where they fit
    ``budget`` seconds, else as many as fit, never fewer than ``FEWEST`` (nor more than the profile's)."""
    return max(min(most, FEWEST), examples_within(budget, spent, properties, call, jobs, most, new_sizes))


def shrinking_within(budget: float, properties: int, jobs: int) -> float:
    """Seconds Hypothesis may spend shrinking one failure of a fitted check: a property's share of the
    budget, at least 5 (its own limit is 5 minutes, which a slow target spends on a few hundred calls)."""
    return max(5.0, budget * max(1, jobs) / max(1, properties))
