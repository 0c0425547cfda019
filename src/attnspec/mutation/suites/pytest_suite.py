"""A pytest session as the engine's test source: impl's suite, the kit's properties, or a user's
own ``pytest ...`` command, collected once in one warm process.

The plugin replaces the session's run loop with the engine's campaign: the clean run and every
forked child run collected items through pytest's own run protocol (fixtures, capture, hooks), so
no mutant pays for an interpreter, an import of torch or a collection.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

from ..engine import Engine, Generator, Known, run_in_order

TERSE = "ATTNSPEC_TERSE_FAILURES"  # attnspec/kit/conventions.py: failures without the conventions' oracles
HYPOTHESIS_FAILING_EXAMPLES = "_hypothesis_failing_examples"  # set on the item by Hypothesis 6 on a failure


def item_requirements(item: pytest.Item) -> list[str]:
    return [rid for mark in item.iter_markers("req") for rid in mark.args]


def item_path(item: pytest.Item) -> str:
    """The attention path a test runs on (its ``attention_path`` parameter), "" when it takes none."""
    callspec = getattr(item, "callspec", None)
    return str(callspec.params.get("attention_path", "")) if callspec else ""


class PytestSuite:
    """pytest plugin and test source: the session's items, run in this process."""

    in_process = True

    def __init__(self, plan: dict, generator: Generator) -> None:
        self.engine = Engine(plan, generator, self)
        self.session: pytest.Session | None = None
        self.items: dict[str, pytest.Item] = {}
        self.order: list[str] = []
        self.results: dict = {}

    # --- pytest hooks ----------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.order = [item.nodeid for item in session.items]
        self.items = {item.nodeid: item for item in session.items}

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """Inside Hypothesis' own wrapper: forget the failing examples a property found before
        Hypothesis reads them to write a patch of explicit examples for the terminal summary.  The
        campaign prints no such summary, and the patch cost every killed mutant ~0.9 s in its child
        (an import of libcst, then a parse of the test's module)."""
        yield
        item.__dict__.pop(HYPOTHESIS_FAILING_EXAMPLES, None)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        self.session = session
        if session.testsfailed:
            self.results = {"error": f"{session.testsfailed} errors while collecting the suite"}
        else:
            self.results = self.engine.campaign()
        return True

    # --- the test source -------------------------------------------------------------------

    def tests(self) -> list[str]:
        return list(self.order)

    def test_paths(self) -> dict[str, Path]:
        return {nodeid: Path(self.items[nodeid].path) for nodeid in self.order}

    def requirements(self, test: str) -> list[str]:
        return item_requirements(self.items[test])

    def run_one(self, test: str, following: str | None) -> tuple[bool, float, bool]:
        """Run one test for the clean run: whether it failed, its seconds, whether it was skipped."""
        item = self.items[test]
        reports = runtestprotocol(item, nextitem=self.items.get(following or ""), log=False)
        skipped = any(r.skipped for r in reports) and not any(r.when == "call" and r.passed for r in reports)
        return any(r.failed for r in reports), sum(r.duration for r in reports), skipped

    def path(self, test: str) -> str:
        return item_path(self.items[test])

    def run(self, tests: list[str], matrix: bool, known: Known | None = None) -> dict:
        """Run ``tests`` in this (forked) process, as engine.run_in_order decides."""
        assert self.session is not None
        session = self.session

        def run_test(test: str, following: str | None) -> tuple[bool, float]:
            item = self.items[test]
            # the stack of set-up nodes must lead to this item even when the one expected was skipped
            session._setupstate.teardown_exact(item)
            # a property's failure kills whatever its message says: the kit skips the wording's oracles
            # (a meta test may check wording, so it runs as written)
            os.environ[TERSE] = "1" if item_requirements(item) else "0"
            reports = runtestprotocol(item, nextitem=self.items.get(following or ""), log=False)
            return any(r.failed for r in reports), sum(r.duration for r in reports)

        return run_in_order(tests, matrix, known, self.requirements, self.path, run_test)


def main(plan: dict, generator: Generator) -> dict:
    """Collect the plan's pytest session and run the campaign in it; its results (or an error)."""
    suite = PytestSuite(plan, generator)
    code = pytest.main(plan["pytest_args"], plugins=[suite])
    if not suite.results:
        why = "no tests were collected" if code == pytest.ExitCode.NO_TESTS_COLLECTED else None
        suite.results = {"error": why or f"pytest exited with {int(code)} before the campaign started"}
    Path(plan["results"]).write_text(json.dumps(suite.results), encoding="utf-8")
    return suite.results
