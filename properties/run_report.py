"""What a run of the properties says about its target: the capability table and the verdict.

A pytest plugin (conftest.py registers one per run) that counts, from the test reports, what
passed, which requirements failed, and how many tests each missing capability skipped, at
collection or at run time (a skip whose reason reads "lacks: CAPABILITY, ...").
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from attnspec.properties.targets import CAPABILITIES, Target

NAME = "attnspec-run-report"
LACKS = re.compile(r"lacks: ([a-z0-9_, ]+)$")


def lacks(target: Target, *capabilities: str) -> str:
    """The skip reason of a test that needs ``capabilities`` the target does not declare."""
    return f"--impl {target.name} lacks: {', '.join(capabilities)}"


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def requirements(report: pytest.TestReport) -> list[str]:
    """The requirement ids of the test (conftest.py records them as the user property
    "requirements", which --junitxml also writes)."""
    return [rid for key, ids in report.user_properties if key == "requirements" for rid in ids.split(",")]


class RunReport:
    def __init__(self) -> None:
        self.passed = 0
        self.failed: Counter[str] = Counter()  # requirement id -> failed tests that check it
        self.failed_tests = 0
        self.skipped = 0
        self.skipped_for: Counter[str] = Counter()  # capability -> tests skipped for its absence

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped:
            self.skipped += 1
            found = LACKS.search(skip_reason(report))
            if found:
                self.skipped_for.update(name.strip() for name in found.group(1).split(","))
        elif report.failed:
            self.failed_tests += 1
            self.failed.update(requirements(report) or ["(no requirement)"])
        elif report.when == "call":
            self.passed += 1

    def capability_lines(self, target: Target) -> list[str]:
        lines = []
        for name, meaning in CAPABILITIES.items():
            mark = "yes" if name in target.capabilities else "no "
            skipped = f"  (skipped {self.skipped_for[name]})" if name in self.skipped_for else ""
            lines.append(f"  {mark}  {name:<11} {meaning}{skipped}")
        return lines

    def verdict(self, target: Target) -> str:
        if self.failed_tests:
            ids = ", ".join(sorted(self.failed))
            return (
                f"FAIL: --impl {target.name} breaks {ids} "
                f"({self.failed_tests} failed, {self.passed} passed, {self.skipped} skipped)"
            )
        if not self.passed:
            return f"NOT CHECKED: no property ran against --impl {target.name} ({self.skipped} skipped)"
        return (
            f"PASS: --impl {target.name} passed every property it can run "
            f"({self.passed} passed, {self.skipped} skipped)"
        )
