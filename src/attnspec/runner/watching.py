"""`attnspec check TARGET --watch`: the check again on every save of the target's files, from a warm
process.

The command's process imports torch, NumPy, Hypothesis, pytest and the kit's helpers once, then forks
one child per check, which runs the whole check (importing the target and the kit's test modules,
which read the target when imported) and exits with its verdict.  Between checks it polls the
modification times of the target's module and of the Python files beside it.  Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

# what every check imports, imported once in the watching process: not the kit's test modules nor the
# target's, which a check must import afresh
WARM = (
    "torch",
    "torch._dynamo",
    "numpy",
    "hypothesis",
    "hypothesis.extra.numpy",
    "pytest",
    "attnspec.kit.reproducers",
    "attnspec.kit.run_report",
    "attnspec.kit.diagnosis",
    "attnspec.kit.strategies",
)
POLL = 0.3  # seconds between two looks at the files


def watched_files(target: str, folder: Path) -> list[Path]:
    """The target's module file and the Python files beside it (the helpers it imports); for a built-in
    adapter, none."""
    from attnspec.protocol.targets import ADAPTERS, module_of_file

    if target in ADAPTERS:
        return []
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.find_spec(module_of_file(target.partition(":")[0]))
    except (ImportError, ValueError, FileNotFoundError):
        spec = None
    finally:
        sys.path.remove(str(folder))
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    beside = origin.parent if origin is not None else folder
    return sorted({*(path for path in beside.glob("*.py")), *([origin] if origin else [])})


def stamps(files: list[Path]) -> dict[Path, float]:
    return {path: path.stat().st_mtime if path.exists() else 0.0 for path in files}


def watch(args: argparse.Namespace, check: Callable[[argparse.Namespace], int]) -> int:
    for name in WARM:
        importlib.import_module(name)
    folder = Path.cwd()
    files = watched_files(args.target, folder)
    if not files:
        say(f"--watch: no file of {args.target} to watch: checking it once")
        return check(args)
    say(f"--watch: checking {args.target} again on every save of {_listed(files, folder)} (Ctrl-C stops)")
    code = 0
    try:
        while True:
            seen = stamps(files)
            started = time.monotonic()
            code = _checked_in_a_child(args, check)
            say(f"--watch: checked in {time.monotonic() - started:.1f} s; waiting for a save")
            while stamps(files) == seen:
                time.sleep(POLL)
            changed = [path for path, stamp in stamps(files).items() if seen.get(path) != stamp]
            say(f"\n--watch: {_listed(changed, folder)} changed")
    except KeyboardInterrupt:
        say("\n--watch: stopped")
        return code


def _checked_in_a_child(args: argparse.Namespace, check: Callable[[argparse.Namespace], int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            code = check(args)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status)
        except KeyboardInterrupt:  # the child has it too (one process group): let it end, then stop
            os.waitpid(pid, 0)
            raise


def say(line: str) -> None:
    """A line at once, even where the output is a pipe (an editor's panel, a test): a watcher waits
    between its lines, and what it said must not wait with it."""
    print(line, flush=True)


def _listed(files: list[Path], folder: Path) -> str:
    names = [str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path) for path in files]
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
