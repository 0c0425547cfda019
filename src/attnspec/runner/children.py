"""The processes a target starts (a server, a compiler, ``sleep``), ended with the check that ran it.

A target that starts a child process and leaves it running would leave it behind the check, since the
worker that called it ends: where the platform allows (Linux), the check's process is made a child
subreaper (prctl PR_SET_CHILD_SUBREAPER), so that every orphan of its workers, in a session of its own
or not, becomes its child; once the properties are done, the children still running are named and
ended (``ended``).  Elsewhere they are left as the target left them.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
GRACE_S = 0.5  # how long a child may take to end by itself once the properties are done
ROUNDS = 5  # children of ended children become this process's too: looked for this many times


def adopt_orphans() -> bool:
    """Make this process the parent of every orphan among its descendants; whether the platform
    allowed it."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children() -> dict[int, tuple[str, str]]:
    """This process's children, by pid: (state, command line); {} where /proc does not say."""
    me = str(os.getpid())
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            if fields[1] != me:
                continue
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue  # ended meanwhile
        found[int(stat.parent.name)] = (fields[0], command.strip())
    return found


def ended(grace_s: float = GRACE_S) -> list[str]:
    """End this process's children (a target's processes, adopted): those that end by themselves within
    ``grace_s`` are only reaped; the others are killed.  Returns the command lines of those killed."""
    killed: list[str] = []
    deadline = time.monotonic() + grace_s
    for _ in range(ROUNDS):
        running = _reaped(children())
        while running and time.monotonic() < deadline:
            time.sleep(0.05)
            running = _reaped(children())
        if not running:
            break
        for pid, command in running.items():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(command or f"pid {pid}")
        time.sleep(0.05)
        _reaped(children())
        deadline = time.monotonic()  # the children of those killed get no grace: theirs has passed
    return killed


def _reaped(found: dict[int, tuple[str, str]]) -> dict[int, str]:
    """The children in ``found`` that still run (their command lines), those that have ended reaped."""
    running = {}
    for pid, (state, command) in found.items():
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if not done and state != "Z":
            running[pid] = command
    return running


def said(killed: list[str]) -> str:
    """The line the check prints about the processes the target left running."""
    shown = "; ".join(command[:60] for command in killed[:3]) + ("; ..." if len(killed) > 3 else "")
    noun = "process" if len(killed) == 1 else "processes"
    return f"the target left {len(killed)} {noun} running ({shown}): the check ended them"
