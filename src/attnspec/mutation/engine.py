"""The one engine every campaign runs on: a mutant generator and a test source, joined.

A **generator** (``generators/``) knows the mutants and how to switch one on: mutmut's trampolines
over a copy of impl/ (``generators/mutmut_operators.py``: mutmut's operators and the catalogue's),
or the catalogue's mutants at their sites in any file, swapped into the live function at run time
(``generators/sites.py``).  A **test source** (``suites/``) knows the tests and how to run them in
this process: one warm pytest session (impl's suite, the kit's properties, a user's pytest command;
``suites/pytest_suite.py``) or any other command, one process per run (``suites/command.py``).
The engine does the rest, the same way for every campaign:

1. the clean run: every test against the original code, with per test its duration, the functions
   it calls and the lines of each it executes (coverage.py, one context per test), split over the
   workers (whole test files per worker, longest first).  A failing test ends the campaign: mutants
   are graded against a passing suite.  The modules the tests import on first use are imported
   here once afterwards, so that no child pays for them again;
2. a check that mutants are live, where the generator has a mutant that breaks every function;
3. one forked child per mutant, up to N at a time: it switches its mutant on and runs the tests
   that execute the mutant's lines (history.reaching), in the order ``in_fixed_order`` gives (the
   tests meant for its fault first, then the previous run's killers and those that killed the
   mutants before it in its chain, then the cheapest), up to the first failure.  A function's
   mutants are dealt into one chain per worker, run one after another: what a mutant learns from
   the others comes from its own chain only, so that its killer does not depend on which child of
   another chain finished first.  With the kill matrix a catalogue
   mutant runs every such test that checks a requirement, and then (only if none failed) the others
   up to the first failure.  Once it has failed a test, it skips a test whose requirements are all
   cells of its fault's row already and whose attention path already killed the fault (``Known``:
   what this mutant and its finished siblings, the fault's other mutants, found): that test could
   add nothing to the row.  The siblings of a fault run one after another so that each starts with
   what the others found; the row stays the one every sibling running every test would give, and
   each mutant's status and first failing test stay its own.  A fork per mutant keeps one mutant's
   state from reaching the next; a child past its time limit is stopped (Timeout);
4. the results: per test its coverage and duration, per mutant its status and failing tests (the
   format history.py reads back for ``--incremental`` and reports/ turn into reports).

A test that never executes a mutant's lines runs its function exactly as in the clean run, which
passed: it is not run.  A mutant no test calls is NoCoverage; one whose function is called but
whose lines no test executes takes the generator's ``unreached`` status.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from . import history

PROGRESS_EVERY_S = 1.0
CLEAN_TIMEOUT_S = 600.0  # a test of the clean run running this long stops the campaign (--timeout)
CLEAN_POLL_S = 0.2  # how often the clean run's children are checked on
TIMEOUT_FACTOR = 10.0  # a child's time limit: at least min_timeout_s, or this x its tests' clean time


class Generator(Protocol):
    unreached: str  # the status of a mutant whose function runs but whose lines no test executes
    live_check: str | None  # a mutant name under which every function fails (None: no such check)

    def state(self, test_paths: dict[str, Path]) -> dict: ...

    def activate(self, name: str) -> None: ...

    def recording(self, spans: dict[str, list]): ...  # context manager -> set of called functions or None


class Suite(Protocol):
    in_process: bool

    def tests(self) -> list[str]: ...

    def test_paths(self) -> dict[str, Path]: ...

    def requirements(self, test: str) -> list[str]: ...

    def run(self, tests: list[str], matrix: bool, known: Known | None = None) -> dict: ...

    def run_one(self, test: str, following: str | None) -> tuple[bool, float, bool]: ...


@dataclass
class Known:
    """What a fault's row of the kill matrix holds so far: the requirements some failing test checked
    (its cells), and the attention paths of those tests."""

    requirements: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)

    def add(self, failure: list) -> None:
        """A failure line [test, requirements, seconds, attention path]."""
        self.requirements.update(failure[1])
        if failure[3]:
            self.paths.add(failure[3])

    def holds(self, requirements: list[str], path: str) -> bool:
        """Whether a test of these requirements on this path ("": none) could add nothing to the row."""
        covered = bool(requirements) and set(requirements) <= self.requirements
        return covered and (not path or path in self.paths)


@dataclass
class Job:
    name: str
    tests: list[str]
    matrix: bool
    budget_s: float
    fault: str | None = None  # a kill-matrix job's fault: its siblings run one after another
    started: float = 0.0
    limit_s: float = 0.0
    known: Known | None = None  # the fault's row as its finished siblings left it
    catalogue: str | None = None  # the catalogue fault it injects, matrix or not: its diagnosis is graded
    # the jobs of one chain run one after another: a fault's kill-matrix jobs, or a lane of a function's
    # mutants (one lane per worker), each learning from those before it which tests kill ("": alone)
    chain: tuple = ()
    own: list[str] = field(default_factory=list)  # the test that killed it in the previous run
    earlier: list[str] = field(default_factory=list)  # those that killed its function's mutants then


@dataclass
class Progress:
    path: Path | None
    phase: str = "clean run"
    total: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    eta: dict | None = None  # Remaining.estimate() while mutants run
    running: dict | None = None  # the clean run's test now running: {"test": its id, "since": epoch s}
    last: float = 0.0

    def write(self, force: bool = False) -> None:
        if self.path is None or (not force and time.monotonic() - self.last < PROGRESS_EVERY_S):
            return
        self.last = time.monotonic()
        temporary = self.path.with_suffix(".tmp")
        state = {
            "phase": self.phase,
            "total": self.total,
            "counts": self.counts,
            "eta": self.eta,
            "running": self.running,
        }
        temporary.write_text(json.dumps(state))
        temporary.replace(self.path)


class Remaining:
    """What is left of a campaign's jobs, in seconds.  A kill-matrix job runs every test that
    covers its mutant, so it takes about its budget (times the ratio its finished siblings
    showed); any other job stops at its first failing test, so it takes what finished ones took
    on average, unknown until a few have finished.  A rate over all jobs would mix the two: with
    the matrix first, it foretold hours for a campaign of minutes.  A fault's kill-matrix jobs run
    one after another, so the matrix takes at least its longest fault's chain, however many workers
    there are: divided by the workers alone, it foretold 40 s for a matrix of 3 minutes."""

    SAMPLE = 5  # finished ordinary jobs before their mean says something

    def __init__(self, jobs: list[Job], workers: int) -> None:
        self.workers = max(1, workers)
        self.matrix_budget_s = sum(job.budget_s for job in jobs if job.matrix)
        self.matrix_left = sum(1 for job in jobs if job.matrix)
        self.chain_s: dict[str, float] = {}  # a fault's kill-matrix budget left
        for job in jobs:
            if job.matrix and job.fault is not None:
                self.chain_s[job.fault] = self.chain_s.get(job.fault, 0.0) + job.budget_s
        self.ordinary_left = len(jobs) - self.matrix_left
        self.spent_s = {True: 0.0, False: 0.0}
        self.budget_done_s = 0.0
        self.ordinary_done = 0

    def done(self, job: Job, seconds: float) -> None:
        self.spent_s[job.matrix] += seconds
        if job.matrix:
            self.matrix_left -= 1
            self.matrix_budget_s -= job.budget_s
            self.budget_done_s += job.budget_s
            if job.fault is not None:
                self.chain_s[job.fault] = max(0.0, self.chain_s.get(job.fault, 0.0) - job.budget_s)
        else:
            self.ordinary_left -= 1
            self.ordinary_done += 1

    def estimate(self) -> dict:
        """{"seconds": wall seconds left, or None while that is unknown; "matrix_left",
        "ordinary_left": jobs not finished}."""
        ratio = self.spent_s[True] / self.budget_done_s if self.budget_done_s > 0 else 1.0
        work_s = ratio * max(0.0, self.matrix_budget_s)
        longest_chain_s = ratio * max(self.chain_s.values(), default=0.0)
        matrix_s = max(work_s / self.workers, longest_chain_s)
        if self.ordinary_left and self.ordinary_done < self.SAMPLE:
            seconds = None
        else:
            mean_s = self.spent_s[False] / self.ordinary_done if self.ordinary_done else 0.0
            seconds = max((work_s + mean_s * self.ordinary_left) / self.workers, longest_chain_s)
        return {
            "seconds": seconds,
            "matrix_seconds": matrix_s,
            "matrix_left": self.matrix_left,
            "ordinary_left": self.ordinary_left,
        }


class Engine:
    def __init__(self, plan: dict, generator: Generator, suite: Suite) -> None:
        self.plan = plan
        self.generator = generator
        self.suite = suite
        self.progress = Progress(Path(plan["progress"]) if plan.get("progress") else None)
        self.lazy_modules: list[str] = []  # imported by the tests in the clean run's workers

    # --- the clean run ---------------------------------------------------------------------

    def parallel_clean_run(
        self, tests: list[str], spans: dict[str, list], cost: dict[str, float]
    ) -> tuple[dict[str, dict], list[str]]:
        """clean_run split over the workers, one forked child each: whole test files (their fixtures
        stay per file), the longest first onto the least loaded worker (``cost``: the previous run's
        seconds, when known).  This process watches them: a test that runs past the clean run's limit
        (``clean_timeout_s``) stops them all, and is named among the failing tests."""
        self.progress.total = len(tests)
        self.progress.write(force=True)
        if not self.suite.in_process:
            return self.clean_run(tests, spans)
        files: dict[str, list[str]] = {}
        for test in tests:
            files.setdefault(test.split("::")[0], []).append(test)
        shares: list[list[str]] = [[] for _ in range(max(1, min(self.plan["workers"], len(files))))]
        loads = [0.0] * len(shares)
        for file in sorted(files, key=lambda f: -sum(cost.get(t, 0.05) for t in files[f])):
            lightest = loads.index(min(loads))
            shares[lightest] += files[file]
            loads[lightest] += sum(cost.get(t, 0.05) for t in files[file])
        out_dir = Path(self.plan["workspace"]) / "clean"
        out_dir.mkdir(exist_ok=True)
        children: dict[int, int] = {}  # pid -> index of its share
        for index, share in enumerate(shares):
            chosen = set(share)
            order = [t for t in tests if t in chosen]
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    quiet()
                    self.progress.path = out_dir / f"{index}.progress.json"  # the parent reads it
                    traced, failed = self.clean_run(order, spans)
                    part = {"traced": traced, "failed": failed, "modules": list(sys.modules)}
                    (out_dir / f"{index}.json").write_text(json.dumps(part))
                except BaseException:  # noqa: BLE001 - the parent sees the missing file
                    code = 3
                finally:
                    os._exit(code)
            children[pid] = index
        hung = self.watch_clean_run(children, out_dir)
        if hung:
            return {}, hung
        traced_all: dict[str, dict] = {}
        failed_all: list[str] = []
        for index in range(len(shares)):
            out = out_dir / f"{index}.json"
            if not out.exists():
                return {}, ["(a worker of the clean run crashed)"]
            part = json.loads(out.read_text())
            traced_all.update(part["traced"])
            failed_all += part["failed"]
            self.lazy_modules += [m for m in part["modules"] if m not in sys.modules]
        return {t: traced_all[t] for t in tests if t in traced_all}, failed_all

    def watch_clean_run(self, children: dict[int, int], out_dir: Path) -> list[str]:
        """Wait for the clean run's children, passing on their progress (tests done, the test running
        longest); the tests that ran past the limit, each said with the limit, once every child is
        stopped (an empty list: they all finished)."""
        limit_s = float(self.plan.get("clean_timeout_s", CLEAN_TIMEOUT_S))
        alive = set(children)
        while alive:
            for pid in list(alive):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    alive.discard(pid)
            parts = {pid: read_json(out_dir / f"{index}.progress.json") for pid, index in children.items()}
            running = [parts[pid]["running"] for pid in alive if parts[pid] and parts[pid]["running"]]
            self.progress.counts = {"tested": sum(p["counts"].get("tested", 0) for p in parts.values() if p)}
            self.progress.running = min(running, key=lambda r: r["since"], default=None)
            self.progress.write()
            hung = [r["test"] for r in running if time.time() - r["since"] > limit_s]
            if hung:
                for pid in alive:
                    os.kill(pid, signal.SIGKILL)
                for pid in alive:
                    os.waitpid(pid, 0)
                return [
                    f"{test} (still running after {limit_s:.0f} s, the limit of --timeout)" for test in hung
                ]
            if alive:
                time.sleep(CLEAN_POLL_S)
        self.progress.running = None
        return []

    def clean_run(self, tests: list[str], spans: dict[str, list]) -> tuple[dict[str, dict], list[str]]:
        """Run ``tests`` against the original code: per test its seconds, the functions it called
        and the lines of each it executed (relative to the function's first line); and the failing
        tests.  A test source that runs elsewhere (a command) measures its own lines."""
        if not tests:  # --incremental, nothing changed: every test's previous trace serves
            return {}, []
        if not self.suite.in_process:
            self.progress.running = {"test": tests[0], "since": time.time()}  # the command, one test
            self.progress.write(force=True)
            return self.suite.clean(tests, spans)  # type: ignore[attr-defined]
        import coverage

        files = sorted({span[0] for span in spans.values()})
        measure = coverage.Coverage(data_file=None, include=files, config_file=False)
        traced: dict[str, dict] = {}
        failed = []
        measure.start()
        try:
            with self.generator.recording(spans) as calls:
                for index, test in enumerate(tests):
                    if calls is not None:
                        calls.clear()
                    measure.switch_context(test)
                    following = tests[index + 1] if index + 1 < len(tests) else None
                    self.progress.running = {"test": test, "since": time.time()}
                    self.progress.write(force=True)
                    failing, seconds, skipped = self.suite.run_one(test, following)
                    if failing:
                        failed.append(test)
                    traced[test] = {
                        "duration": round(seconds, 4),
                        "functions": sorted(calls) if calls is not None else None,
                        "requirements": self.suite.requirements(test),
                        "lines": {},
                    }
                    if skipped:
                        traced[test]["skipped"] = True
                    self.progress.counts = {"tested": index + 1}
                    self.progress.total = len(tests)
                    self.progress.write()
        finally:
            measure.stop()
        self.progress.running = None
        self.progress.write(force=True)
        attribute_lines(measure.get_data().contexts_by_lineno, spans, traced)
        return traced, failed

    def mutants_are_live(self, tests: dict[str, dict]) -> bool:
        """Whether a covering test fails under the generator's mutant that breaks every function."""
        if self.generator.live_check is None:
            return True
        covering = [t for t in tests if tests[t]["functions"]]
        if not covering:
            return False
        fastest = sorted(covering, key=lambda t: tests[t]["duration"])[:5]  # one may expect any error
        pid = os.fork()
        if pid == 0:
            quiet()
            self.generator.activate(self.generator.live_check)
            outcome = self.suite.run(fastest, matrix=False)
            os._exit(1 if outcome["failures"] else 0)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 1

    # --- the campaign ----------------------------------------------------------------------

    def campaign(self) -> dict:
        plan = self.plan
        started = time.monotonic()
        order = self.suite.tests()
        if not order:
            return {"error": "no tests were collected"}
        state = self.generator.state(self.suite.test_paths())
        previous = history.load(plan.get("previous"))
        not_reused = history.why_not_reused(state, previous) if plan.get("incremental") else None
        retrace = history.tests_to_trace(state, previous)
        self.progress.phase = "clean run"
        cost = {t: e["duration"] for t, e in (previous or {}).get("tests", {}).items()}
        chosen = [t for t in order if t in retrace]
        # The modules the tests import on first use (torch._dynamo alone takes 2 s) are imported here,
        # once, rather than in every worker and child: those of the previous run now, those the clean
        # run's workers import after it (and only when some test or mutant is to run).
        self.lazy_modules = list((previous or {}).get("lazy_modules", []))
        if chosen and self.suite.in_process:
            self.lazy_modules = import_quietly(self.lazy_modules)
            freeze_heap()
        traced, failed = self.parallel_clean_run(chosen, state["spans"], cost)
        self.progress.running = None
        if failed:
            return {"error": "the clean run did not pass (failing: " + ", ".join(failed[:5]) + ")"}
        tests = history.merge_tests(state, previous, traced)
        clean_s = time.monotonic() - started
        print(f"clean run: {len(traced)} of {len(tests)} tests run in {clean_s:.1f} s", flush=True)
        if not self.mutants_are_live(tests):
            return {"error": "no test failed with every mutant active: the mutants are not in use"}

        coverage = history.coverage(tests)
        old_coverage = history.coverage(previous["tests"]) if previous else {}
        mutants: dict[str, dict] = {}
        jobs: list[Job] = []
        # the previous run's killers (its results in the reports' folder, reused or not), tried first:
        # each mutant's own, then those of its function's mutants
        before = previous or history.load(plan.get("history"))
        killers = history.previous_killers(before, coverage)
        own = history.own_killers(before)
        entries = {
            name: dict(info, matrix=plan["matrix"] and info["fault"] is not None)
            for name, info in state["mutants"].items()
            if history.in_shard(name, plan.get("shard"))
        }
        covering = {name: coverage.get(entry["function"], []) for name, entry in entries.items()}
        olds = {
            name: history.reusable(name, dict(entry, covering=covering[name]), state, previous, old_coverage)
            for name, entry in entries.items()
        }
        # a kill-matrix mutant skipped tests for what its siblings found: when one of a fault's mutants
        # runs again, so do those of its siblings that run tests, so that its row is one campaign's
        rerun = {e["fault"] for name, e in entries.items() if e["matrix"] and olds[name] is None}
        for name, entry in entries.items():
            info, old = state["mutants"][name], olds[name]
            reaching = history.reaching(info, covering[name], tests)
            if old is not None and not (entry["matrix"] and entry["fault"] in rerun and reaching):
                mutants[name] = dict(entry, **old, reused=True)
                continue
            if not covering[name]:
                mutants[name] = dict(entry, status="NoCoverage", failures=[], tests_run=0, seconds=0.0)
            elif not reaching:
                mutants[name] = dict(entry, status=self.generator.unreached, failures=[], tests_run=0)
                mutants[name].update(seconds=0.0, reason="no test executes its lines")
            else:
                budget = sum(tests[t]["duration"] for t in reaching)
                fault = info["fault"] if entry["matrix"] else None
                jobs.append(Job(name, reaching, entry["matrix"], budget, fault, catalogue=info["fault"]))
                mutants[name] = entry
        reused = sum(1 for m in mutants.values() if m.get("reused"))
        print(f"mutants: {len(jobs)} to run, {reused} reused", flush=True)

        mutation_started = time.monotonic()
        self.progress.phase = "testing mutants"
        if jobs and self.suite.in_process:
            self.lazy_modules = import_quietly(self.lazy_modules)
            settle = getattr(self.generator, "settle", None)
            if settle is not None:  # each mutant's module under the name the tests import it by
                settle()
            freeze_heap()
        self.progress.total = len(mutants)
        lanes: dict[str, int] = {}  # function -> its mutants so far, dealt round the lanes
        for job in jobs:
            function = entries[job.name]["function"]
            if job.fault is not None:
                job.chain = ("fault", job.fault)
            else:
                lanes[function] = lanes.get(function, 0) + 1
                job.chain = (function, (lanes[function] - 1) % max(1, plan["workers"]))
            job.own, job.earlier = own.get(job.name, []), killers.get(function, [])
        self.run_jobs(jobs, mutants, tests, {test: index for index, test in enumerate(order)})
        selection = selection_counts(jobs, mutants, tests)
        return {
            "version": history.VERSION,
            "shard": plan.get("shard"),
            "matrix": plan["matrix"],
            "fingerprints": state["fingerprints"],
            "functions": state["functions"],
            "tests": tests,
            "mutants": mutants,
            "not_reused": not_reused,  # why --incremental had to run everything
            "lazy_modules": self.lazy_modules,
            "phases": {
                "clean_s": round(clean_s, 2),
                "mutants_s": round(time.monotonic() - mutation_started, 2),
                "tests_traced": len(traced),
                "mutants_run": len(jobs),
                "mutants_reused": reused,
                **selection,
            },
        }

    def run_jobs(
        self,
        jobs: list[Job],
        mutants: dict[str, dict],
        tests: dict[str, dict],
        position: dict[str, int] | None = None,
    ) -> None:
        """Fork one child per job, up to ``workers`` at a time, longest jobs (the matrix) first, then
        the longest chains; the jobs of a chain one at a time: a fault's kill-matrix jobs, each with what
        its finished siblings found, and a lane of a function's mutants, each trying first the tests
        that killed those before it (``in_fixed_order``, with ``position``: the suite's order).  What a
        job learns comes only from jobs before it in its own chain, never from whichever job of
        another chain finished first: a mutant's tests, and so its killer, are the same on every run."""
        out_dir = Path(self.plan["workspace"]) / "outcomes"
        out_dir.mkdir(exist_ok=True)
        chain_s: dict[tuple, float] = {}
        for job in jobs:
            chain_s[job.chain] = chain_s.get(job.chain, 0.0) + job.budget_s
        queue = sorted(
            jobs, key=lambda job: (not job.matrix, -job.budget_s if job.matrix else -chain_s[job.chain])
        )
        learned: dict[tuple, list[str]] = {}  # chain -> the tests that killed its finished jobs
        running: dict[int, Job] = {}
        counts = self.progress.counts = {}
        for entry in mutants.values():
            if "status" in entry:
                counts[entry["status"]] = counts.get(entry["status"], 0) + 1
        min_timeout_s = float(self.plan.get("min_timeout_s", 30.0))

        remaining = Remaining(jobs, self.plan["workers"])
        self.progress.eta = remaining.estimate()
        rows: dict[str, Known] = {}  # fault -> its row of the kill matrix so far

        def finish(job: Job, outcome: dict | None, status: str) -> None:
            remaining.done(job, time.monotonic() - job.started)
            self.progress.eta = remaining.estimate()
            entry = mutants[job.name]
            outcome = outcome or {"failures": [], "tests_run": 0}
            entry.update(outcome, status=status, seconds=round(time.monotonic() - job.started, 3))
            if job.fault is not None:
                for failure in outcome["failures"]:
                    rows.setdefault(job.fault, Known()).add(failure)
            killers = learned.setdefault(job.chain, [])
            if job.chain and outcome["failures"] and outcome["failures"][0][0] not in killers:
                killers.append(outcome["failures"][0][0])
            counts[status] = counts.get(status, 0) + 1
            self.progress.write()

        def next_job() -> Job | None:
            busy = {job.chain for job in running.values() if job.chain}
            busy |= {("fault", job.fault) for job in running.values() if job.fault is not None}
            for index, job in enumerate(queue):
                free = job.fault is None or ("fault", job.fault) not in busy
                if free and (not job.chain or job.chain not in busy):
                    return queue.pop(index)
            return None

        while queue or running:
            while queue and len(running) < self.plan["workers"]:
                job = next_job()
                if job is None:
                    break  # only jobs of the running chains are left
                if job.fault is not None:
                    job.known = rows.get(job.fault)  # the child runs on its own copy
                if position is not None:
                    tried = [*job.own, *learned.get(job.chain, []), *job.earlier]
                    job.tests = in_fixed_order(job, tests, position, tried)
                job.started = time.monotonic()
                job.limit_s = max(min_timeout_s, TIMEOUT_FACTOR * job.budget_s)
                pid = os.fork()
                if pid == 0:
                    self.child(job, out_dir / f"{job.name}.json")
                running[pid] = job
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid:
                job = running.pop(pid)
                out = out_dir / f"{job.name}.json"
                if out.exists():
                    outcome = json.loads(out.read_text())
                    reason = outcome.pop("reason", None)
                    finish(job, outcome, outcome.pop("status", None) or status_of(outcome))
                    if reason:
                        mutants[job.name]["reason"] = reason
                else:
                    code = os.waitstatus_to_exitcode(status)
                    finish(job, None, "RuntimeError")
                    mutants[job.name]["reason"] = f"the child exited with {code} before reporting"
                continue
            for pid, job in list(running.items()):
                if time.monotonic() - job.started > job.limit_s:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    running.pop(pid)
                    finish(job, None, "Timeout")
                    mutants[job.name]["reason"] = f"stopped after {job.limit_s:.0f} s"
            time.sleep(0.005)
        self.progress.write(force=True)

    def child(self, job: Job, out: Path) -> None:
        """In the forked child: switch the job's mutant on, run its tests, write the outcome, exit."""
        code = 0
        try:
            quiet()
            self.generator.activate(job.name)
            outcome = self.suite.run(job.tests, job.matrix, job.known)
            if job.catalogue is not None and outcome["failures"] and self.plan.get("diagnose"):
                outcome["diagnosed"] = diagnosed(self.plan["diagnose"])
            temporary = out.with_suffix(".tmp")
            temporary.write_text(json.dumps(outcome))
            temporary.replace(out)
        except BaseException as error:  # noqa: BLE001 - reported by the parent
            try:
                problem = {"status": "RuntimeError", "reason": f"{type(error).__name__}: {error}"}
                out.write_text(json.dumps(dict(problem, failures=[], tests_run=0)))
            except BaseException:  # noqa: BLE001 - the parent sees the missing file
                code = 3
        finally:
            os._exit(code)


FAULT_ID = re.compile(r"(?<![A-Za-z0-9])(F[0-9]+)(?![0-9])")


def in_fixed_order(job: Job, tests: dict[str, dict], position: dict[str, int], tried: list[str]) -> list[str]:
    """A mutant's tests in the order its child runs them, up to the first failure (its killer): the
    tests meant for its fault (named after it, ``test_F7_...``, then those checking a requirement the
    fault breaks), then ``tried`` (the previous run's killers: the mutant's own, then its function's),
    then the cheapest first, each group in the suite's order within a cost class (the clean run's
    duration in classes of 2x; under 20 ms one class).  Nothing depends on which child finished first:
    this run's killers change no order.  Run again over the same reports (the previous results are
    read, ``--incremental`` or not), a mutant's killer is tried first and stays its killer."""
    from .faults import FAULTS_BY_ID

    fault = FAULTS_BY_ID.get(job.catalogue or "")
    breaks = set(fault.kills) if fault is not None else set()
    rank = {test: index for index, test in reversed(list(enumerate(tried)))}

    def key(test: str) -> tuple:
        named = fault is not None and fault.id in FAULT_ID.findall(test.rpartition("::")[2])
        checks = bool(breaks & set(tests[test].get("requirements", ())))
        return (
            not named,
            not checks,
            rank.get(test, len(tried)),
            cost_class(tests[test]["duration"]),
            position.get(test, len(position)),
            test,
        )

    return sorted(job.tests, key=key)


def cost_class(seconds: float) -> int:
    """A test's cost class: 0 under 20 ms, then one class per doubling (durations vary from run to run
    by far less than 2x, so that tests of different classes keep their order)."""
    return 0 if seconds < 0.02 else 1 + int(math.log2(seconds / 0.02))


def selection_counts(jobs: list[Job], mutants: dict[str, dict], tests: dict[str, dict]) -> dict:
    """What test selection saved over the mutants run: the tests they ran (``test_runs``), the tests
    that reach their lines (``tests_reaching``), and what running every test of the suite on each
    would have cost (``test_runs_all`` runs, ``all_tests_s`` seconds of the clean run's durations),
    against the seconds of the tests they ran (``tests_s``)."""
    every_s = sum(entry["duration"] for entry in tests.values())
    return {
        "test_runs": sum(mutants[job.name].get("tests_run", 0) for job in jobs),
        "tests_reaching": sum(len(job.tests) for job in jobs),
        "test_runs_all": len(jobs) * len(tests),
        "tests_s": round(sum(mutants[job.name].get("tests_s", 0.0) for job in jobs), 2),
        "all_tests_s": round(len(jobs) * every_s, 2),
    }


def diagnosed(function: str) -> list[str] | str:
    """What the plan's diagnosis (``module:function``, called with the mutant on) names: the catalogue
    faults it says the code behaves as if it had, or why it could not say."""
    module, _, name = function.partition(":")
    try:
        return list(getattr(importlib.import_module(module), name)())
    except Exception as error:  # noqa: BLE001 - the campaign reports it with the mutant
        return f"{type(error).__name__}: {error}"


def run_in_order(
    tests: list[str],
    matrix: bool,
    known: Known | None,
    requirements_of: Callable[[str], list[str]],
    path_of: Callable[[str], str],
    run_test: Callable[[str, str | None], tuple[bool, float]],
) -> dict:
    """A child's run of its mutant's tests, in order: up to the first failure, or with ``matrix`` the
    tests that check a requirement and then (only if none failed) the others up to the first failure,
    skipping, once one has failed, every test that could add nothing to the fault's row (``known``:
    what the finished siblings found).  ``run_test(test, following)`` runs one test: (failed,
    seconds).  Returns the failures ([test, requirements, seconds, attention path]) and how many tests
    ran."""
    row = Known(set(known.requirements), set(known.paths)) if known else Known()
    candidates = list(tests)
    if matrix:
        candidates = [t for t in tests if requirements_of(t)] + [t for t in tests if not requirements_of(t)]
    failures: list[list] = []
    ran, spent_s = 0, 0.0
    for index, test in enumerate(candidates):
        requirements = requirements_of(test)
        if matrix and failures and row.holds(requirements, path_of(test)):
            continue
        if not requirements and failures:
            break  # a test that checks no requirement adds no cell: it only decides a status
        failed, seconds = run_test(test, candidates[index + 1] if index + 1 < len(candidates) else None)
        ran += 1
        spent_s += seconds
        if failed:
            failures.append([test, requirements, round(seconds, 3), path_of(test)])
            row.add(failures[-1])
            if not matrix:
                break
    return {"failures": failures, "tests_run": ran, "tests_s": round(spent_s, 3)}


def status_of(outcome: dict) -> str:
    return "Killed" if outcome["failures"] else "Survived"


def attribute_lines(
    contexts_by_lineno: Callable[[str], dict[int, list[str]]], spans: dict[str, list], traced: dict[str, dict]
) -> None:
    """Fill each traced test's ``lines`` (function -> lines relative to its first line) from
    coverage's contexts, and its ``functions`` where the generator records no calls: a call runs
    a line of the function's body (``spans``: function -> [file, first, last(, first body line)])."""
    by_file: dict[str, dict[int, list[str]]] = {}
    for function, span in spans.items():
        file, first, last = span[:3]
        body = span[3] if len(span) > 3 else first
        if file not in by_file:
            by_file[file] = contexts_by_lineno(file)
        for line, contexts in by_file[file].items():
            if first <= line <= last:
                for test in contexts:
                    if test in traced:
                        traced[test]["lines"].setdefault(function, []).append(line - first)
                        if traced[test]["functions"] is None and line >= body:
                            traced[test].setdefault("called", set()).add(function)
    for entry in traced.values():
        entry["lines"] = {function: sorted(lines) for function, lines in entry["lines"].items()}
        called = entry.pop("called", set())
        if entry["functions"] is None:
            entry["functions"] = sorted(called)


def freeze_heap() -> None:
    """Everything alive now (the collected suite, torch, Hypothesis) is shared with the children
    forked next: out of the collector's reach, a child's collections scan only what its own tests
    allocate instead of the whole inherited heap (and copying every page of it)."""
    gc.collect()
    gc.freeze()


def import_quietly(names: list[str]) -> list[str]:
    """Import ``names`` in order (a worker's sys.modules: each after the modules it needs), skipping
    any that fail; the ones now imported."""
    import importlib

    imported = []
    for name in names:
        if name in sys.modules:
            imported.append(name)
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - only a warm-up: a child imports what it needs itself
            continue
        imported.append(name)
    return imported


def read_json(path: Path) -> dict | None:
    """A JSON file another process replaces as it goes (None: not there yet, or being replaced)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def quiet() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def finish(results: dict) -> int:
    """An engine process's exit status: 1, the reason printed, when the campaign could not run."""
    if "error" in results:
        print(f"campaign failed: {results['error']}", flush=True)
        return 1
    return 0
