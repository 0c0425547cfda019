"""`attnspec mutate` where things go wrong around it: interrupted while it writes its reports, two
campaigns at once, odd arguments (an empty --out, a FIFO given as a file), and nothing of Hypothesis's
or of Python's bytecode written into the user's project, interrupted or not.

Each runs the command as a user does (tests/fixtures/kit_runs.py), on a tiny project whose tests are a
plain script (test_mutate.py's TINY and CHECK) or on a tiny attention function with a target.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fixtures.kit_runs import alive_with, left_in, run_module, tree_digest
from tests.mutation.test_mutate import CHECK, TINY, environment, mutate


def tiny_project(where: Path) -> Path:
    where.mkdir(exist_ok=True)
    (where / "tiny.py").write_text(TINY)
    (where / "check.py").write_text(CHECK)
    return where


def files_of(folder: Path) -> dict[str, tuple[str, int]]:
    """Each file in ``folder``: its content's digest and its inode (a file replaced has another)."""
    digests = tree_digest(folder)
    return {name: (digest, (folder / name).stat().st_ino) for name, digest in digests.items()}


# `attnspec mutate ARGS` in this process, with a signal sent to itself at one point of the reports'
# writing: "render", as index.html is rendered (the reports half written); "move", as the first report
# is moved into --out (then they are moved as a set, the signal held back until they all are)
INTERRUPTED_AT = """
import os, signal, sys
from pathlib import Path

from attnspec import cli
from attnspec.mutation import campaign

at, signum, out, argv = sys.argv[1], getattr(signal, sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]
me = os.getpid()
signal.signal(signal.SIGINT, signal.default_int_handler)  # also in a background job, which ignores it


def interrupting(original, when=lambda *args: True):
    def call(*args, **kwargs):
        if os.getpid() == me and when(*args):
            os.kill(me, signum)
        return original(*args, **kwargs)

    return call


if at == "render":
    campaign.render = interrupting(campaign.render)
else:
    os.replace = interrupting(os.replace, lambda src, dst: Path(dst).parent == out)
sys.exit(cli.main(["mutate", "-j", "2", *argv]))
"""


def interrupted_at(at: str, signum: str, cwd: Path, tmp: Path, out: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", INTERRUPTED_AT, at, signum, str(cwd / out)]
    command += ["tiny.py", "--out", out, "--", sys.executable, "check.py"]
    return subprocess.run(command, cwd=cwd, env=environment(tmp), capture_output=True, text=True, timeout=300)


def test_an_interrupt_while_the_reports_are_written_leaves_the_previous_ones_or_this_runs_whole(tmp_path):
    project, tmp = tiny_project(tmp_path / "project"), tmp_path / "tmp"
    tmp.mkdir()
    first = mutate(project, tmp, "tiny.py", "--out", "out", "--", sys.executable, "check.py")
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
    before = files_of(project / "out")
    assert "mutation-results.json" in before and "index.html" in before
    # half written: the previous run's reports stay as they were, every one, and it says so
    done = interrupted_at("render", "SIGINT", project, tmp, "out")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-2000:]
    assert files_of(project / "out") == before
    said = done.stderr.strip().splitlines()[-1]
    assert (
        said.startswith("interrupted") and "the reports of the previous run in out are as they were" in said
    )
    assert sorted(left_in(project)) == ["check.py", "out", "tiny.py"] and left_in(tmp) == []
    # as they are moved in: all of this run's, whole (each file replaced), and it says so
    done = interrupted_at("move", "SIGTERM", project, tmp, "out")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-2000:]
    after = files_of(project / "out")
    assert set(after) == set(before)
    assert all(after[name][1] != before[name][1] for name in before), (before, after)
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith("interrupted") and "this run's reports are complete in out" in said, said
    assert sorted(left_in(project)) == ["check.py", "out", "tiny.py"] and left_in(tmp) == []
    # a folder of no reports yet: none made
    done = interrupted_at("render", "SIGINT", project, tmp, "fresh")
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-2000:]
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith("interrupted") and "no report written" in said, said
    assert sorted(left_in(project)) == ["check.py", "out", "tiny.py"] and left_in(tmp) == []
    # and --incremental reads the last complete set
    again = mutate(project, tmp, "tiny.py", "--incremental", "--out", "out", "--", sys.executable, "check.py")
    reused = [line for line in again.stdout.splitlines() if line.startswith(("clean run", "nothing reused"))]
    assert again.returncode == 1 and len(reused) == 1 and "(0 run, 2 reused)" in reused[0], again.stdout[
        -2000:
    ]


TINY_ATTENTION = """
import math

import torch


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None):
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    tq, tk = q.shape[-2], k.shape[-2]
    if causal:
        keep = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


attention.capabilities = frozenset({"decode", "non_causal"})
"""
SHAPES_ONLY = """
import torch

from model import attn


def test_shape():
    q = torch.randn(1, 1, 3, 4)
    assert attn.attention(q, q, q).shape == (1, 1, 3, 4)
"""
SUGGESTING = (
    "model/attn.py",
    "--impl",
    "model.attn:attention",
    "--out",
    "../out",
    "--",
    "pytest",
    "test_shapes.py",
)


