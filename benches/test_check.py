"""The speed of `attnspec check` on a kernel with every attention capability (examples/toy_attention.py),
under the quick and the default Hypothesis profiles, against the time a Python takes to import torch in
the same run (what every check pays first, and a yardstick for the machine's speed); and on a slow target,
an eager FlexAttention function, as its default check fits itself to about a minute.

Each check runs in a process of its own, as a user starts it, with its default --jobs (one process per
usable core, at most 4) and in one process (-j 1).  extra_info holds its median wall
seconds and their ratio to the import of torch; benches.report prints them.  Benches report times
only; they never assert on speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnspec.runner.parallel import default_jobs

REPO_ROOT = Path(__file__).resolve().parents[1]
TOY = "examples.toy_attention:attention"


def wall(*command: str) -> float:
    # Python's bytecode cache as a user's second run finds it (a first run, or PYTHONDONTWRITEBYTECODE=1,
    # also compiles the kit and rewrites its asserts): the warm-up round writes it
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *command], cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return seconds


@pytest.fixture(scope="module")
def torch_import() -> float:
    return min(wall("-c", "import torch") for _ in range(3))


@pytest.mark.parametrize("jobs", [None, 1], ids=["default-jobs", "one-process"])
@pytest.mark.parametrize("profile", ["quick", "default"])
def test_check_a_kernel_with_every_capability(benchmark, profile, jobs, torch_import):
    one_process = () if jobs is None else ("-j", str(jobs))
    command = ("-m", "attnspec", "check", TOY, "--profile", profile, *one_process)
    benchmark.pedantic(wall, args=command, rounds=3, iterations=1, warmup_rounds=1)
    seconds = benchmark.stats.stats.median
    benchmark.extra_info.update(
        check=profile, jobs=jobs or default_jobs(), wall_s=round(seconds, 2),
        torch_import_s=round(torch_import, 2), per_torch_import=round(seconds / torch_import, 2),
    )  # fmt: skip


FLEX = "examples.zoo.flex_softcap_documents:attention"  # eager FlexAttention: Dynamo traces each new shape


def test_check_a_slow_flex_attention_function(benchmark, torch_import):
    """A slow target checked as a user checks it, without --profile: the check fits itself to about a
    minute (src/attnspec/cli.py, _Check), where its 25 examples a property took 55-130 s on 2 cores."""
    command = ("-m", "attnspec", "check", FLEX)
    benchmark.pedantic(wall, args=command, rounds=3, iterations=1, warmup_rounds=0)
    seconds = benchmark.stats.stats.median
    benchmark.extra_info.update(
        check="flex-fit", jobs=default_jobs(), wall_s=round(seconds, 2),
        torch_import_s=round(torch_import, 2), per_torch_import=round(seconds / torch_import, 2),
    )  # fmt: skip


def rechecks(folder: Path, profile: str, saves: int) -> list[float]:
    """The seconds `attnspec check --watch` takes to check a copy of the toy kernel again after each of
    ``saves`` saves of it (its own "checked in" line), from its warm process."""
    (folder / "toy.py").write_text((REPO_ROOT / "examples" / "toy_attention.py").read_text())
    command = [sys.executable, "-m", "attnspec", "check", "toy:attention", "--watch", "--profile", profile]
    output = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    # Ctrl-C as a terminal delivers it, even where this run inherited SIGINT ignored (a backgrounded job)
    reset = {"preexec_fn": lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)}
    watcher = subprocess.Popen(command, cwd=folder, **output, **reset)
    times = []
    try:
        for save in range(saves + 1):
            for line in watcher.stdout:  # up to the end of a check
                if line.startswith("--watch: checked in"):
                    break
            else:
                raise AssertionError("attnspec check --watch ended before a check")
            if save:  # the first check is the cold one: not a re-check
                times.append(float(line.split()[3]))
            os.utime(folder / "toy.py")
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=60)
    return times


@pytest.mark.parametrize("profile", ["quick", "default"])
def test_recheck_on_save_with_watch(benchmark, profile, tmp_path, torch_import):
    """What --watch saves: a re-check pays no interpreter, torch, Hypothesis or pytest start."""
    times = benchmark.pedantic(rechecks, args=(tmp_path, profile, 3), rounds=1, iterations=1)
    seconds = sorted(times)[len(times) // 2]
    benchmark.extra_info.update(
        check=f"{profile} --watch re-check", wall_s=round(seconds, 2),
        torch_import_s=round(torch_import, 2), per_torch_import=round(seconds / torch_import, 2),
    )  # fmt: skip


# the toy kernel printing 200 kB to each stream on every call: about 100 MB over a default check
CHATTY = """
import sys

import toy


def attention(q, k, v, **kwargs):
    sys.stdout.write("x" * 200_000 + "\\n")
    sys.stderr.write("y" * 200_000 + "\\n")
    return toy.attention(q, k, v, **kwargs)


attention.capabilities = toy.attention.capabilities
"""


def test_check_a_target_that_prints_megabytes(benchmark, tmp_path, torch_import):
    """A target that prints on every call, against the same kernel quiet in the same run: the check reads
    each byte once and keeps the last 64 kB a stream a property (attnspec/kit/run_report.py: bounded),
    so the ratio stays near 1 (it grew about 4x per doubling of the output before)."""
    (tmp_path / "toy.py").write_text((REPO_ROOT / "examples" / "toy_attention.py").read_text())
    (tmp_path / "chatty.py").write_text(CHATTY)

    def check(target: str) -> float:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "attnspec", "check", target], cwd=tmp_path, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return time.perf_counter() - started

    quiet = min(check("toy:attention") for _ in range(2))
    benchmark.pedantic(check, args=("chatty:attention",), rounds=2, iterations=1, warmup_rounds=0)
    seconds = benchmark.stats.stats.median
    benchmark.extra_info.update(
        check="default, 100 MB printed", jobs=default_jobs(), wall_s=round(seconds, 2),
        quiet_s=round(quiet, 2), per_quiet=round(seconds / quiet, 2),
        torch_import_s=round(torch_import, 2), per_torch_import=round(seconds / torch_import, 2),
    )  # fmt: skip
