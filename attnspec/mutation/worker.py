"""``python -m attnspec.mutation.worker WORKSPACE``: the engine process of a catalogue campaign on
any code (campaign.py starts it, in its own process group, with the environment it needs).  It
reads WORKSPACE/plan.json and runs the engine with the code swap as the generator and the plan's
test source: the pytest session (the kit's properties or the user's pytest arguments) or the
command.  The results go to WORKSPACE/results.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .generators.sites import CodeSwap


def main() -> int:
    plan = json.loads((Path(sys.argv[1]) / "plan.json").read_text(encoding="utf-8"))
    for path in reversed(plan["paths"]):  # the user's modules, as `python -m pytest` would find them
        sys.path.insert(0, path)
    generator = CodeSwap(plan)
    if plan["suite"] == "command":
        from .suites.command import main as run
    else:
        from .suites.pytest_suite import main as run
    return finish(run(plan, generator))


def finish(results: dict) -> int:
    """An engine process's exit status: 1, the reason printed, when the campaign could not run."""
    if "error" in results:
        print(f"campaign failed: {results['error']}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
