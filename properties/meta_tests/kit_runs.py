"""Runs of the kit in a process of its own, as a user runs it: pytest over the properties against a
target.

The root is the folder that holds the attnspec package (the repository, or a mutation campaign's
workspace, where the properties sit at attnspec/properties), so the run finds the same settings
and the same copy of the code as the run that starts it.

Each run is ``python -m pytest ...`` (or any ``python -m MODULE ...``: run_module, which test_cli,
the plugin's tests and test_mutate use) in a new process, with its own folder, environment, arguments,
standard output and exit code, but not a new interpreter: a warm server process, started on the first
run and kept for the test session, has imported torch (with the parts of it a run imports on first use),
Hypothesis and pytest once, and forks one child per run.  Of the kit it imports only this module, and
nothing of a target's, so each child imports conftest.py and the test modules, collects and reads its
environment as a fresh ``python -m pytest`` does (test_kit_runs.py compares the two).
``ATTNSPEC_KIT_RUNS=subprocess`` starts a new interpreter per run instead.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attnspec
from attnspec import forking

ROOT = Path(attnspec.__file__).resolve().parents[1]
PROPERTIES = Path(__file__).resolve().parents[1]
MODE_ENV = "ATTNSPEC_KIT_RUNS"
# What the server imports before it forks: none that reads the environment or the arguments of a run
# when imported (conftest.py and the test modules do: each child imports them).  torch imports
# torch._dynamo (~800 modules, 1-3 s on 2 cores) on a target's first operation on the meta device (the
# device property's second device) and the symbolic-shapes module (SymPy) on a first backward pass:
# each kit run would pay for them again.
WARM_MODULES = (
    "torch",
    "torch._dynamo",
    "torch.fx.experimental.symbolic_shapes",
    "numpy",
    "hypothesis",
    "hypothesis.extra.numpy",
    "pytest",
    "libcst.matchers",  # what the mutation campaigns (`attnspec mutate`, `python -m mutants`) parse code with
)
# The profiles whose depth is their point (CI runs `ci`): a kit run started under one of them runs
# under it too.  Under `default` or `quick`, a day-to-day run, a kit run that a target must pass
# runs the `quick` profile and one that a target must fail the derandomized `mutation` profile.
DEEP_PROFILES = ("ci", "thorough")


def kit_profile(failing: bool = False) -> str:
    """The Hypothesis profile of a kit run started from this run.  A passing run proves the kit runs
    and passes a correct target; the ci profile proves it over 150 examples a property.  A failing
    run's checks read its failures, whose set is then the same every run and never shrunk (shrinking
    was half of a broken target's run under the default profile)."""
    own = os.environ.get("HYPOTHESIS_PROFILE", "default")
    if own in DEEP_PROFILES:
        return own
    return "mutation" if failing else "quick"


def run_properties(
    impl: str,
    *args: str,
    profile: str | None = None,
    as_user: bool = False,
    env: dict | None = None,
    selection: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """pytest on the properties (or the test ids in ``selection``) against ``impl``, under the
    Hypothesis ``profile`` (conftest.py) or, when None, ``kit_profile()``; ``env`` adds
    environment variables.  ``as_user``: without the mutation campaign's MUTANT_UNDER_TEST (which a
    campaign's clean run passes on), so that the target is checked at load time as a user's run
    checks it."""
    command = [sys.executable, "-m", "pytest", *(selection or [str(PROPERTIES)])]
    command += [f"--ignore={PROPERTIES / 'meta_tests'}"]
    command += ["-p", "no:cacheprovider", "-q", f"--impl={impl}"]
    run_env = {**os.environ, "HYPOTHESIS_PROFILE": profile or kit_profile(), **(env or {})}
    if as_user:
        run_env.pop("MUTANT_UNDER_TEST", None)
    return run_module([*command, *args], ROOT, run_env)


def users_env() -> dict[str, str]:
    """This run's environment as a user's shell has it: without the kit's settings (ATTNSPEC_*, the
    Hypothesis profile, a campaign's MUTANT_UNDER_TEST) and without PYTHON* variables."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ATTNSPEC_", "PYTHON"))}
    env.pop("HYPOTHESIS_PROFILE", None)
    env.pop("MUTANT_UNDER_TEST", None)
    return env


def tree_digest(root: Path, but: str = "") -> dict[str, str]:
    """Every file under ``root`` (but those under its folder ``but``) by its content's digest: a user's
    files before and after a run, to compare."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not (but and p.relative_to(root).parts[0] == but) and "__pycache__" not in p.parts
    }


def left_in(tmp: Path) -> list[str]:
    """What a run left in its temporary folder, but torch's own compile cache (torchinductor_USER, which
    any program that imports torch._dynamo makes there, and which is kept between runs by design)."""
    return [path.name for path in tmp.iterdir() if not path.name.startswith("torchinductor_")]


