"""``python -m MODULE ARGS`` in a forked copy of this process instead of a new interpreter.

A new interpreter imports again what this one already has (Python, pytest, libcst, the kit; torch too
where it is imported already): a fork skips that.  `attnspec mutate` starts its engine this way
(mutation/watch.py), and the kit's own meta tests run the kit from a warm process this way.

What a fork cannot give is what an interpreter fixes at start: the hash seed (PYTHONHASHSEED),
flags other than bytecode writing, and libraries already loaded that read the environment when loaded
(torch's thread count: it is set again from OMP_NUM_THREADS).  A caller that needs those starts
a new interpreter.  A fork is only safe from a process that runs no thread and holds no CUDA context.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The default database folder that hypothesis.configuration fixes when imported (.hypothesis in the
# folder it is imported in): a forked run sets it to its own folder's, as a new interpreter would.
HYPOTHESIS_HOME = "__hypothesis_home_directory_default"
# Hypothesis is a pytest plugin, whose modules pytest rewrites when it imports them first, and warns
# about when they are already imported: a forked run marks them as not to be rewritten.
PLUGIN_MODULES = ("hypothesis", "_hypothesis_globals")


def become(argv: list[str], cwd: str | Path, env: dict[str, str]) -> int:
    """Turn this (forked) process into ``python -m MODULE ARGS`` (``argv``: [python, "-m", MODULE,
    *ARGS]) run in ``cwd`` with exactly the environment ``env``, and run it: its exit code."""
    _, flag, module, *args = argv
    assert flag == "-m", argv
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):  # as a new interpreter has them
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGPIPE else signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [module, *args]  # runpy puts the module's file first, as python -m does
    # python -m's sys.path: the folder it runs in, then PYTHONPATH's entries
    sys.path[:0] = [os.getcwd(), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    tempfile.tempdir = None  # found again from TMPDIR on first use
    configuration = sys.modules.get("hypothesis.configuration")
    if configuration is not None:
        assert hasattr(configuration, HYPOTHESIS_HOME), f"Hypothesis no longer has {HYPOTHESIS_HOME}"
        setattr(configuration, HYPOTHESIS_HOME, Path.cwd() / ".hypothesis")
        configuration.set_hypothesis_home_dir(None)  # read HYPOTHESIS_STORAGE_DIRECTORY again
    for name in PLUGIN_MODULES:
        module_object = sys.modules.get(name)
        if module_object is not None and "PYTEST_DONT_REWRITE" not in (module_object.__doc__ or ""):
            module_object.__doc__ = (module_object.__doc__ or "") + "\nPYTEST_DONT_REWRITE"
    torch = sys.modules.get("torch")
    if torch is not None and env.get("OMP_NUM_THREADS", "").isdigit():
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))  # its OpenMP read the variable when loaded
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        return exit_code(done.code)
    return 0


def exit_code(status: object) -> int:
    """The process exit code that ``raise SystemExit(status)`` gives."""
    if status is None:
        return 0
    if isinstance(status, int):
        return status & 0xFF
    print(status, file=sys.stderr)
    return 1


class Forked:
    """A forked child in a session of its own, with what watch.py uses of subprocess.Popen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode


PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent(parent: int) -> None:
    """Where the platform allows (Linux), this process gets SIGTERM when ``parent`` dies, even by
    SIGKILL (prctl PR_SET_PDEATHSIG); it exits now if ``parent`` is already gone."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # no prctl here: a process group is all the caller has
        return
    if os.getppid() != parent:
        os._exit(1)


def start(argv: list[str], cwd: str | Path, env: dict[str, str], log: Path) -> Forked:
    """``python -m MODULE ARGS`` forked into a session of its own (like ``start_new_session``), its
    standard output and error to ``log``, its input empty.  Returns once the session exists, so that
    the caller can stop the child's whole process group at any time.  The child gets SIGTERM when
    the caller dies (die_with_parent), however it dies."""
    sys.stdout.flush()
    sys.stderr.flush()
    ready, started = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(ready)
            os.setsid()
            die_with_parent(parent)
            os.close(started)  # the parent's read ends: the session exists
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            for fd in (1, 2):
                os.dup2(out, fd)
            os.close(out)
            stdin = os.open(os.devnull, os.O_RDONLY)
            os.dup2(stdin, 0)
            os.close(stdin)
            sys.stdin = open(os.devnull)
            code = become(argv, cwd, env)
        except BaseException:  # noqa: B036 (a forked child must never return into its parent's code)
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(started)
    os.read(ready, 1)  # end of file once the child has its session (or has died)
    os.close(ready)
    return Forked(pid)
