"""The campaign's test runner (copied into the workspace as attnspec_engine.py; run by the driver in
mutmut's copy of the workspace, ``mutants/``, once mutmut has generated the mutants).

mutmut turns every function of impl/ into a trampoline that runs the original or the mutant that
MUTANT_UNDER_TEST names, read at every call.  This runner grades the mutants in one pytest session,
in one warm process, so no mutant pays for an interpreter, an import of torch or a collection:

1. the suite is collected once;
2. the clean run: every test against the original code with MUTANT_UNDER_TEST=stats, where the
   trampolines name the functions each test calls (the tests that cover a mutant are the ones that
   call its function: a test that never calls it runs as in the clean run, which passed); a failing
   test ends the campaign, since mutants are graded against a passing suite.  The modules the tests
   import on first use (torch._dynamo, ...) are then imported here, once, so that no child pays for
   them again;
3. a check that mutants are live: with MUTANT_UNDER_TEST=fail every trampoline raises, so the
   fastest covering test must fail;
4. one forked child per mutant, up to N at a time: the child sets MUTANT_UNDER_TEST and runs the
   collected items that cover the mutant, fastest first (a test that already killed a mutant of the
   same function first), through pytest's own run protocol, and stops at the first failure.  With
   the kill matrix, a catalogue mutant runs every covering test that checks a requirement instead,
   skipping a test once every requirement it checks has killed the mutant on its attention path,
   then (only if none failed) the covering meta tests up to the first failure; its status is the
   same as with a stop at the first failure.  A fork per mutant keeps one mutant's state (a cache,
   a module global) from reaching the next, and a child that runs past its time limit is stopped
   (Timeout);
5. results.json: per test its coverage and duration, per mutant its status and failing tests.

With ``previous`` (``--incremental``) the clean run re-runs only the tests that changed or that call
a function that changed, and a mutant keeps its previous result when its function, its mutant
code, its operator and every covering test are unchanged (history.py).  With ``shard`` [i, n] it
runs the mutants whose shard (history.shard_of) is i.
"""

from __future__ import annotations

import ast
import gc
import json
import os
import signal
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

try:  # in a campaign workspace, beside this file
    import attnspec_history as history  # type: ignore[import-not-found]
except ImportError:  # imported from the mutants package (its own tests)
    from . import history  # type: ignore[no-redef]

TERSE = "ATTNSPEC_TERSE_FAILURES"  # properties/conventions.py: failures without the conventions' oracles
MIN_TIMEOUT_S = 30.0  # a child's time limit: at least this, or TIMEOUT_FACTOR x its tests' clean time
TIMEOUT_FACTOR = 10.0
PROGRESS_EVERY_S = 1.0
HYPOTHESIS_FAILING_EXAMPLES = "_hypothesis_failing_examples"  # set on the item by Hypothesis 6 on a failure


def item_requirements(item: pytest.Item) -> list[str]:
    return [rid for mark in item.iter_markers("req") for rid in mark.args]


def item_path(item: pytest.Item) -> str:
    """The attention path a test runs on (its ``attention_path`` parameter), "" when it takes none."""
    callspec = getattr(item, "callspec", None)
    return str(callspec.params.get("attention_path", "")) if callspec else ""


def item_keys(item: pytest.Item) -> set[str]:
    """requirement@path for each requirement the test checks: what a kill-matrix cell is made of."""
    return {f"{rid}@{item_path(item)}" for rid in item_requirements(item)}


def run_items(session: pytest.Session, items: list[pytest.Item], matrix: bool) -> dict:
    """Run ``items`` in this process through pytest's run protocol (fixtures, capture, hooks), in
    order: up to the first failure, or with ``matrix`` every item whose requirements have not all
    failed yet (see the module's docstring).  Returns the failures and how many tests ran."""
    killed: set[str] = set()
    failures: list[list] = []
    ran = 0
    candidates = list(items)
    if matrix:  # the tests that check a requirement first, then the others up to the first failure
        candidates = [i for i in items if item_requirements(i)] + [
            i for i in items if not item_requirements(i)
        ]
    for index, item in enumerate(candidates):
        keys = item_keys(item)
        if matrix and keys and keys <= killed:
            continue
        if not keys and failures:
            break  # a meta test adds no cell: it only decides a status that is already Killed
        # the stack of set-up nodes must lead to this item even when the one expected was skipped
        session._setupstate.teardown_exact(item)
        # a property's failure kills whatever its message says: the kit skips the wording's oracles
        # (a meta test may check wording, so it runs as written)
        os.environ[TERSE] = "1" if keys else "0"
        following = candidates[index + 1] if index + 1 < len(candidates) else None
        reports = runtestprotocol(item, nextitem=following, log=False)
        ran += 1
        if any(report.failed for report in reports):
            seconds = sum(report.duration for report in reports)
            failures.append([item.nodeid, item_requirements(item), round(seconds, 3), item_path(item)])
            killed |= keys
            if not matrix:
                break
    return {"failures": failures, "tests_run": ran}


