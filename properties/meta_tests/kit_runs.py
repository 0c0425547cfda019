"""Runs of the kit in a subprocess, as a user runs it: pytest over the properties against a target.

The root is the folder that holds the attnspec package (the repository, or a mutation campaign's
workspace, where the properties sit at attnspec/properties), so the run finds the same settings
and the same copy of the code as the run that starts it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attnspec

ROOT = Path(attnspec.__file__).resolve().parents[1]
PROPERTIES = Path(__file__).resolve().parents[1]


def run_properties(
    impl: str,
    *args: str,
    profile: str | None = None,
    as_user: bool = False,
    env: dict | None = None,
    selection: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """pytest on the properties (or the test ids in ``selection``) against ``impl``, under the
    Hypothesis ``profile`` (conftest.py) or, when None, under this run's own; ``env`` adds
    environment variables.  ``as_user``: without the mutation campaign's MUTANT_UNDER_TEST (which a
    campaign's clean run passes on), so that the target is checked at load time as a user's run
    checks it."""
    command = [sys.executable, "-m", "pytest", *(selection or [str(PROPERTIES)])]
    command += [f"--ignore={PROPERTIES / 'meta_tests'}"]
    command += ["-p", "no:cacheprovider", "-q", f"--impl={impl}"]
    run_env = {**os.environ, **(env or {})}
    if profile is not None:
        run_env["HYPOTHESIS_PROFILE"] = profile
    if as_user:
        run_env.pop("MUTANT_UNDER_TEST", None)
    return subprocess.run(
        [*command, *args], cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=600
    )


def assert_passes(done: subprocess.CompletedProcess) -> None:
    """The run passed (exit 0) and ran at least one property, none failing."""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-4000:]


def assert_fails_saying(done: subprocess.CompletedProcess, says: str, name: str) -> None:
    """The run failed (exit 1), and every failing test's report contains ``says``."""
    from attnspec.properties.meta_tests.test_conformance import failure_reports

    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    reports = failure_reports(done.stdout)
    assert reports, done.stdout[-3000:]
    for test, report in reports.items():
        assert says in report, f"{test} does not say {says!r} for {name}:\n{report[-3000:]}"
