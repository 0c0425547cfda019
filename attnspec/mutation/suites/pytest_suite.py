"""The test runner of a conformance campaign: ``python -m mutants.target_worker WORKSPACE``.

It runs in its own process, with the environment the campaign gives it (the target in
ATTNSPEC_IMPL, Hypothesis's ``mutation`` profile, one torch thread), and reads WORKSPACE/plan.json:

    {"properties": dir, "rootdir": dir, "select": pytest -k or "", "max_children": N,
     "modules": {module: file}, "mutants": [{"name", "module", "qualname", "file", "lines"}]}

1. The clean run: every property against the unmutated target, with the lines of the target's
   files each test executes (a trace function that follows only frames of those files).  A
   failing property ends the campaign: a pass is what mutants are graded against.
2. One forked child per mutant, up to N at a time, from this warm process (no torch import per
   mutant): the child compiles the mutated module from its file in the workspace, puts the
   mutated function's code into the live function (so every reference to it, an adapter's
   included, runs the mutant), and runs the tests that executed the mutated lines, fastest first,
   all of them (the kill matrix), skipping a test once every requirement it checks has killed
   the mutant on its attention path.  Nothing outside the workspace is written.
3. WORKSPACE/results.json: per mutant its status and the failing tests, and per test its
   duration, for the report.

A mutant no test reaches is "not exercised" (Stryker's NoCoverage) and runs nothing.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
import types
from pathlib import Path

import pytest

from .engine import TERSE, freeze_heap, item_keys, item_path, item_requirements

MIN_TIMEOUT_S = 60.0


class CleanRun:
    """pytest plugin for the clean run: outcome, duration and executed target lines per test."""

    def __init__(self, files: set[str]) -> None:
        self.files = files
        self.lines: dict[str, set[tuple[str, int]]] = {}
        self.duration: dict[str, float] = {}
        self.failed: list[str] = []
        self.requirements: set[str] = set()  # of the tests that ran (not skipped)
        self.current: set[tuple[str, int]] = set()

    def _local(self, frame, event, arg):
        if event == "line":
            self.current.add((frame.f_code.co_filename, frame.f_lineno))
        return self._local

    def _global(self, frame, event, arg):
        return self._local if frame.f_code.co_filename in self.files else None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        self.requirements.update(item_requirements(item))
        self.current = set()
        previous = sys.gettrace()
        sys.settrace(self._global)
        try:
            return (yield)
        finally:
            sys.settrace(previous)
            self.lines[item.nodeid] = self.current

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.duration[report.nodeid] = self.duration.get(report.nodeid, 0.0) + report.duration
        if report.failed:
            self.failed.append(report.nodeid)


class MutantRun:
    """pytest plugin for one mutant: every failing test, and the kill-matrix skip rule."""

    def __init__(self) -> None:
        self.killed: set[str] = set()
        self.failures: list[list] = []

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        keys = item_keys(item)
        os.environ[TERSE] = "1" if keys else "0"  # as in engine.py: a property's failure kills as it is
        if keys and keys <= self.killed:
            pytest.skip("every requirement of this test already killed the mutant on this path")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if report.failed:
            self.killed.update(item_keys(item))
            self.failures.append(
                [item.nodeid, item_requirements(item), round(report.duration, 3), item_path(item)]
            )
        return report


def find_code(code: types.CodeType, qualname: str) -> types.CodeType | None:
    """The code object of ``qualname`` among the constants of a module's (or a class's) code."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_qualname == qualname:
                return const
            inner = find_code(const, qualname)
            if inner is not None:
                return inner
    return None


def live_function(module_name: str, qualname: str) -> types.FunctionType:
    """The function object that runs ``module.qualname``, under any decorators that wrap it."""
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = vars(obj)[part] if isinstance(obj, type) and part in vars(obj) else getattr(obj, part)
    obj = getattr(obj, "__func__", obj)  # staticmethod, classmethod
    obj = getattr(obj, "fget", obj)  # property
    while not (isinstance(obj, types.FunctionType) and obj.__code__.co_qualname == qualname):
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is None:
            raise LookupError(f"{module_name}.{qualname} is wrapped by {obj!r}, which does not expose it")
        obj = wrapped
    return obj


def install(mutant: dict) -> None:
    """Put the mutant's code into the live function it mutates."""
    source = Path(mutant["file"]).read_text(encoding="utf-8")
    code = find_code(compile(source, mutant["file"], "exec"), mutant["qualname"])
    if code is None:
        raise LookupError(f"{mutant['qualname']} not found in the mutated module")
    function = live_function(mutant["module"], mutant["qualname"])
    if code.co_freevars != function.__code__.co_freevars:
        raise LookupError(f"{mutant['qualname']}: the mutant's closure differs from the function's")
    function.__code__ = code