@dataclass
class Job:
    name: str
    tests: list[str]
    matrix: bool
    budget_s: float
    started: float = 0.0
    limit_s: float = 0.0


@dataclass
class Progress:
    path: Path | None
    phase: str = "clean run"
    total: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    last: float = 0.0

    def write(self, force: bool = False) -> None:
        if self.path is None or (not force and time.monotonic() - self.last < PROGRESS_EVERY_S):
            return
        self.last = time.monotonic()
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"phase": self.phase, "total": self.total, "counts": self.counts}))
        temporary.replace(self.path)


class Engine:
    """pytest plugin: replaces the session's run loop with the campaign (see the module's docstring)."""

    def __init__(self, plan: dict) -> None:
        self.plan = plan
        self.items: dict[str, pytest.Item] = {}
        self.order: list[str] = []
        self.results: dict = {}
        self.progress = Progress(Path(plan["progress"]) if plan.get("progress") else None)
        self.lazy_modules: list[str] = []  # imported by the tests in the clean run's workers

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
        if session.testsfailed:
            self.results = {"error": f"{session.testsfailed} errors while collecting the suite"}
        elif not self.items:
            self.results = {"error": "no tests were collected"}
        else:
            self.results = self.campaign(session)
        return True

    # --- the clean run ---------------------------------------------------------------------

    def parallel_clean_run(
        self, session: pytest.Session, nodeids: list[str], spans: dict[str, list], cost: dict[str, float]
    ) -> tuple[dict[str, dict], list[str]]:
        """clean_run split over the workers, one forked child each: whole test modules (their
        fixtures stay per module), the longest first onto the least loaded worker (``cost``: the
        previous run's seconds, when known)."""
        self.progress.total = len(nodeids)  # the children write none: the phase, at least
        self.progress.write(force=True)
        modules: dict[str, list[str]] = {}
        for nodeid in nodeids:
            modules.setdefault(nodeid.split("::")[0], []).append(nodeid)
        shares: list[list[str]] = [[] for _ in range(max(1, min(self.plan["workers"], len(modules))))]
        loads = [0.0] * len(shares)
        for module in sorted(modules, key=lambda m: -sum(cost.get(t, 0.05) for t in modules[m])):
            lightest = loads.index(min(loads))
            shares[lightest] += modules[module]
            loads[lightest] += sum(cost.get(t, 0.05) for t in modules[module])
        if len(shares) == 1:
            return self.clean_run(session, nodeids, spans)
        out_dir = Path(self.plan["workspace"]) / "clean"
        out_dir.mkdir(exist_ok=True)
        pids = []
        for index, share in enumerate(shares):
            order = [n for n in nodeids if n in set(share)]
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    quiet()
                    self.progress.path = None  # the parent reports progress
                    traced, failed = self.clean_run(session, order, spans)
                    part = {"traced": traced, "failed": failed, "modules": list(sys.modules)}
                    (out_dir / f"{index}.json").write_text(json.dumps(part))
                except BaseException:  # noqa: BLE001 - the parent sees the missing file
                    code = 3
                finally:
                    os._exit(code)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
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
        return {n: traced_all[n] for n in nodeids if n in traced_all}, failed_all

    def clean_run(
        self, session: pytest.Session, nodeids: list[str], spans: dict[str, list]
    ) -> tuple[dict[str, dict], list[str]]:
        """Run ``nodeids`` against the original code: per test its seconds, the functions its
        trampolines saw called, and the lines of each it executed (relative to the function's
        ``def`` line, measured by coverage.py with one context per test); and the failing tests."""
        import coverage
        from mutmut.core import MutmutCallStack
        from mutmut.mutation import trampoline

        files = sorted({span[0] for span in spans.values()})
        measure = coverage.Coverage(data_file=None, include=files, config_file=False)
        select_mutant("stats")
        traced: dict[str, dict] = {}
        failed = []
        hits: set[str] = set()
        measure.start()
        # A trace function slows every frame down, the tests' and Hypothesis' too (~40 % on the
        # suite), while only the trampolined functions' lines are wanted.  When each of those lines
        # can only run inside a call of its function (no nested function or class, no generator),
        # the tracer is on only from the outermost trampoline's call to its return.
        tracer = sys.gettrace()
        paused = tracer is not None and only_run_inside_their_calls(spans)
        original_reset = MutmutCallStack.reset

        def hit(name: str, caller: str | None = None) -> None:
            hits.add(name)
            if paused and caller is None:  # the outermost trampolined call is about to start
                sys.settrace(tracer)

        def reset(token) -> None:
            original_reset(token)
            if MutmutCallStack.get()[1] == 0:  # ... and has returned
                sys.settrace(None)

        trampoline.record_trampoline_hit = hit
        if paused:
            MutmutCallStack.reset = reset  # type: ignore[method-assign]
            sys.settrace(None)
        try:
            for index, nodeid in enumerate(nodeids):
                item = self.items[nodeid]
                hits.clear()
                measure.switch_context(nodeid)
                following = self.items[nodeids[index + 1]] if index + 1 < len(nodeids) else None
                reports = runtestprotocol(item, nextitem=following, log=False)
                if any(report.failed for report in reports):
                    failed.append(nodeid)
                traced[nodeid] = {
                    "duration": round(sum(report.duration for report in reports), 4),
                    "functions": sorted(hits),
                    "requirements": item_requirements(item),
                    "lines": {},
                }
                self.progress.counts = {"tested": index + 1}
                self.progress.total = len(nodeids)
                self.progress.write()
        finally:
            MutmutCallStack.reset = original_reset  # type: ignore[method-assign]
            sys.settrace(tracer)
            measure.stop()
            select_mutant("")
        data = measure.get_data()
        for function, (file, first, last) in spans.items():
            for line, contexts in data.contexts_by_lineno(file).items():
                if first <= line <= last:
                    for nodeid in contexts:
                        if nodeid in traced:
                            traced[nodeid]["lines"].setdefault(function, []).append(line - first)
        for entry in traced.values():
            entry["lines"] = {function: sorted(lines) for function, lines in entry["lines"].items()}
        return traced, failed

    def mutants_are_live(self, session: pytest.Session, tests: dict[str, dict]) -> bool:
        """Whether a covering test fails when every trampoline raises (MUTANT_UNDER_TEST=fail)."""
        covering = [t for t in tests if tests[t]["functions"] and t in self.items]
        if not covering:
            return False
        fastest = sorted(covering, key=lambda t: tests[t]["duration"])[:5]  # one may expect any error
        pid = os.fork()
        if pid == 0:
            quiet()
            select_mutant("fail")
            outcome = run_items(session, [self.items[t] for t in fastest], matrix=False)
            os._exit(1 if outcome["failures"] else 0)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 1

    # --- the campaign ----------------------------------------------------------------------

    def campaign(self, session: pytest.Session) -> dict:
        plan = self.plan
        workspace = Path(plan["workspace"])
        started = time.monotonic()
        state = history.current_state(workspace, {n: self.items[n].path for n in self.order})
        previous = history.load(plan.get("previous"))
        not_reused = history.why_not_reused(state, previous) if plan.get("incremental") else None
        retrace = history.tests_to_trace(state, previous)
        self.progress.phase = "clean run"
        cost = {t: e["duration"] for t, e in (previous or {}).get("tests", {}).items()}
        chosen = [n for n in self.order if n in retrace]
        # The modules the tests import on first use (torch._dynamo alone takes 2 s) are imported here,
        # once, rather than in every worker and child: those of the previous run now, those the clean
        # run's workers import after it (and only when some test or mutant is to run).
        self.lazy_modules = list((previous or {}).get("lazy_modules", []))
        if chosen:
            self.lazy_modules = import_quietly(self.lazy_modules)
            freeze_heap()
        traced, failed = self.parallel_clean_run(session, chosen, state["spans"], cost)
        if failed:
            return {"error": "the clean run did not pass (failing: " + ", ".join(failed[:5]) + ")"}
        tests = history.merge_tests(state, previous, traced)
        clean_s = time.monotonic() - started
        print(f"clean run: {len(traced)} of {len(tests)} tests run in {clean_s:.1f} s", flush=True)
        if not self.mutants_are_live(session, tests):
            return {"error": "no test failed with every mutant active: the trampolines are not in use"}

        coverage = history.coverage(tests)
        old_coverage = history.coverage(previous["tests"]) if previous else {}
        mutants: dict[str, dict] = {}
        jobs: list[Job] = []
        # function -> tests that killed one of its mutants (in the previous run too): tried first
        killers = history.previous_killers(previous, coverage)
        for name, info in state["mutants"].items():
            covering = coverage.get(info["function"], [])
            entry = dict(info, matrix=plan["matrix"] and info["fault"] is not None)
            if not history.in_shard(name, plan.get("shard")):
                continue
            old = history.reusable(name, dict(entry, covering=covering), state, previous, old_coverage)
            if old is not None:
                mutants[name] = dict(entry, **old, reused=True)
                continue
            reaching = history.reaching(info, covering, tests)
            if not covering:
                mutants[name] = dict(entry, status="NoCoverage", failures=[], tests_run=0, seconds=0.0)
            elif not reaching:
                mutants[name] = dict(entry, status="Survived", failures=[], tests_run=0, seconds=0.0)
                mutants[name]["reason"] = (
                    "no covering test executes its line: each passes as in the clean run"
                )
            else:
                budget = sum(tests[t]["duration"] for t in reaching)
                jobs.append(Job(name, reaching, entry["matrix"], budget))
                mutants[name] = entry
        reused = sum(1 for m in mutants.values() if m.get("reused"))
        print(f"mutants: {len(jobs)} to run, {reused} reused", flush=True)

        mutation_started = time.monotonic()
        self.progress.phase = "testing mutants"
        if jobs:
            self.lazy_modules = import_quietly(self.lazy_modules)
            freeze_heap()
        self.progress.total = len(mutants)
        self.run_jobs(session, jobs, mutants, tests, killers)
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
            },
        }

    def run_jobs(
        self,
        session: pytest.Session,
        jobs: list[Job],
        mutants: dict[str, dict],
        tests: dict[str, dict],
        killers: dict[str, list[str]],
    ) -> None:
        """Fork one child per job, up to ``workers`` at a time, longest jobs (the matrix) first."""
        out_dir = Path(self.plan["workspace"]) / "outcomes"
        out_dir.mkdir(exist_ok=True)
        queue = sorted(jobs, key=lambda job: (not job.matrix, -job.budget_s if job.matrix else 0.0))
        running: dict[int, Job] = {}
        counts = self.progress.counts = {}
        for entry in mutants.values():
            if "status" in entry:
                counts[entry["status"]] = counts.get(entry["status"], 0) + 1

        def finish(job: Job, outcome: dict | None, status: str) -> None:
            entry = mutants[job.name]
            outcome = outcome or {"failures": [], "tests_run": 0}
            entry.update(outcome, status=status, seconds=round(time.monotonic() - job.started, 3))
            if outcome["failures"]:
                killers.setdefault(entry["function"], []).append(outcome["failures"][0][0])
            counts[status] = counts.get(status, 0) + 1
            self.progress.write()

        while queue or running:
            while queue and len(running) < self.plan["workers"]:
                job = queue.pop(0)
                known = killers.get(mutants[job.name]["function"], [])
                job.tests.sort(key=lambda t: (t not in known, tests[t]["duration"], t))
                job.started = time.monotonic()
                job.limit_s = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * job.budget_s)
                pid = os.fork()
                if pid == 0:
                    self.child(session, job, out_dir / f"{job.name}.json")
                running[pid] = job
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid:
                job = running.pop(pid)
                out = out_dir / f"{job.name}.json"
                if out.exists():
                    outcome = json.loads(out.read_text())
                    finish(job, outcome, "Killed" if outcome["failures"] else "Survived")
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

    def child(self, session: pytest.Session, job: Job, out: Path) -> None:
        """In the forked child: run the job's tests against its mutant, write the outcome, exit."""
        code = 0
        try:
            quiet()
            select_mutant(job.name)
            outcome = run_items(session, [self.items[t] for t in job.tests], job.matrix)
            temporary = out.with_suffix(".tmp")
            temporary.write_text(json.dumps(outcome))
            temporary.replace(out)
        except BaseException:  # noqa: BLE001 - reported by the parent as a RuntimeError
            code = 3
        finally:
            os._exit(code)


