"""The seeds sweep: every correct target of the zoo checked under many ``--seed``s, none may fail.

    python -m campaigns.seeds [--seeds 20] [--profile quick] [--jobs N] [TARGET ...]

A correct target must pass the kit whatever cases Hypothesis draws: a tolerance that is too tight, or
a property that assumes more than the conventions promise, fails a correct target on some seeds and
not on others (a flake, which a user sees as a random verdict on a correct kernel).  test_zoo.py checks
each zoo target once a run, on fresh draws; this sweep runs ``attnspec check TARGET --seed N`` for every
correct target of the zoo (test_zoo's KERNELS, MODULES, DECLARING, CROSS and FLEX) and N = 0 .. 19, so
that the same 20 draws are checked on every run, as a user runs the command, and reports per target how
many seeds passed and, for each failing seed, the verdict line and each failing requirement with its
property's first message line (CI's ``tox -e seeds``; exit code 1 if any seed fails or cannot run).

The sweep runs under the ``quick`` profile (5 examples a property besides the explicit ones; 100 drawn
examples a property over 20 seeds), about 12 minutes on 2 shared cores; the ``default`` profile's 25
took twice as long a check on the kernels measured, past the job's budget of about 15 minutes in CI
(``--profile default`` runs it so).  The checks run side by side,
one per usable core (``--jobs``), each check with one worker (``attnspec check -j 1``), each forked from
a warm process that has imported torch once (kit_runs.KitServer; ``ATTNSPEC_KIT_RUNS=subprocess``:
a new interpreter per check).  Each check runs in a folder of its own, where it leaves its
``attnspec-failures/``: a failing seed's folder is kept under ``--out`` (its full report and the
reproducers), a passing one's removed.

Eager FlexAttention (test_zoo's FLEX) gets fewer seeds, the first FEWER_SEEDS[FLEX] (``--every-seed``
gives it all): its mods are evaluated under vmap and its block mask built on every call, so one check
of it takes about a minute under ``quick`` on 2 cores, as long as the other targets' together, and 20
of them alone would take the job past its budget.  Its whole kit also runs under the ``ci`` profile
(150 examples a property) in test_zoo.py, in CI.  Its seeds start first, the slowest.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from attnspec.protocol.targets import ADAPTERS
from attnspec.runner.parallel import usable_cores
from examples.zoo import CROSS, DECLARING, FLEX, KERNELS, MODULES
from tests.fixtures.kit_runs import MODE_ENV, ROOT, KitServer, users_env

SEEDS = 20
FEWER_SEEDS = {FLEX: 5}  # targets too slow for every seed (above)
# --adapters: the built-in adapters of other implementations (transformers, gpt-oss, flash-ref, torch),
# each checked at the sizes it is built at (the model families at hidden 64 and a vocabulary of 128)
ADAPTERS_CHECKED = tuple(name for name in ADAPTERS if name != "impl")
PROFILE = "quick"
TIMEOUT = 1200.0  # seconds one check may run
# every correct target of the zoo, the slowest first (the sweep starts their seeds first)
TARGETS = (FLEX, *MODULES, *CROSS, *DECLARING, *KERNELS)
VERDICT = re.compile(r"^(PASS|FAIL)\b.*$", re.MULTILINE)
REQUIREMENT = re.compile(r"^([A-Z]+-\d+)  ")
FAILED = "  failed  "


@dataclass
class Run:
    """One ``attnspec check TARGET --seed N``: its exit code, verdict line, failures and time."""

    target: str
    seed: int
    returncode: int
    seconds: float
    verdict: str
    failures: list[tuple[str, str]] = field(default_factory=list)  # (requirement, "test: message")
    kept: Path | None = None  # the failing run's folder

    @property
    def passed(self) -> bool:
        return self.returncode == 0


def read_check(stdout: str) -> tuple[str, list[tuple[str, str]]]:
    """(the verdict line, [(requirement, failed line)]) of an ``attnspec check``'s output: each failed
    property is listed under the requirement it checks ("KERN-4  <text>", then "  failed  TEST: ..."),
    once per requirement; the verdict is the last line that starts with PASS or FAIL."""
    verdicts = [found.group(0) for found in VERDICT.finditer(stdout)]
    verdict = (verdicts or stdout.strip().splitlines() or ["(no output)"])[-1]
    failures, requirement = [], ""
    for line in stdout.splitlines():
        if (header := REQUIREMENT.match(line)) is not None:
            requirement = header.group(1)
        elif line.startswith(FAILED):
            failures.append((requirement, line[len(FAILED) :]))
    return verdict, failures


class Lanes:
    """One warm kit server per thread of the sweep (or none: a new interpreter per check)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._servers: list[KitServer] = []
        self._lock = threading.Lock()

    def run(self, command: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
        if os.environ.get(MODE_ENV) == "subprocess":
            return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        server = getattr(self._local, "server", None)
        if server is None or server.process.poll() is not None:
            server = self._local.server = KitServer(command[0])
            with self._lock:
                self._servers.append(server)
        return server.run(command, env, timeout, cwd)

    def close(self) -> None:
        for server in self._servers:
            server.close()


def check(
    lanes: Lanes, target: str, seed: int, profile: str, device: str, out: Path, extra: list[str]
) -> Run:
    """``attnspec check TARGET --seed SEED`` in a folder of its own, as a user runs it from the
    repository (the zoo importable through PYTHONPATH); the folder is kept under ``out`` if it fails."""
    folder = Path(tempfile.mkdtemp(prefix="attnspec-seeds-"))
    command = [sys.executable, "-m", "attnspec", "check", target, "--seed", str(seed), "--profile", profile]
    command += ["--device", device, "-j", "1", *extra]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))  # and the caller's
    env = dict(users_env(), PYTHONPATH=path, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    try:
        done = lanes.run(command, folder, env, TIMEOUT)
        returncode, stdout = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired:
        returncode, stdout = -1, f"FAIL: the check ran past {TIMEOUT:.0f} s"
    run = Run(target, seed, returncode, time.monotonic() - start, *read_check(stdout))
    if run.passed:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        run.kept = out / f"{target.replace(':', '.')}.seed-{seed}"
        shutil.rmtree(run.kept, ignore_errors=True)
        shutil.move(str(folder), run.kept)
        (run.kept / "output.txt").write_text(stdout)
    return run


def seeds_of(target: str, seeds: int, every: bool) -> int:
    """How many seeds ``target`` gets of ``seeds``: all with ``every``, else at most FEWER_SEEDS'."""
    return seeds if every else min(seeds, FEWER_SEEDS.get(target, seeds))


def report(runs: list[Run], targets: tuple[str, ...], seeds: int, every: bool = False) -> str:
    """Per target: seeds passed out of those run, its time (the checks' seconds summed, and the slowest),
    and each failing seed's verdict and failed requirements."""
    lines = []
    for target in targets:
        mine = sorted((run for run in runs if run.target == target), key=lambda run: run.seed)
        passed = sum(run.passed for run in mine)
        total = sum(run.seconds for run in mine)
        slowest = max((run.seconds for run in mine), default=0.0)
        count = seeds_of(target, seeds, every)
        mark = "ok  " if passed == len(mine) == count else "FAIL"
        fewer = f", {count} of {seeds} seeds: slow" if count < seeds else ""
        lines.append(
            f"{mark} {passed:2d}/{count} seeds  {target}  ({total:.0f} s of checks, slowest {slowest:.0f} s"
            f"{fewer})"
        )
        for run in mine:
            if run.passed:
                continue
            lines.append(f"       seed {run.seed} (exit {run.returncode}): {run.verdict}")
            lines += [f"         {requirement}  {failed[:300]}" for requirement, failed in run.failures]
            if run.kept is not None:
                lines.append(f"         the whole report: {run.kept / 'attnspec-failures' / 'report.txt'}")
    return "\n".join(lines)


def sweep(
    targets: tuple[str, ...],
    seeds: int,
    profile: str,
    jobs: int,
    device: str,
    out: Path,
    extra: list[str],
    every: bool = False,
) -> list[Run]:
    """Every target under seeds 0 .. seeds-1 (seeds_of), ``jobs`` checks at a time, the first targets'
    first."""
    lanes, runs, start = Lanes(), [], time.monotonic()
    work = [(target, seed) for target in targets for seed in range(seeds_of(target, seeds, every))]
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(check, lanes, t, s, profile, device, out, extra) for t, s in work]
            for future in as_completed(futures):
                run = future.result()
                runs.append(run)
                status = "pass" if run.passed else f"FAIL (exit {run.returncode}): {run.verdict}"
                print(
                    f"[{len(runs)}/{len(work)}, {time.monotonic() - start:.0f} s] {run.target} "
                    f"--seed {run.seed}: {status} ({run.seconds:.0f} s)",
                    flush=True,
                )
    finally:
        lanes.close()
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m campaigns.seeds",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="these targets (default: the zoo's)")
    parser.add_argument(
        "--adapters", action="store_true", help="every built-in adapter but impl (tox -e conformance)"
    )
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds 0 .. N-1 (default {SEEDS})")
    parser.add_argument("--profile", default=PROFILE, help=f"the checks' profile (default {PROFILE})")
    parser.add_argument("--jobs", type=int, default=usable_cores(), help="checks at a time (default: cores)")
    parser.add_argument("--device", default=os.environ.get("ATTNSPEC_DEVICE", "cpu"))
    parser.add_argument("--out", type=Path, help="where failing seeds' folders are kept (default: a new one)")
    parser.add_argument("--every-seed", action="store_true", help="every target gets every seed")
    parser.add_argument("-k", dest="k", help="only the properties matching pytest's -k EXPRESSION")
    args = parser.parse_args(argv)
    targets = tuple(args.targets) or (ADAPTERS_CHECKED if args.adapters else TARGETS)
    out = args.out or Path(tempfile.mkdtemp(prefix="attnspec-seeds-failures-"))
    out.mkdir(parents=True, exist_ok=True)
    extra = ["-k", args.k] if args.k else []
    start = time.monotonic()
    every = args.every_seed
    runs = sweep(targets, args.seeds, args.profile, max(1, args.jobs), args.device, out, extra, every)
    failed = [run for run in runs if not run.passed]
    print()
    print(report(runs, targets, args.seeds, every))
    print(
        f"\n{len(targets)} targets x up to {args.seeds} seeds ({args.profile} profile, {args.jobs} at a "
        f"time): {len(runs) - len(failed)} of {len(runs)} checks passed in {time.monotonic() - start:.0f} s"
    )
    if not failed and args.out is None:
        shutil.rmtree(out, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
