"""Any test command as the engine's test source: ``make test``, ``python -m unittest``, a script.

The command is one test: it passes when it exits 0.  It runs in its own processes, so the mutant
reaches them through the environment: the command runs with a ``sitecustomize`` module first on
PYTHONPATH that, in every Python process the command starts,

- under the clean run, measures the lines of the mutated files (coverage.py, one data file per
  process, combined afterwards), so that a mutant whose lines the command never executes is not
  exercised and is not run;
- under a mutant (ATTNSPEC_MUTANT, set by the generator in the engine's child), swaps the mutant's
  code into its function as soon as the function's module is imported.

A command that starts no Python process of the same installation cannot be measured: its clean
run records no line, and every mutant is "not exercised".
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from ..engine import CLEAN_TIMEOUT_S, TIMEOUT_FACTOR, Engine, Known, attribute_lines

SITECUSTOMIZE = '''\
"""attnspec mutate: measures a clean run, or swaps the active mutant in (a campaign's own hook)."""
import os as _os


def _attnspec_hook():
    import json
    import sys

    data = _os.environ.get("ATTNSPEC_COVERAGE")
    if data:
        import coverage

        files = json.loads(_os.environ["ATTNSPEC_FILES"])
        measure = coverage.Coverage(data_file=data, data_suffix=True, include=files, config_file=False)
        measure.start()
        import atexit

        atexit.register(lambda: (measure.stop(), measure.save()))
    active = _os.environ.get("ATTNSPEC_MUTANT")
    if not active:
        return
    mutant = json.loads(active)

    class _Swap:
        def find_spec(self, name, path=None, target=None):
            # the planned name, or any module of the same last name that is the mutated file (a
            # namespace package imports keras/src/x.py as keras.src.x where src.x was planned)
            if name.rpartition(".")[2] != mutant["module"].rpartition(".")[2]:
                return None
            sys.meta_path.remove(self)
            try:
                import importlib.util

                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            same = spec.origin and _os.path.realpath(spec.origin) == _os.path.realpath(mutant["original"])
            if name != mutant["module"] and not same:
                return spec
            original = spec.loader.exec_module

            def exec_module(module):
                original(module)
                from attnspec.mutation.generators.sites import install

                install(dict(mutant, module=name))

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Swap())


_attnspec_hook()
'''
NAME = "the test command"


class CommandSuite:
    """The test source of a command: one test, ``the test command``."""

    in_process = False

    def __init__(self, plan: dict) -> None:
        self.command: list[str] = plan["command"]
        self.cwd = plan["cwd"]
        self.workspace = Path(plan["workspace"])
        self.files = sorted({span["file"] for span in plan["functions"].values()})
        self.hook = self.workspace / "hook"
        self.hook.mkdir(exist_ok=True)
        (self.hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        # what the command's result depends on beside the mutated files and the project's support
        # files (campaign.support_texts): the command itself, and the files it names
        self.named = self.workspace / "command.txt"
        named = [Path(p) for p in plan.get("test_files", [])]
        texts = [p.read_text(encoding="utf-8", errors="replace") for p in named]
        self.named.write_text("\n".join([" ".join(self.command), *texts]), encoding="utf-8")
        self.min_timeout_s = float(plan.get("min_timeout_s", 30.0))
        self.clean_limit_s = float(plan.get("clean_timeout_s", CLEAN_TIMEOUT_S))
        self.limit_s: float | None = None  # set by the clean run: 0.9 x the engine's limit for a child

    def tests(self) -> list[str]:
        return [NAME]

    def test_paths(self) -> dict[str, Path]:
        return {NAME: self.named}

    def requirements(self, test: str) -> list[str]:
        return []

    def environment(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(self.hook), env.get("PYTHONPATH", "")]
        env.update(PYTHONPATH=os.pathsep.join(p for p in paths if p), ATTNSPEC_FILES=json.dumps(self.files))
        env.update(extra)
        return env

    def execute(self, env: dict[str, str]) -> tuple[int | None, float]:
        """The command's exit status (None: stopped at the time limit) and its seconds."""
        started = time.monotonic()
        try:
            process = subprocess.run(
                self.command,
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=self.limit_s,
            )
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - started
        return process.returncode, time.monotonic() - started

    def clean(self, tests: list[str], spans: dict[str, list]) -> tuple[dict[str, dict], list[str]]:
        import coverage

        data = self.workspace / "command-coverage"
        env = self.environment(ATTNSPEC_COVERAGE=str(data))
        env.pop("ATTNSPEC_MUTANT", None)
        self.limit_s = self.clean_limit_s
        code, seconds = self.execute(env)
        if code is None:
            return {}, [f"{NAME} (still running after {self.clean_limit_s:.0f} s, the limit of --timeout)"]
        self.limit_s = 0.9 * max(self.min_timeout_s, TIMEOUT_FACTOR * seconds)
        print(f"clean run of {' '.join(self.command)}: exit {code} in {seconds:.1f} s", flush=True)
        combined = coverage.Coverage(data_file=str(data), config_file=False)
        parts = [str(p) for p in self.workspace.glob("command-coverage.*")]
        if parts:
            combined.combine(parts)
        measured = combined.get_data()
        traced = {NAME: {"duration": round(seconds, 4), "functions": None, "requirements": [], "lines": {}}}

        def contexts_by_lineno(file: str) -> dict[int, list[str]]:
            return {line: [NAME] for line in measured.lines(file) or []}

        attribute_lines(contexts_by_lineno, spans, traced)
        return traced, ([] if code == 0 else [f"{NAME} (exit {code})"])

    def run(self, tests: list[str], matrix: bool, known: Known | None = None) -> dict:
        code, seconds = self.execute(self.environment())
        if code is None:
            return {
                "failures": [],
                "tests_run": 1,
                "status": "Timeout",
                "reason": f"stopped after {seconds:.0f} s",
            }
        failures = [[NAME, [], round(seconds, 3), ""]] if code != 0 else []
        return {"failures": failures, "tests_run": 1, "tests_s": round(seconds, 3)}

    def run_one(self, test: str, following: str | None) -> tuple[bool, float, bool]:
        code, seconds = self.execute(self.environment())
        return code != 0, seconds, False


def main(plan: dict, generator) -> dict:
    suite = CommandSuite(plan)
    results = Engine(plan, generator, suite).campaign()
    Path(plan["results"]).write_text(json.dumps(results), encoding="utf-8")
    return results