def attention_project(where: Path, slow: bool = False) -> Path:
    """A package (model/) with an attention function, and a test of its shapes only; ``slow``: the
    function sleeps 20 ms a call, so that a campaign of the kit on it runs for seconds."""
    project = where / "project"
    (project / "model").mkdir(parents=True)
    (project / "model" / "__init__.py").write_text("")
    attention = TINY_ATTENTION
    if slow:
        attention = attention.replace("import math\n", "import math\nimport time\n").replace(
            "    scores = (q @", "    time.sleep(0.02)\n    scores = (q @"
        )
    (project / "model" / "attn.py").write_text(attention)
    (project / "test_shapes.py").write_text(SHAPES_ONLY)
    return project


def users_environment(tmp: Path) -> dict[str, str]:
    """environment(), as a user's shell has it: Python writes bytecode."""
    env = environment(tmp)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def written_by_python(project: Path) -> list[str]:
    """What Hypothesis (.hypothesis/) or bytecode (__pycache__/) put into ``project``."""
    return sorted(
        str(p.relative_to(project)) for p in project.rglob("*") if p.name in (".hypothesis", "__pycache__")
    )


def test_suggesting_tests_writes_no_hypothesis_folder_nor_bytecode_into_the_project(tmp_path):
    project = attention_project(tmp_path)
    command = [sys.executable, "-m", "attnspec", "mutate", "-j", "2", *SUGGESTING]
    done = run_module(command, project, users_environment(tmp_path))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "out" / "test_attnspec_suggested_model_attn.py").exists(), done.stdout[-3000:]
    assert written_by_python(project) == []
    assert sorted(p.name for p in project.iterdir()) == ["model", "test_shapes.py"]


def test_interrupted_while_the_kit_runs_for_suggestions_it_writes_nothing_into_the_project(tmp_path):
    project = attention_project(tmp_path, slow=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    command = [sys.executable, "-m", "attnspec", "mutate", "-j", "2", *SUGGESTING]
    piped = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # SIGINT as a terminal delivers it, even where this run inherited it ignored (a background job)
    reset = {"preexec_fn": lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)}
    process = subprocess.Popen(command, cwd=project, env=users_environment(tmp), **piped, **reset)
    assert process.stdout is not None
    deadline, kit, seen = time.monotonic() + 240, False, []
    for line in process.stdout:  # the kit's campaign on the survivors, its clean run done
        seen.append(line)
        kit = kit or line.startswith("the kit's properties against")
        if (kit and line.startswith("[testing mutants")) or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, "".join(seen) + output
    assert written_by_python(project) == []
    assert sorted(p.name for p in project.iterdir()) == ["model", "test_shapes.py"]
    assert left_in(tmp) == []
    time.sleep(1)
    assert alive_with(tmp) == ""


SLOW_CHECK = "import pathlib, time\nwhile not pathlib.Path('go').exists():\n    time.sleep(0.05)\n" + CHECK


def test_campaigns_with_other_outs_in_one_folder_both_run_and_one_with_the_same_out_is_refused(tmp_path):
    project = tiny_project(tmp_path)
    (project / "slow_check.py").write_text(SLOW_CHECK)
    command = [sys.executable, "-m", "attnspec", "mutate", "-j", "1", "tiny.py", "--out", "first"]
    first = subprocess.Popen(
        [*command, "--", sys.executable, "slow_check.py"],
        cwd=project,
        env=environment(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        first.stdout.readline()  # planned: its lock is held
        other = mutate(project, tmp_path, "tiny.py", "--out", "second", "--", sys.executable, "check.py")
        assert other.returncode == 1, other.stdout[-2000:] + other.stderr[-2000:]
        assert (project / "second" / "mutation-results.json").exists()
        started = time.monotonic()
        same = mutate(project, tmp_path, "tiny.py", "--out", "first", "--", sys.executable, "check.py")
        assert time.monotonic() - started < 30
        assert same.returncode == 2, same.stdout[-2000:] + same.stderr[-2000:]
        said = same.stderr.strip().splitlines()
        assert len(said) == 1 and said[0].startswith(
            "NOT RUN: another attnspec mutate is running in first"
        ), said
        assert "another --out" in said[0]
    finally:
        (project / "go").write_text("")
        first.communicate(timeout=300)
    assert first.returncode == 1
    assert (project / "first" / "mutation-results.json").exists()


def test_an_empty_out_and_a_triage_or_out_that_is_no_regular_file_are_refused_in_one_line(tmp_path):
    project = tiny_project(tmp_path)
    done = mutate(project, tmp_path, "tiny.py", "--out", "", "--", sys.executable, "check.py")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("attnspec mutate: error: --out "), done.stderr
    assert not (project / "mutation-results.json").exists()
    os.mkfifo(project / "fifo")
    started = time.monotonic()
    done = mutate(
        project, tmp_path, "tiny.py", "--triage", "fifo", "--", sys.executable, "check.py", timeout=60
    )
    assert time.monotonic() - started < 30
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == "attnspec mutate: error: --triage fifo: not a regular file", done.stderr
    (project / "notes.txt").write_text("a file\n")
    for out in ("fifo", "notes.txt", os.devnull):
        done = mutate(
            project, tmp_path, "tiny.py", "--out", out, "--", sys.executable, "check.py", timeout=60
        )
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        said = done.stderr.strip().splitlines()
        assert len(said) == 1 and said[0].startswith("NOT RUN: the reports cannot be written into "), said
        assert "is not a folder" in said[0], said