def only_run_inside_their_calls(spans: dict[str, list]) -> bool:
    """Whether every line of these functions (``spans``: function -> [file, first, last line]) runs
    only while the function itself is being called: none holds a nested function or class (called
    later, from anywhere) or is a generator or coroutine (resumed later)."""
    texts: dict[str, list[str]] = {}
    for file, first, last in spans.values():
        if file not in texts:
            texts[file] = Path(file).read_text(encoding="utf-8").splitlines(keepends=True)
        lines = texts[file]
        try:
            function = ast.parse(textwrap.dedent("".join(lines[first - 1 : last]))).body[0]
        except (SyntaxError, IndexError):
            return False
        if isinstance(function, ast.AsyncFunctionDef):
            return False
        for node in ast.walk(function):
            if node is not function and isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                return False
            if isinstance(node, ast.Yield | ast.YieldFrom):
                return False
    return True


def select_mutant(name: str) -> None:
    """Have mutmut's trampolines run mutant ``name`` ("": the originals; "stats", "fail"): set
    MUTANT_UNDER_TEST, and answer the trampolines with a constant, which otherwise read os.environ
    twice at every call of a function of impl/ (~6 % of a kill-matrix child's time)."""
    from mutmut.mutation import trampoline

    os.environ["MUTANT_UNDER_TEST"] = name
    trampoline.get_mutant_under_test = lambda: name


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


def quiet() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def main(plan_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text(encoding="utf-8"))
    engine = Engine(plan)
    pytest.main(plan["pytest_args"], plugins=[engine])
    Path(plan["results"]).write_text(json.dumps(engine.results), encoding="utf-8")
    if "error" in engine.results:
        print(f"campaign failed: {engine.results['error']}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
