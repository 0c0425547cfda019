"""Peak memory of one side of one bench case, measured in a fresh process.

    python -m benches.memory CASE SIDE      prints the bytes the call added at its peak

The child builds the inputs, resets the kernel's peak-RSS mark (Linux: /proc/self/clear_refs),
runs the function once and reports VmHWM - VmRSS from before the call: the extra resident
memory at the call's high-water mark, outputs included.  torch's CPU allocator keeps no
statistics, and a fresh process keeps one case's memory from hiding another's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

STATUS = Path("/proc/self/status")


def _kib(field: str) -> int:
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from {STATUS}")


def peak_bytes(name: str, side: str) -> int | None:
    """Run ``python -m benches.memory name side`` and return its bytes (None off Linux)."""
    if not STATUS.exists():
        return None
    done = subprocess.run(
        [sys.executable, "-m", "benches.memory", name, side], capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[-1])


def main() -> None:
    import torch

    from benches.cases import CASES

    name, side = sys.argv[1:3]
    torch.set_num_threads(2)
    with torch.no_grad():
        function = CASES[name].functions()[side]
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark to the current RSS
        before = _kib("VmRSS")
        function()
        print((_kib("VmHWM") - before) * 1024)


if __name__ == "__main__":
    main()
