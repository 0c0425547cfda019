"""pytest plugin used inside a campaign workspace (copied there as attnspec_killrecorder.py).

mutmut runs a mutant's tests with -x and keeps only the exit code.  This plugin appends
"<test id>\\t<requirement ids>\\t<seconds>" to $ATTNSPEC_KILLS_DIR/<mutant name>.tsv whenever
a test fails while a mutant is active, so the report can fill Stryker's killedBy and tell
which requirement killed each catalogue fault, and how fast.

With ATTNSPEC_MATRIX=1 (the kill-matrix pass, which runs every test that reaches one mutant)
a test is skipped once every requirement it checks has already killed the mutant on the
test's attention path (the ``attention_path`` parameter, "" for tests that take none); the
path is the log line's fourth field.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_killed: set[str] = set()


def _requirements(item: pytest.Item) -> list[str]:
    return [rid for mark in item.iter_markers("req") for rid in mark.args]


def _path(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return str(callspec.params.get("attention_path", "")) if callspec else ""


def _keys(item: pytest.Item) -> set[str]:
    return {f"{rid}@{_path(item)}" for rid in _requirements(item)}


def pytest_runtest_setup(item: pytest.Item) -> None:
    keys = _keys(item)
    if os.environ.get("ATTNSPEC_MATRIX") == "1" and keys and keys <= _killed:
        pytest.skip("every requirement of this test already killed the mutant on this path")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    kills_dir = os.environ.get("ATTNSPEC_KILLS_DIR")
    if report.failed and kills_dir and "__mutmut_" in mutant:
        _killed.update(_keys(item))
        with open(Path(kills_dir) / f"{mutant}.tsv", "a", encoding="utf-8") as f:
            f.write(f"{item.nodeid}\t{','.join(_requirements(item))}\t{report.duration:.3f}\t{_path(item)}\n")
    return report
