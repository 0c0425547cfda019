"""Running a campaign's engine process and watching it: a progress line with the ETA, and the
whole process group stopped on the way out (also on Ctrl-C or SIGTERM), so nothing is left running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attnspec.runner import forking
from attnspec.runner.forking import Forked

from .engine import read_json

PROGRESS_EVERY_S = 30  # how often a non-TTY gets a progress line (a TTY: every second)
POLL_S = 0.2  # how often the engine process is checked on: its end is seen this late at most
RUNNING_LONG_S = 10.0  # a test of the clean run running this long is named on the progress line
SHOWN_TEST_CHARS = 60


class Watch:
    """The engine process of one campaign and what the progress file says about it."""

    def __init__(self, workspace: Path, started: float | None = None, starting: str = "starting") -> None:
        self.workspace = workspace
        self.starting = starting  # what the engine process does before its clean run
        self.started = started if started is not None else time.monotonic()
        self.tests_started: float | None = None  # when the engine began testing mutants
        self.finished: float | None = None

    def read_progress(self) -> dict | None:
        """The engine's progress file (None before the engine starts, or while it is being replaced)."""
        return read_json(self.workspace / "progress.json")

    def line(self, progress: dict | None) -> str:
        clock = minutes(time.monotonic() - self.started)
        if progress is None:
            return f"[{self.starting} {clock}]"
        counts, total = progress["counts"], progress["total"]
        if progress["phase"] == "clean run":
            done = f"{counts['tested']}/" if "tested" in counts else ""
            return f"[clean run {clock}] {done}{total} tests" + running_long(progress.get("running"))
        done = sum(counts.values())
        line = f"[testing mutants {clock}] {done}/{total}  " + "  ".join(
            f"{status.lower()} {counts.get(status, 0)}"
            for status in ("Killed", "Survived", "Timeout", "NoCoverage")
        )
        elapsed_s = time.monotonic() - self.tests_started if self.tests_started is not None else 0.0
        if done and elapsed_s >= 1.0:  # a rate over less than a second says nothing
            line += f"  {done / elapsed_s:.2f}/s"
        eta = progress.get("eta")
        if eta and eta["seconds"] is not None:
            line += f"  ETA {minutes(eta['seconds'])}"
        elif eta and eta["matrix_left"]:  # the other mutants' pace is not known yet
            line += f"  kill matrix: {eta['matrix_left']} left, ~{minutes(eta['matrix_seconds'])}"
        return line

    def follow(self, process: subprocess.Popen | Forked) -> None:
        tty = sys.stdout.isatty()
        last_print, last_phase = 0.0, ""
        while process.poll() is None:
            time.sleep(POLL_S)
            raise_if_interrupted()
            progress = self.read_progress()
            if self.tests_started is None and progress and progress["phase"] == "testing mutants":
                self.tests_started = time.monotonic()
            phase = progress["phase"] if progress else ""
            due = time.monotonic() - last_print >= (1.0 if tty else PROGRESS_EVERY_S)
            if due or phase != last_phase:  # a line at least at every change of phase
                last_phase = phase
                line = self.line(progress)
                print("\r" + line.ljust(110) if tty else line, end="" if tty else "\n", flush=True)
                last_print = time.monotonic()
        if tty:
            print()
        if self.tests_started is None:
            self.tests_started = time.monotonic()
        self.finished = time.monotonic()

    def run(
        self, command: list[str], env: dict[str, str], log: Path, cwd: Path | None = None, fork: bool = False
    ) -> int:
        """Run ``command`` (``python -m MODULE ARGS``) in its own process group, its output to ``log``,
        following its progress; the group is stopped whatever happens.  Returns its exit status.
        ``fork``: forked from this process (attnspec/runner/forking.py: no new interpreter to start, but the
        hash seed stays this one's) rather than a new interpreter."""
        process: subprocess.Popen | Forked
        raise_if_interrupted()
        if fork:
            process = forking.start(command, cwd or Path.cwd(), env, log)
        else:
            with open(log, "w") as out:
                process = subprocess.Popen(
                    command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
        try:
            self.follow(process)
        finally:
            stop(process)
        return process.returncode


def running_long(running: dict | None) -> str:
    """The clean run's test that has run for RUNNING_LONG_S or more, named (its start shortened to fit
    a line), and for how long; "" for none."""
    if not running:
        return ""
    seconds = time.time() - running["since"]
    if seconds < RUNNING_LONG_S:
        return ""
    test = running["test"]
    if len(test) > SHOWN_TEST_CHARS:
        test = "..." + test[-(SHOWN_TEST_CHARS - 3) :]
    return f"; running {test} for {minutes(seconds)}"


def minutes(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def stop(process: subprocess.Popen | Forked) -> None:
    """Stop a process and everything it forked (its own process group)."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


INTERRUPTED: list[int] = []  # the signals that asked this process to stop


def interrupted(signum: int, frame: object) -> None:
    """A signal handler: the signal is an interrupt.  It is also kept, since Python swallows an
    exception raised where a handler happens to run inside a callback (an at-fork hook: logging's
    lock release); follow() raises it again."""
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def interrupts_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs (what it does is done whole, or not begun);
    one that came meanwhile is an interrupt as the block ends."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def raise_if_interrupted() -> None:
    if INTERRUPTED:
        raise KeyboardInterrupt(f"signal {INTERRUPTED[-1]}")


def log_tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").replace("\r", "\n").splitlines()[-lines:])


def engine_env(**extra: str) -> dict[str, str]:
    """The engine process's environment: one torch thread (forked children cannot hang on torch's
    thread pool), the CPU (forked children cannot share a CUDA context), no bytecode written."""
    env = dict(os.environ)
    env.pop("MUTANT_UNDER_TEST", None)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", ATTNSPEC_DEVICE="cpu", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env
