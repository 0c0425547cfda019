"""The kill matrix's test runner, inside a campaign workspace (copied there as
attnspec_matrix_worker.py and run from mutmut's mutated copy, ``mutants/``):

    python attnspec_matrix_worker.py PLAN.json

PLAN.json: {"workers": N, "mutants": [{"name": mutant, "tests": [node id, ...]}, ...]}, each
mutant's tests being the ones mutmut's coverage run saw call the mutated function, fastest first.

The worker imports the suite once (a collect-only pytest run: torch, the properties, impl's
mutated copy), then forks one child per mutant, up to N at a time.  The child selects the mutant
(MUTANT_UNDER_TEST, which mutmut's trampolines read at every call) and runs its tests with the
kill recorder in matrix mode (ATTNSPEC_MATRIX=1: every failing test is logged, and a test is skipped
once all its requirements have killed the mutant on its attention path).  A test that never calls
the mutated function runs exactly as in the clean run, which passed, so leaving it out changes no
cell of the matrix; a fork per mutant keeps one mutant's state (a cache, a module global) from
reaching the next.  A child that runs past its time limit is stopped: it keeps the kills it logged.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

MIN_TIMEOUT_S = 60.0
ARGUMENTS = [
    "-q",
    "--no-header",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:warnings",
    "-p",
    "attnspec_killrecorder",
]


def run_child(name: str, tests: list[str]) -> None:
    """In the forked child: run ``tests`` against mutant ``name``, then exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.environ.update(MUTANT_UNDER_TEST=name, ATTNSPEC_MATRIX="1")
    try:
        pytest.main(ARGUMENTS + tests)
    finally:
        os._exit(0)


def main() -> int:
    plan = json.loads(open(sys.argv[1], encoding="utf-8").read())
    files = sorted({test.split("::")[0] for mutant in plan["mutants"] for test in mutant["tests"]})
    code = pytest.main(["--collect-only", *ARGUMENTS, *files])  # import everything once, here
    if code != pytest.ExitCode.OK:
        print(f"the kill matrix could not collect the suite (pytest exited with {int(code)})", flush=True)
        return 1
    queue = [(m["name"], m["tests"], m.get("budget_s", 0.0)) for m in plan["mutants"]]
    running: dict[int, tuple[str, float, float]] = {}
    done = 0
    while queue or running:
        while queue and len(running) < plan["workers"]:
            name, tests, budget = queue.pop(0)
            pid = os.fork()
            if pid == 0:
                run_child(name, tests)
            running[pid] = (name, time.monotonic(), max(MIN_TIMEOUT_S, 10 * budget))
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            name, since, _ = running.pop(pid)
            done += 1
            print(f"[{done}/{len(plan['mutants'])}] {name} ({time.monotonic() - since:.1f} s)", flush=True)
            continue
        for pid, (name, since, limit) in list(running.items()):
            if time.monotonic() - since > limit:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                running.pop(pid)
                done += 1
                print(f"[{done}/{len(plan['mutants'])}] {name}: stopped after {limit:.0f} s", flush=True)
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
