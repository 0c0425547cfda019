"""pytest plugin used inside a campaign workspace (copied there as attnspec_killrecorder.py).

mutmut runs a mutant's tests with -x and keeps only the exit code.  This plugin appends
"<test id>\\t<requirement ids>" to $ATTNSPEC_KILLS_DIR/<mutant name>.tsv whenever a test fails
while a mutant is active, so the report can fill Stryker's killedBy and tell which
requirement killed each catalogue fault.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    kills_dir = os.environ.get("ATTNSPEC_KILLS_DIR")
    if report.failed and kills_dir and "__mutmut_" in mutant:
        requirement_ids = ",".join(rid for mark in item.iter_markers("req") for rid in mark.args)
        with open(Path(kills_dir) / f"{mutant}.tsv", "a", encoding="utf-8") as f:
            f.write(f"{item.nodeid}\t{requirement_ids}\n")
    return report