def alive_with(tmp: Path) -> str:
    """The processes still alive that were started with TMPDIR={tmp} in their environment (a fork keeps
    the block a new interpreter started with): the pids, or "" for none."""
    marker = f"TMPDIR={tmp}".encode() + b"\0"
    alive = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes() + b"\0":
                alive.append(environ.parent.name)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return " ".join(alive)


def run_module(command: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` (``command``) in ``cwd`` with exactly the environment ``env``: forked
    from the warm server of that python, or a new interpreter under ``ATTNSPEC_KIT_RUNS=subprocess``."""
    assert command[1] == "-m", command
    if os.environ.get(MODE_ENV) == "subprocess":
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return _server(command[0]).run(command, env, timeout, cwd)


class KitServer:
    """The warm process that forks the kit runs (``serve`` is its loop): one request, a JSON line
    with a run's command, folder, environment and time limit, answered by one JSON line with its exit code
    and output."""

    def __init__(self, python: str) -> None:
        # this file run as a script, so that an interpreter whose attnspec has no meta tests (a venv with
        # the wheel: test_install.py) can serve too; without python -c's first sys.path entry (the folder
        # it starts in), so that the server imports attnspec from where that python finds it
        run = f"runpy.run_path({__file__!r}, run_name='attnspec_kit_server')['serve']()"
        code = f"import sys; del sys.path[0]; import runpy; {run}"
        self.process = subprocess.Popen(
            [python, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(
        self, command: list[str], env: dict, timeout: float, cwd: Path = ROOT
    ) -> subprocess.CompletedProcess:
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {"argv": command, "cwd": str(cwd), "env": env, "timeout": timeout}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the kit server exited with code {self.process.wait()}")
        answer = json.loads(line)
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(command, timeout, answer["stdout"], answer["stderr"])
        return subprocess.CompletedProcess(command, answer["returncode"], answer["stdout"], answer["stderr"])

    def close(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            self.process.stdin.close()  # the server's loop ends at the end of its input
            self.process.wait(timeout=60)


_servers: dict[str, KitServer] = {}


def _server(python: str = sys.executable) -> KitServer:
    """The server of the interpreter ``python`` (started on its first run)."""
    server = _servers.get(python)
    if server is None or server.process.poll() is not None:
        server = _servers[python] = KitServer(python)
        atexit.register(server.close)
    return server


def serve() -> None:
    """The server's loop: import WARM_MODULES, then fork a child per request on standard input."""
    import gc
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # the warm modules' objects: never scanned (nor copied on write) by a child's collections
    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        with tempfile.TemporaryDirectory(prefix="attnspec-kit-run-") as scratch:
            out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
            answers.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, out, err)  # never returns
            returncode, timed_out = _wait(pid, request["timeout"])
            answer = {
                "returncode": returncode,
                "timed_out": timed_out,
                "stdout": out.read_text(errors="replace") if out.exists() else "",
                "stderr": err.read_text(errors="replace") if err.exists() else "",
            }
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def _child(request: dict, out: Path, err: Path) -> None:
    """In the forked child: become ``python -m MODULE ARGS`` in the request's folder, with its
    environment (attnspec/forking.py, as `attnspec mutate` starts its engine), its output to files."""
    code = 3
    try:
        written = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, written), (2, err, written)):
            file = os.open(path, flags, 0o600)
            os.dup2(file, fd)
            os.close(file)
        sys.stdin = open(os.devnull)  # not the server's requests
        code = forking.become(request["argv"], request["cwd"], request["env"])
    except BaseException:  # noqa: B036 (a child must never return into the server's loop)
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The child's exit code (negative: the signal that ended it), and whether it ran out of time."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL, True
        time.sleep(0.02)


def assert_passes(done: subprocess.CompletedProcess) -> None:
    """The run passed (exit 0) and ran at least one property, none failing."""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-4000:]


def assert_each_fails_saying(target: str, expected: dict[str, tuple[str, ...]]) -> None:
    """The properties named in ``expected`` (test functions) each fail ``target`` under the derandomized
    mutation profile (the same examples every run, none shrunk), every failure of each saying all of
    its words."""
    from attnspec.properties.meta_tests.test_conformance import failure_reports

    done = run_properties(target, "-k", " or ".join(expected), profile="mutation", as_user=True)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    reports = failure_reports(done.stdout)
    for test, says in expected.items():
        failed = {name: report for name, report in reports.items() if name.partition("[")[0] == test}
        assert failed, f"{test} did not fail {target}: {list(reports)}"
        for name, report in failed.items():
            for words in says:
                assert words in report, f"{name} does not say {words!r} for {target}:\n{report[-3000:]}"


def assert_fails_saying(done: subprocess.CompletedProcess, says: str, name: str) -> None:
    """The run failed (exit 1), and every failing test's report contains ``says``."""
    from attnspec.properties.meta_tests.test_conformance import failure_reports

    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    reports = failure_reports(done.stdout)
    assert reports, done.stdout[-3000:]
    for test, report in reports.items():
        assert says in report, f"{test} does not say {says!r} for {name}:\n{report[-3000:]}"