def base_arguments(plan: dict) -> list[str]:
    arguments = ["-c", os.devnull, f"--rootdir={plan['rootdir']}", "-p", "no:cacheprovider"]
    arguments += ["-q", "--no-header", "--tb=native", "-p", "no:warnings"]  # engine.py: why native
    arguments += [f"--impl={os.environ['ATTNSPEC_IMPL']}"]
    return arguments + (["-k", plan["select"]] if plan["select"] else [])


def run_child(plan: dict, mutant: dict, tests: list[str], out: Path) -> None:
    """In the forked child: install the mutant, run its tests, write the outcome, exit."""
    log = os.open(out.with_suffix(".log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ["MUTANT_UNDER_TEST"] = mutant["name"]
    result: dict = {"status": "Survived", "failures": []}
    started = time.monotonic()
    try:
        install(mutant)
        plugin = MutantRun()
        code = pytest.main(base_arguments(plan) + tests, plugins=[plugin])
        result["failures"] = plugin.failures
        if code == pytest.ExitCode.TESTS_FAILED or plugin.failures:
            result["status"] = "Killed"
        elif code != pytest.ExitCode.OK:
            result.update(status="RuntimeError", reason=f"pytest exited with {int(code)}")
    except BaseException as error:  # a mutant that cannot be installed is reported, not fatal
        result.update(status="RuntimeError", reason=f"{type(error).__name__}: {error}")
    result["duration"] = round(time.monotonic() - started, 3)
    out.write_text(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)


def covering_tests(mutant: dict, clean: CleanRun) -> list[str]:
    lines = {(mutant["path_key"], line) for line in mutant["lines"]}
    tests = [test for test, executed in clean.lines.items() if executed & lines]
    return sorted(tests, key=lambda test: clean.duration.get(test, 0.0))


def main() -> int:
    workspace = Path(sys.argv[1])
    plan = json.loads((workspace / "plan.json").read_text())
    for module in plan["modules"]:
        importlib.import_module(module)
    files = set(plan["modules"].values())
    clean = CleanRun(files)
    started = time.monotonic()
    print(f"clean run: every property against {os.environ['ATTNSPEC_IMPL']} ...", flush=True)
    code = pytest.main(base_arguments(plan) + [plan["properties"]], plugins=[clean])
    if clean.failed or code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        if clean.failed:
            reason = f"failing: {', '.join(clean.failed[:5])}"
        elif code == pytest.ExitCode.NO_TESTS_COLLECTED:
            reason = "no property was selected (-k?)"
        else:
            reason = f"pytest exited with {int(code)}"
        (workspace / "results.json").write_text(
            json.dumps({"error": f"the clean run did not pass ({reason})"})
        )
        return 1
    clean_s = time.monotonic() - started
    print(f"clean run passed in {clean_s:.0f} s ({len(clean.duration)} tests)", flush=True)

    results: dict[str, dict] = {}
    queue = []
    for mutant in plan["mutants"]:
        mutant["path_key"] = plan["modules"][mutant["module"]]
        tests = covering_tests(mutant, clean)
        if tests:
            queue.append((mutant, tests))
        else:
            results[mutant["name"]] = {"status": "NoCoverage", "failures": [], "tests": []}
    out_dir = workspace / "results"
    out_dir.mkdir(exist_ok=True)
    running: dict[int, tuple[dict, list[str], float, float]] = {}
    done, total = 0, len(queue)
    mutation_started = time.monotonic()

    def reap(pid: int) -> None:
        nonlocal done
        mutant, tests, _, _ = running.pop(pid)
        out = out_dir / f"{mutant['name']}.json"
        result = json.loads(out.read_text()) if out.exists() else {"status": "Timeout", "failures": []}
        result["tests"] = tests
        results[mutant["name"]] = result
        done += 1
        print(f"[{done}/{total}] {result['status']:<12} {mutant['name']}", flush=True)

    freeze_heap()
    while queue or running:
        while queue and len(running) < plan["max_children"]:
            mutant, tests = queue.pop(0)
            budget = sum(clean.duration.get(t, 0.0) for t in tests)
            pid = os.fork()
            if pid == 0:
                run_child(plan, mutant, tests, out_dir / f"{mutant['name']}.json")
            running[pid] = (mutant, tests, time.monotonic(), max(MIN_TIMEOUT_S, 10 * budget))
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            reap(pid)
            continue
        for pid, (_, _, since, limit) in list(running.items()):
            if time.monotonic() - since > limit:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                reap(pid)
        time.sleep(0.05)
    summary = {
        "clean_s": clean_s,
        "mutation_s": time.monotonic() - mutation_started,
        "duration_by_test": clean.duration,
        "requirements_run": sorted(clean.requirements),
        "mutants": results,
    }
    (workspace / "results.json").write_text(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
