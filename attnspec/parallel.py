"""`attnspec check --jobs N`: the collected properties run in N processes, forked after collection.

The check's own process imports torch, Hypothesis and the target and collects the properties once;
then it forks N - 1 workers, and each process takes the next unit of work (the tests of one test
function, with its parametrizations) until none is left, so a slow property (gradcheck) does not
hold up the rest.  A worker sends each of its reports back over a pipe; the check's process logs
them as its own between its units (progress dots, the run report, --junitxml), so the output and
the verdict are those of one process.  A worker that dies (a crash in the target) fails the test it
was running, and the rest of that test function runs in the check's process.

It runs in one process where forking is unsafe or useless: no os.fork (Windows), one job, -x (a
failure must stop every process), CUDA already initialized (a forked child cannot use it), or
collection errors (pytest reports them).
"""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import sys
from collections.abc import Iterator

import pytest

RECORD = struct.Struct("<I")  # a unit's index in the work pipe: reads of one record are atomic


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity where the platform tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_jobs() -> int:
    """One process per usable core, at most 4: a check has a few dozen units, and each process pays
    for torch's lazy imports (a first backward pass, a first meta-device op) once more."""
    return max(1, min(4, usable_cores()))


def units(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """Consecutive items of one test function (its parametrizations) form a unit of work."""
    grouped: list[list[pytest.Item]] = []
    for item in items:
        if grouped and function_of(grouped[-1][0]) == function_of(item):
            grouped[-1].append(item)
        else:
            grouped.append([item])
    return grouped


def function_of(item: pytest.Item) -> tuple[object, str]:
    return item.path, getattr(item, "originalname", item.name)


def forking_problem(session: pytest.Session, jobs: int) -> str | None:
    """Why the tests must run in this one process, or None."""
    import torch

    if jobs < 2:
        return "one job"
    if not hasattr(os, "fork"):
        return "no os.fork on this platform"
    if session.config.option.maxfail:
        return "-x (--maxfail) stops at the first failures"
    if session.testsfailed:
        return "collection errors"
    if torch.cuda.is_initialized():
        return "CUDA is initialized, and a forked process cannot use it"
    return None


class Parallel:
    """The pytest plugin that replaces the run-test loop with one over N processes."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.work: list[list[pytest.Item]] = []  # the units, by index
        self.workers: dict[int, int] = {}  # pid -> the read end of its report pipe
        self.pending: dict[int, bytes] = {}  # pid -> bytes read that end in the middle of a line
        # pid -> the unit it took last, how many of its tests it finished, the test it started last
        self.progress: dict[int, tuple[int, int, str | None]] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        if session.config.option.collectonly or forking_problem(session, self.jobs):
            return None  # pytest's own loop
        self.work = units(session.items)
        take, put = os.pipe()
        os.write(put, b"".join(RECORD.pack(i) for i in range(len(self.work))))
        os.close(put)  # once the units are taken, a read gets b"": no work is left
        try:
            for _ in range(min(self.jobs, len(self.work)) - 1):
                self.fork(session, take)
            for index in taken(take):
                self.run(session, self.work[index])
                self.drain(session, block=False)
            self.drain(session, block=True)
            if session.shouldstop:  # a Ctrl-C while the last reports came in
                raise session.Interrupted(str(session.shouldstop))
        finally:
            os.close(take)
            self.stop()
        return True

    def run(self, session: pytest.Session, unit: list[pytest.Item]) -> None:
        for i, item in enumerate(unit):
            if session.shouldfail or session.shouldstop:
                raise session.Interrupted(str(session.shouldfail or session.shouldstop))
            # the unit's last test tears its fixtures down: the next unit may run in another process
            nextitem = unit[i + 1] if i + 1 < len(unit) else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)

    def fork(self, session: pytest.Session, take: int) -> None:
        read, write = os.pipe()
        sys.stdout.flush()  # what this process printed so far is not the worker's to print again
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            os.close(write)
            self.workers[pid] = read
            return
        code = 1
        try:  # the worker: its reports go to the pipe, nothing to the terminal
            os.close(read)
            for other in self.workers.values():
                os.close(other)
            self.workers.clear()
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the check's process's: it ends us
            config = session.config
            config.pluginmanager.unregister(name="terminalreporter")
            sender = Sender(config, write)
            config.pluginmanager.register(sender, "attnspec-parallel-sender")
            for index in taken(take):
                sender.send({"unit": index})
                self.run(session, self.work[index])
            code = 0
        finally:
            os._exit(code)  # no session finish, no atexit: the check's process does those

    def drain(self, session: pytest.Session, block: bool) -> None:
        """Log the workers' reports that have arrived (all of them, until every worker ends, with
        ``block``)."""
        while self.workers and not session.shouldstop:
            ready, _, _ = select.select(list(self.workers.values()), [], [], None if block else 0)
            if not ready:
                return
            for pid, fd in list(self.workers.items()):
                if fd in ready:
                    self.receive(session, pid, fd)

    def receive(self, session: pytest.Session, pid: int, fd: int) -> None:
        chunk = os.read(fd, 1 << 16)
        if not chunk:  # the worker ended
            os.close(fd)
            del self.workers[pid]
            _, status = os.waitpid(pid, 0)
            if status != 0:
                self.died(session, pid, status)
            return
        *lines, self.pending[pid] = (self.pending.get(pid, b"") + chunk).split(b"\n")
        hook = session.config.hook
        for line in lines:
            message = json.loads(line)
            if "unit" in message:
                self.progress[pid] = (message["unit"], 0, None)
            elif "start" in message:
                index, finished, _ = self.progress[pid]
                self.progress[pid] = (index, finished, message["start"])
                hook.pytest_runtest_logstart(nodeid=message["start"], location=tuple(message["location"]))
            elif "finish" in message:
                index, finished, _ = self.progress[pid]
                self.progress[pid] = (index, finished + 1, None)
                hook.pytest_runtest_logfinish(nodeid=message["finish"], location=tuple(message["location"]))
            else:
                report = hook.pytest_report_from_serializable(config=session.config, data=message["report"])
                # JSON made lists of the tuples pytest's reporters take: a skip's (path, line, reason)
                report.location = tuple(report.location)
                if isinstance(report.longrepr, list):
                    report.longrepr = tuple(report.longrepr)
                hook.pytest_runtest_logreport(report=report)

    def died(self, session: pytest.Session, pid: int, status: int) -> None:
        """A worker died (a crash in the target): the test it was running fails, with how it died, and
        the rest of its unit runs here."""
        if pid not in self.progress:
            return  # it took no unit
        index, finished, running = self.progress.pop(pid)
        unit = self.work[index]
        if running is not None:
            signalled = os.WIFSIGNALED(status)
            how = f"signal {os.WTERMSIG(status)}" if signalled else f"exit code {os.WEXITSTATUS(status)}"
            item = unit[finished]
            message = f"the check's worker process died ({how}) running this test"
            report = pytest.TestReport(
                item.nodeid, item.location, {}, "failed", message, "call",
                user_properties=item.user_properties,  # its requirements, for the failures in brief
            )  # fmt: skip
            session.config.hook.pytest_runtest_logreport(report=report)
            session.config.hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
            finished += 1
        self.run(session, unit[finished:])

    def stop(self) -> None:
        """End the workers that are still running (an interrupted or failed run)."""
        for pid, fd in self.workers.items():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            os.close(fd)
        self.workers.clear()


def taken(take: int) -> Iterator[int]:
    """The units (their indices) this process takes from the work pipe, one at a time, until none is
    left."""
    while record := os.read(take, RECORD.size):
        yield RECORD.unpack(record)[0]


class Sender:
    """A worker's plugin: each test's start, reports and finish, one JSON line each, to the check's
    process."""

    def __init__(self, config: pytest.Config, fd: int) -> None:
        self.config = config
        self.fd = fd

    def send(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:
        self.send({"start": nodeid, "location": location})

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        self.send({"report": data})

    @pytest.hookimpl
    def pytest_runtest_logfinish(self, nodeid: str, location: tuple) -> None:
        self.send({"finish": nodeid, "location": location})
