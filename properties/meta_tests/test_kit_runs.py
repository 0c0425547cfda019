"""A kit run forked from the warm server (kit_runs.py) is what a fresh ``python -m pytest`` gives: the
same exit code and the same tests run, the run's own environment (and none of the previous run's), its
own output; a run past its time limit is stopped as subprocess.run stops one."""

from __future__ import annotations

import re
import subprocess

import pytest

from attnspec.properties.meta_tests import kit_runs
from attnspec.properties.meta_tests.kit_runs import MODE_ENV, PROPERTIES, run_properties

TOY = "examples.toy_attention:attention"
TOY_ENV = "ATTNSPEC_TOY_CAPABILITIES"
SELECTION = [str(PROPERTIES / "test_gqa_sinks.py")]


def summary(done: subprocess.CompletedProcess) -> str:
    """pytest's closing counts ("12 passed, 3 deselected"), without the time."""
    counts = r"^(\d+ (?:passed|failed|deselected|skipped).*?) in [\d.]+s"
    found = re.findall(counts, done.stdout, re.MULTILINE)
    assert found, done.stdout[-3000:] + done.stderr[-2000:]
    return found[-1]


@pytest.mark.parametrize("capabilities", ["weights,gqa", ""])
def test_a_served_run_is_a_fresh_interpreters_run(capabilities, monkeypatch):
    """The toy kernel reads its capabilities from the environment when imported: a narrowed run between
    two served runs must see its own declaration, and the one after it none of it."""
    served = [
        run_properties(TOY, profile="quick", as_user=True, env={TOY_ENV: c}, selection=SELECTION)
        for c in ("sinks", capabilities, "sinks")
    ]
    monkeypatch.setenv(MODE_ENV, "subprocess")
    fresh = [
        run_properties(TOY, profile="quick", as_user=True, env={TOY_ENV: c}, selection=SELECTION)
        for c in ("sinks", capabilities)
    ]
    assert [d.returncode for d in served] == [fresh[0].returncode, fresh[1].returncode, fresh[0].returncode]
    assert [summary(d) for d in served] == [summary(fresh[0]), summary(fresh[1]), summary(fresh[0])]
    assert summary(fresh[0]) != summary(fresh[1]), "the declarations should select other tests"


def test_a_served_run_past_its_time_limit_is_stopped():
    server = kit_runs._server()
    command = ["python", "-m", "pytest", "-p", "no:cacheprovider", str(PROPERTIES / "none")]
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(command, {}, timeout=0.0)
    assert server.run(command, {}, timeout=60).returncode == 4  # the server goes on: the file does not exist
