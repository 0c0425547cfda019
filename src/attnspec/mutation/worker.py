"""``python -m attnspec.mutation.worker WORKSPACE``: the engine process of a catalogue campaign on
any code (campaign.py starts it, in its own process group, with the environment it needs).  It
reads WORKSPACE/plan.json and runs the engine with the code swap as the generator and the plan's
test source: the pytest session (the kit's properties or the user's pytest arguments) or the
command.  The results go to WORKSPACE/results.json."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

from .engine import finish
from .generators.sites import CodeSwap


def main() -> int:
    workspace = Path(sys.argv[1])
    signal.signal(signal.SIGTERM, stopper(workspace, os.getppid()))
    plan = json.loads((workspace / "plan.json").read_text(encoding="utf-8"))
    for path in reversed(plan["paths"]):  # the user's modules, as `python -m pytest` would find them
        sys.path.insert(0, path)
    generator = CodeSwap(plan)
    if plan["suite"] == "command":
        from .suites.command import main as run
    else:
        from .suites.pytest_suite import main as run
    return finish(run(plan, generator))


def stopper(workspace: Path, parent: int):
    """The engine's SIGTERM handler: its campaign stops it, or its campaign died (forking.py sends
    SIGTERM then, even after a SIGKILL).  The whole process group ends at once (this engine, the
    children it forked, the test commands they run), and, when the campaign is gone, the workspace
    that it can no longer remove."""

    engine = os.getpid()

    def stop(signum: int, frame: object) -> None:
        if os.getpid() != engine:  # a child it forked (which inherits the handler): that child alone
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if os.getppid() != parent:  # the others first: none of them writes into the workspace after it goes
            for pid in others_in_group():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            shutil.rmtree(workspace, ignore_errors=True)
        os.killpg(0, signal.SIGKILL)

    return stop


def others_in_group() -> list[int]:
    """The other processes of this process's group (Linux's /proc; none where it is not there)."""
    me, group = os.getpid(), os.getpgrp()
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # ended meanwhile
        if len(fields) > 2 and int(fields[2]) == group and int(stat.parent.name) != me:
            found.append(int(stat.parent.name))
    return found


if __name__ == "__main__":
    sys.exit(main())
