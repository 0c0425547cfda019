"""`attnspec check` runs the properties in worker processes, so that a target that crashes, hangs or
exhausts memory fails the property it did it in and the check still reaches its verdict.

The check's process imports torch, Hypothesis and the target and collects the properties once; its
first call of the target runs in a forked probe (``in_a_fork``).  Then it forks ``--jobs`` workers and
only coordinates: each worker takes the next unit of work (the tests of one test function, with its
parametrizations) until none is left, so a slow property (gradcheck) does not hold up the rest, and
sends each test's reports back over a pipe; the check's process logs them as its own (progress, the
run report, --junitxml), so the output and the verdict are those of one process.

Every call into the target writes itself to the worker's slot of shared memory (attnspec/kit/in_flight.py),
so the check's process knows what a worker was calling when it:

- died: the test it was running fails ("the target crashed the process (signal 11, SIGSEGV) on
  <the call>"), and a fresh worker runs the rest of its unit;
- ran one call longer than ``--timeout``: the worker is killed and the test fails the same way; after
  ``HANGS`` hangs the check stops running properties (a target that hangs on a common case would
  otherwise cost every property a timeout) and fails;
- exhausted memory: each worker's address space is capped (``--max-memory``, where the platform has
  RLIMIT_AS), so a runaway allocation fails at once in the target, which the kit reports.

Workers die with the check's process, however it dies (forking.die_with_parent).  The tests run in
the check's own process, as pytest runs them, where forking is unsafe: no os.fork (Windows), CUDA
already initialized (a forked child cannot use it), --pdb, or collection errors (pytest reports them).
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from attnspec.kit import in_flight
from attnspec.kit.names import ISOLATION, Died  # noqa: F401 (Died: raised here, caught by the kit too)
from attnspec.runner.forking import die_with_parent

NAME = ISOLATION  # the plugin, as registered (the kit's conftest asks for it)
RECORD = struct.Struct("<I")  # a unit's index in the work pipe: reads of one record are atomic
TIMEOUT = 60.0  # seconds one call of the target may run (--timeout)
HANGS = 3  # hangs after which the check stops running properties
POLL = 0.25  # seconds between looks at the workers' calls in flight
GIB = 2**30
MEMORY_HEADROOM = 2.0  # GiB a worker may need beyond what it starts with, to run a test


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity where the platform tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_jobs() -> int:
    """One process per usable core, at most 4: a check has a few dozen units, and each process pays
    for torch's lazy imports (a first backward pass, a first meta-device op) once more."""
    return max(1, min(4, usable_cores()))


def default_memory(jobs: int) -> float | None:
    """GiB of address space each worker may take: three quarters of this machine's memory shared
    among the workers, at least 4; None where the platform cannot cap it."""
    try:
        import resource

        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ImportError, ValueError, OSError, AttributeError):
        return None
    if not hasattr(resource, "RLIMIT_AS") or sys.platform == "darwin":  # macOS does not enforce it
        return None
    return max(4.0, round(0.75 * total / GIB / jobs, 1))


def too_little_memory(memory: float | None) -> str | None:
    """Why a cap of ``memory`` GiB would fail a worker before it calls the target (a worker starts with
    the address space this process has, torch loaded, and needs some more to run a test:
    MEMORY_HEADROOM), or None: no cap, or one that leaves room."""
    import torch  # noqa: F401 - every worker has it

    taken = address_space()
    if memory is None or taken is None or memory * GIB >= taken + MEMORY_HEADROOM * GIB:
        return None
    least = (taken + MEMORY_HEADROOM * GIB) / GIB
    return (
        f"--max-memory {memory:g}: a process of the check takes {taken / GIB:.1f} GiB of address space "
        f"before it calls the target; give at least {least:.1f} GiB, or 0 for no cap"
    )


def address_space() -> int | None:
    """The bytes of address space this process takes (Linux: VmSize), or None where that is unknown."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


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


def forking_problem(config: pytest.Config) -> str | None:
    """Why the tests must run in this one process, or None."""
    import torch

    if not hasattr(os, "fork"):
        return "no os.fork on this platform"
    if config.option.usepdb:
        return "--pdb debugs in this process"
    if torch.cuda.is_initialized():
        return "CUDA is initialized, and a forked process cannot use it"
    return None


def how_it_died(status: int) -> str:
    """A worker's wait status in words."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown"
        killed = " (the kernel's out-of-memory killer, or another process)" if name == "SIGKILL" else ""
        return f"crashed the process (signal {number}, {name}){killed}"
    return f"ended the process (exit code {os.WEXITSTATUS(status)})"


