"""A kit run forked from the warm server (kit_runs.py) is what a fresh ``python -m pytest`` gives: the
same exit code and the same tests run, the run's own environment (and none of the previous run's), its
own output; a run past its time limit is stopped as subprocess.run stops one."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.fixtures import kit_runs
from tests.fixtures.kit_runs import (
    MODE_ENV,
    PROPERTIES,
    ROOT,
    run_module,
    run_properties,
    users_env,
)

TOY = "examples.toy_attention:attention"
TOY_ENV = "ATTNSPEC_TOY_CAPABILITIES"
SELECTION = [str(PROPERTIES / "test_gqa_sinks.py")]
TOY_SOURCE = ROOT / "examples" / "toy_attention.py"


def summary(done: subprocess.CompletedProcess) -> str:
    """pytest's closing counts ("12 passed, 3 deselected"), without the time."""
    counts = r"^(\d+ (?:passed|failed|deselected|skipped).*?) in [\d.]+s"
    found = re.findall(counts, done.stdout, re.MULTILINE)
    assert found, done.stdout[-3000:] + done.stderr[-2000:]
    return found[-1]


def test_a_served_run_is_a_fresh_interpreters_run(monkeypatch):
    """The toy kernel reads its capabilities from the environment when imported: a narrowed run between
    two served runs must see its own declaration, and the one after it none of it."""
    order = ("sinks", "weights,gqa", "sinks", "", "sinks")

    def kit_run(capabilities: str) -> subprocess.CompletedProcess:
        env = {TOY_ENV: capabilities}
        return run_properties(TOY, profile="quick", as_user=True, env=env, selection=SELECTION)

    served = [kit_run(c) for c in order]
    monkeypatch.setenv(MODE_ENV, "subprocess")
    fresh = {c: kit_run(c) for c in set(order)}
    expected = [fresh[c] for c in order]
    assert [d.returncode for d in served] == [d.returncode for d in expected]
    assert [summary(d) for d in served] == [summary(d) for d in expected]
    assert len({summary(d) for d in fresh.values()}) == 3, "the declarations should select other tests"


def test_a_served_command_runs_in_its_own_folder_as_a_fresh_interpreter(tmp_path, monkeypatch):
    """`python -m attnspec check` served in a user's folder: the target is imported from that folder, and
    the output and exit code are a new interpreter's."""
    (tmp_path / "users_kernel.py").write_text(TOY_SOURCE.read_text())
    command = [sys.executable, "-m", "attnspec", "check", "users_kernel:attention", "--profile", "quick"]
    command += ["-k", "test_gqa_sinks"]
    env = users_env()
    served = run_module(command, tmp_path, env)
    monkeypatch.setenv(MODE_ENV, "subprocess")
    fresh = run_module(command, tmp_path, env)
    assert served.returncode == fresh.returncode == 0, served.stdout[-3000:] + served.stderr[-2000:]
    verdicts = [d.stdout.strip().splitlines()[-1] for d in (served, fresh)]
    assert verdicts[0] == verdicts[1] and verdicts[0].startswith("PASS: --impl users_kernel:attention")
    assert served.stderr == fresh.stderr


def test_a_served_run_past_its_time_limit_is_stopped():
    server = kit_runs._server()
    command = ["python", "-m", "pytest", "-p", "no:cacheprovider", str(PROPERTIES / "none")]
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(command, {}, timeout=0.0)
    assert server.run(command, {}, timeout=60).returncode == 4  # the server goes on: the file does not exist


PROBE = """
import os, sys, tempfile, torch
print(tempfile.gettempdir(), torch.get_num_threads(), sys.dont_write_bytecode, *sys.path[:2])
"""


def test_a_served_run_reads_what_a_new_interpreter_reads_at_its_start(tmp_path):
    """What a new interpreter takes from its environment when it starts (the temporary folder, torch's
    threads, bytecode writing, sys.path's first entries), a forked run takes from its own
    (src/attnspec/runner/forking.py, which `attnspec mutate` starts its engine with)."""
    (tmp_path / "probe.py").write_text(PROBE)
    scratch, extra = tmp_path / "scratch", tmp_path / "extra"
    scratch.mkdir()
    env = dict(users_env(), TMPDIR=str(scratch), OMP_NUM_THREADS="1", PYTHONPATH=str(extra))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = run_module([sys.executable, "-m", "probe"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(scratch), "1", "True", str(tmp_path), str(extra)]
