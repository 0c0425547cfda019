"""The speed of the main job itself: a full mutation campaign (`python -m campaigns run`) on a copy of
impl/, specs/ and properties/, then an `--incremental` one after one impl function changed.

Each bench runs its campaign once (a campaign takes minutes).  extra_info holds the phases and the
ratios to the campaign's own clean run (one pass of the suite on the same machine, so that they
cancel the machine's speed, like the impl/torch ratios): benches.report compares those with the
baseline's.  It also holds the worker-seconds of the tests the campaign had to see pass (must_pass_s)
and the speed they bound an exact campaign to on this machine's cores.  Benches report times only;
they never assert on speed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# the function the incremental campaign changes: called by a third of the properties, with 8 mutants
CHANGED = (
    "masks.py",
    '    if window_layers == "all":\n',
    '    all_layers = window_layers == "all"\n    if all_layers:\n',
)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("campaign") / "attnspec"
    shutil.copytree(REPO_ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "tests", root / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def campaign(root: Path, *options: str) -> tuple[float, dict]:
    """Wall seconds and results of one campaign on ``root``."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "campaigns", "run", "--root", str(root), *options],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return seconds, json.loads((root / "reports" / "mutation-results.json").read_text())


def must_pass_s(results: dict) -> float:
    """Worker-seconds of tests that passed under a mutant where the campaign had to see them pass: every
    test a survivor reaches, and a kill-matrix mutant's tests beyond its failing ones (an empty cell of
    the matrix is known only once each of its tests passed).  An exact campaign cannot skip them, so
    they bound its speed: mutants / (these seconds / workers).  (Nearly: the passing tests a matrix
    mutant ran before its first failure count too, and a luckier order could skip those.)"""
    total = 0.0
    for entry in results["mutants"].values():
        if entry.get("reused") or not (entry.get("matrix") or entry.get("status") == "Survived"):
            continue
        total += entry.get("seconds", 0.0) - sum(failure[2] for failure in entry.get("failures", []))
    return total


def record(benchmark, kind: str, seconds: float, results: dict) -> None:
    phases = results["phases"]
    catalogue = [m for m in results["mutants"].values() if m.get("fault") and not m.get("reused")]
    passing_s = must_pass_s(results)
    workers = os.cpu_count() or 1  # the campaign's default --max-children
    benchmark.extra_info.update(
        campaign=kind,
        wall_s=round(seconds, 1),
        clean_s=phases["clean_s"],
        mutants_s=phases["mutants_s"],
        mutants_run=phases["mutants_run"],
        mutants_reused=phases["mutants_reused"],
        tests_rerun=phases["tests_traced"],
        mutants_per_s=round(phases["mutants_run"] / phases["mutants_s"], 2) if phases["mutants_s"] else None,
        matrix_worker_s=round(sum(m.get("seconds", 0.0) for m in catalogue), 1),
        must_pass_worker_s=round(passing_s, 1),
        bound_per_s=round(phases["mutants_run"] * workers / passing_s, 2) if passing_s else None,
        per_clean_run=round(seconds / phases["clean_s"], 2),
    )


def test_full_campaign(benchmark, root):
    seconds, results = benchmark.pedantic(campaign, args=(root,), rounds=1, iterations=1)
    record(benchmark, "full", seconds, results)


def test_incremental_campaign_after_one_function_changed(benchmark, root):
    if not (root / "reports" / "mutation-results.json").exists():
        campaign(root)
    source = root / "src" / "attnspec" / "impl" / CHANGED[0]
    text = source.read_text()
    assert CHANGED[1] in text, f"impl/{CHANGED[0]} no longer has the line the bench changes"
    source.write_text(text.replace(CHANGED[1], CHANGED[2], 1))
    seconds, results = benchmark.pedantic(campaign, args=(root, "--incremental"), rounds=1, iterations=1)
    record(benchmark, "incremental", seconds, results)