@dataclass
class Running:
    """What a worker is doing: its slot, the unit it took, how many of its tests it finished, the test
    it started last, and why the check stopped it (a hang), if it did."""

    slot: int
    read: int  # the read end of its report pipe
    unit: int | None = None
    finished: int = 0
    test: str | None = None
    stopped: str = ""


class Parallel:
    """The pytest plugin that replaces the run-test loop with one over worker processes."""

    __name__ = NAME  # the name pytest registers it under

    def __init__(
        self,
        jobs: int,
        timeout: float = TIMEOUT,
        memory: float | None = None,
        isolated: Callable[[pytest.Item], bool] = lambda item: True,
    ) -> None:
        self.jobs = jobs
        self.isolated = isolated  # the tests that run in workers; the others run here, first
        self.timeout = timeout
        self.memory = memory
        self.work: list[list[pytest.Item]] = []  # the units, by index
        self.workers: dict[int, Running] = {}  # pid -> what it is doing
        self.pending: dict[int, list[bytes]] = {}  # pid -> the chunks read of a line not ended yet
        self.slots = in_flight.Slots(jobs)
        self.free = list(range(jobs))  # slots no worker holds
        self.take = -1  # the read end of the work pipe
        self.failing: set[str] = set()  # tests that failed and have not ended (-x waits for their teardown)
        self.hangs = 0
        self.not_run = 0  # tests left when the check stopped for hangs
        self.config: pytest.Config | None = None

    @pytest.hookimpl(tryfirst=True)  # before the kit's conftest probes the target
    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config

    def forks(self) -> bool:
        return self.config is not None and forking_problem(self.config) is None

    def in_a_fork(self, function: Callable[[], object]) -> object:
        """``function()`` run in a forked child, its result (picklable) sent back; raises Died when the
        child dies or one of its calls into the target runs over the timeout.  Where forking is unsafe,
        it runs here."""
        if not self.forks():
            return function()
        read, write = os.pipe()
        slot = self.slots.slot(self.free[0])
        pid = self._forked(read)
        if pid == 0:  # the child: never returns
            code = 1
            try:
                self._worker_set_up(slot)
                silenced(streams=True)  # what the target prints on the kit's probes is not the user's
                try:
                    result: tuple[str, object] = ("returned", function())
                except BaseException as error:  # noqa: B036 (said in the parent, as raised there: SIGINT is ignored here)
                    result = ("raised", f"{type(error).__name__}: {error}")
                data = pickle.dumps(result)
                while data:
                    data = data[os.write(write, data) :]
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        chunks: list[bytes] = []
        try:
            while True:
                ready, _, _ = select.select([read], [], [], POLL)
                if ready:
                    chunk = os.read(read, 1 << 16)
                    if not chunk:
                        break
                    chunks.append(chunk)
                elif (late := self._late(slot)) is not None:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    raise Died(late)
        finally:
            os.close(read)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            in_flight_call = slot.in_flight()
            on = f" on {in_flight_call[1]}" if in_flight_call else ""
            raise Died(f"{how_it_died(status)}{on}")
        how, result = pickle.loads(b"".join(chunks))
        if how == "raised":
            raise RuntimeError(result)
        return result

    def _late(self, slot: in_flight.Slot) -> str | None:
        """Why the call in flight in ``slot`` is a hang, or None."""
        call = slot.in_flight()
        if call is None or call[0] <= self.timeout:
            return None
        return f"hung: one call ran over {self.timeout:g} s (--timeout) on {call[1]}"

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        if session.config.option.collectonly or session.testsfailed or not self.forks():
            return None  # pytest's own loop
        here = [item for item in session.items if not self.isolated(item)]
        self.run(session, here)  # pytest --attnspec: your own tests, as pytest runs them
        self.work = units([item for item in session.items if self.isolated(item)])
        self.take, put = take, put = os.pipe()
        os.write(put, b"".join(RECORD.pack(i) for i in range(len(self.work))))
        os.close(put)  # once the units are taken, a read gets b"": no work is left
        try:
            for _ in range(min(self.jobs, len(self.work))):
                self.fork(session, take)
            while self.workers:
                self.drain(session)
                if session.shouldstop:  # Ctrl-C
                    raise session.Interrupted(str(session.shouldstop))
                if session.shouldfail and not self.failing & {r.test for r in self.workers.values()}:
                    raise session.Failed(str(session.shouldfail))  # -x, once the failed test has ended
                if self.hangs >= HANGS:
                    self.give_up(session, take)
        finally:
            os.close(take)
            self.stop()
        return True

    def run(self, session: pytest.Session, unit: list[pytest.Item]) -> None:
        for i, item in enumerate(unit):
            if session.shouldfail or session.shouldstop:
                raise (session.Failed if session.shouldfail else session.Interrupted)(
                    str(session.shouldfail or session.shouldstop)
                )
            # the unit's last test tears its fixtures down: the next unit may run in another process
            nextitem = unit[i + 1] if i + 1 < len(unit) else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)

    def _forked(self, read: int) -> int:
        """fork(); in the child, this process's pipes to other workers closed."""
        sys.stdout.flush()  # what this process printed so far is not the worker's to print again
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                die_with_parent(parent)
                for running in self.workers.values():
                    os.close(running.read)
                self.workers.clear()
                os.close(read)
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the check's process's: it ends us
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent-death signal ends us at once
            except BaseException:  # noqa: B036 (a forked child must never return into its parent's code)
                os._exit(1)
        return pid

    def _worker_set_up(self, slot: in_flight.Slot) -> None:
        import faulthandler

        faulthandler.disable()  # a crash is said once, by the check's process, with its call
        in_flight.use(slot)
        if self.memory is not None:
            import resource

            limit = int(self.memory * GIB)
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard == resource.RLIM_INFINITY or hard > limit:
                resource.setrlimit(resource.RLIMIT_AS, (limit, hard))

    def fork(self, session: pytest.Session, take: int, first: tuple[int, int] | None = None) -> None:
        """A worker that runs the tests of unit ``first[0]`` from its ``first[1]``-th, if given, then
        takes units from the work pipe until none is left."""
        read, write = os.pipe()
        slot = self.free.pop(0)
        pid = self._forked(read)
        if pid:
            os.close(write)
            self.workers[pid] = Running(slot, read)
            return
        code = 1
        said = os.dup(2)  # the kit's own error, if any, is said there
        try:  # the worker: its reports go to the pipe, nothing to the terminal
            self._worker_set_up(self.slots.slot(slot))
            silenced()  # a target's prints outside a test's capture (a failure's replays) included
            config = session.config
            # a reporter that writes nowhere: plugins that find one attach more to their reports
            # (Hypothesis its statistics), which the check's process prints
            from _pytest.terminal import TerminalReporter

            config.pluginmanager.unregister(name="terminalreporter")
            silent = TerminalReporter(config, open(os.devnull, "w"))  # noqa: SIM115 (the worker's whole life)
            config.pluginmanager.register(silent, "terminalreporter")
            silent.pytest_sessionstart(session)  # the session it reports on (to nowhere)
            sender = Sender(config, write)
            config.pluginmanager.register(sender, "attnspec-parallel-sender")
            if first is not None:
                index, start = first
                sender.send({"unit": index, "from": start})
                self.run(session, self.work[index][start:])
            for index in taken(take):
                sender.send({"unit": index, "from": 0})
                self.run(session, self.work[index])
            code = 0
        except (session.Failed, session.Interrupted):  # -x, Ctrl-C: the check's process stops too
            pass
        except BaseException:  # noqa: B036 (the kit's own error: said, then the check goes on without us)
            import traceback

            os.write(said, traceback.format_exc().encode(errors="replace"))
        finally:
            os._exit(code)  # no session finish, no atexit: the check's process does those

    def drain(self, session: pytest.Session) -> None:
        """Log the workers' reports that have arrived, and stop a worker whose call runs over the
        timeout."""
        reads = {running.read: pid for pid, running in self.workers.items()}
        ready, _, _ = select.select(list(reads), [], [], POLL)
        for fd in ready:
            self.receive(session, reads[fd])
        for pid, running in list(self.workers.items()):
            late = self._late(self.slots.slot(running.slot))
            if late and not running.stopped:
                running.stopped = late
                self.hangs += 1
                os.kill(pid, signal.SIGKILL)  # its pipe ends: receive() reports the test

    def receive(self, session: pytest.Session, pid: int) -> None:
        running = self.workers[pid]
        chunk = os.read(running.read, 1 << 16)
        if not chunk:  # the worker ended
            status = self._reaped(pid)
            if status != 0:
                self.died(session, running, status)
            return
        pending = self.pending.setdefault(pid, [])
        if b"\n" not in chunk:  # the middle of a long line: kept as it came, joined once it ends
            pending.append(chunk)
            return
        head, *lines, rest = chunk.split(b"\n")
        lines.insert(0, b"".join([*pending, head]))
        self.pending[pid] = [rest] if rest else []
        hook = session.config.hook
        for line in lines:
            message = json.loads(line)
            if "unit" in message:
                running.unit, running.finished, running.test = message["unit"], message["from"], None
            elif "start" in message:
                running.test = message["start"]
                hook.pytest_runtest_logstart(nodeid=message["start"], location=tuple(message["location"]))
            elif "finish" in message:
                running.finished, running.test = running.finished + 1, None
                self.failing.discard(message["finish"])
                hook.pytest_runtest_logfinish(nodeid=message["finish"], location=tuple(message["location"]))
            else:
                report = hook.pytest_report_from_serializable(config=session.config, data=message["report"])
                # JSON made lists of the tuples pytest's reporters take: a skip's (path, line, reason)
                report.location = tuple(report.location)
                if isinstance(report.longrepr, list):
                    report.longrepr = tuple(report.longrepr)
                if report.failed:
                    self.failing.add(report.nodeid)
                hook.pytest_runtest_logreport(report=report)

    def died(self, session: pytest.Session, running: Running, status: int) -> None:
        """A worker died or was stopped: the test it was running fails, saying how and on which call,
        and a fresh worker runs the rest of its unit."""
        if running.unit is None:
            return  # it took no unit
        unit = self.work[running.unit]
        finished = running.finished
        if running.test is not None:
            call = self.slots.slot(running.slot).in_flight()
            if running.stopped:
                what = running.stopped
            elif call is not None:
                what = f"{how_it_died(status)} on {call[1]}"
            else:  # between calls of the target: the kit's own code, or the target's at import
                what = f"{how_it_died(status)} running this test, outside any call of the target"
            message = f"the target {what}"
            item = unit[finished]
            report = pytest.TestReport(
                item.nodeid, item.location, {}, "failed", message, "call",
                user_properties=item.user_properties,  # its requirements, for the failures in brief
            )  # fmt: skip
            report.attnspec_process = message  # type: ignore[attr-defined]  # run_report says it once
            session.config.hook.pytest_runtest_logreport(report=report)
            session.config.hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
            finished += 1
        self.slots.slot(running.slot).clear()
        if self.hangs >= HANGS or session.shouldstop or session.shouldfail:
            self.not_run += len(unit) - finished
        else:  # a fresh worker for the rest of the unit, if any, then for the units still in the pipe
            self.fork(session, self.take, (running.unit, finished) if finished < len(unit) else None)

    def give_up(self, session: pytest.Session, take: int) -> None:
        """Too many hangs: no more tests run; the hung ones fail, the ones left are counted, the
        workers stopped."""
        for pid, running in list(self.workers.items()):
            if running.stopped:  # killed: its test fails as any hang's does
                self.died(session, running, self._reaped(pid))
            elif running.unit is not None:
                self.not_run += len(self.work[running.unit]) - running.finished
        self.stop()
        self.not_run += sum(len(self.work[index]) for index in taken(take))
        from attnspec.kit.run_report import NAME as RUN_REPORT

        report = session.config.pluginmanager.get_plugin(RUN_REPORT)
        if report is not None:
            report.not_run = self.not_run

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.hangs >= HANGS:
            terminalreporter.write_line(
                f"the target hung {self.hangs} times: the check stopped there, {self.not_run} tests not "
                "run (--timeout SECONDS gives each call longer)"
            )

    def _reaped(self, pid: int) -> int:
        """The wait status of worker ``pid``, which has ended or been killed; its pipe and slot freed."""
        running = self.workers.pop(pid)
        self.pending.pop(pid, None)
        _, status = os.waitpid(pid, 0)
        os.close(running.read)
        self.free.append(running.slot)
        return status

    def stop(self) -> None:
        """End the workers that are still running (an interrupted or failed run)."""
        for pid in list(self.workers):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reaped(pid)


def silenced(streams: bool = False) -> None:
    """This process's standard output and error to nowhere (file descriptors 1 and 2: a target's
    prints, and its libraries'); ``streams``: sys.stdout and sys.stderr too, which pytest's capture
    may have pointed at a file it shares with the check's process."""
    sys.stdout.flush()
    sys.stderr.flush()
    nowhere = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(nowhere, fd)
    os.close(nowhere)
    if streams:
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's whole life)


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
