"""pytest plugin used inside a campaign workspace (copied there as attnspec_killrecorder.py).

mutmut runs a mutant's tests with -x and keeps only the exit code.  This plugin appends
"<test id>\\t<requirement ids>\\t<seconds>" to $ATTNSPEC_KILLS_DIR/<mutant name>.tsv whenever
a test fails while a mutant is active, so the report can fill Stryker's killedBy and tell
which requirement killed each catalogue fault, and how fast.

With ATTNSPEC_MATRIX=1 (the kill-matrix pass, which runs the whole suite against one mutant)
a test is skipped once every requirement it checks has already killed the mutant.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_killed: set[str] = set()


def _requirements(item: pytest.Item) -> list[str]:
    return [rid for mark in item.iter_markers("req") for rid in mark.args]


def pytest_runtest_setup(item: pytest.Item) -> None:
    ids = _requirements(item)
    if os.environ.get("ATTNSPEC_MATRIX") == "1" and ids and set(ids) <= _killed:
        pytest.skip("every requirement of this test already killed the mutant")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    kills_dir = os.environ.get("ATTNSPEC_KILLS_DIR")
    if report.failed and kills_dir and "__mutmut_" in mutant:
        ids = _requirements(item)
        _killed.update(ids)
        with open(Path(kills_dir) / f"{mutant}.tsv", "a", encoding="utf-8") as f:
            f.write(f"{item.nodeid}\t{','.join(ids)}\t{report.duration:.3f}\n")
    return report
