"""`attnspec.check(target, *properties)` from a user's own pytest session (src/attnspec/runner/api.py).

On a copy of examples/user_project, whose attnspec_target.py declares its targets: a property that
holds passes, the same property on a copy with a fault fails with the requirement it breaks, a
property that cannot run (not found, skipped for a capability) fails rather than passing, the
user's own settings (Hypothesis profile, environment, torch threads) are as they were afterwards, and
no .hypothesis/ folder is left in the project.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.fixtures.kit_runs import run_module

REPO = Path(__file__).resolve().parents[2]
LAYER = "test_attention_layer.py::test_layer_matches_the_oracle_layer"
SIZES = "test_attention_layer.py::test_a_layer_refuses_sizes_it_cannot_compute_when_built"
PADDING = "test_modules.py::test_a_padded_batch_gives_each_sequence_its_own_outputs"
WINDOWS = "test_modules.py::test_each_output_depends_on_exactly_its_declared_inputs"

USES_CHECK = f'''
import os

import torch
from hypothesis import settings

import attnspec


def test_the_layer_matches_the_oracle():
    attnspec.check("attnspec_target:ATTENTION", "{LAYER}")


def test_the_layer_refuses_sizes_it_cannot_compute():
    attnspec.check("attnspec_target:ATTENTION", "{SIZES}")


def test_a_property_that_is_skipped_fails():
    attnspec.check("attnspec_target:BLOCK", "{WINDOWS}")


def test_a_property_that_does_not_exist_fails():
    attnspec.check("attnspec_target:ATTENTION", "test_attention.py::test_no_such_property")


def test_the_users_settings_are_left_as_they_were():
    before = (settings.default.max_examples, dict(os.environ), torch.get_num_threads())
    attnspec.check("attnspec_target:BLOCK", "{PADDING}")
    assert (settings.default.max_examples, dict(os.environ), torch.get_num_threads()) == before
'''


def environment(tmp: Path) -> dict[str, str]:
    """The user's environment: none of the kit's or Hypothesis' variables of this run, the kit importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSPEC_", "HYPOTHESIS_"))}
    env.pop("MUTANT_UNDER_TEST", None)
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(REPO))
    return env


def outcomes(project: Path, tmp: Path) -> tuple[dict[str, str], str]:
    """Each test of the file above, run in the project with pytest: its outcome; and the output."""
    (project / "tests" / "test_uses_check.py").write_text(USES_CHECK)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "tests/test_uses_check.py"]
    done = run_module(command, project, environment(tmp), timeout=600)
    said = done.stdout + done.stderr
    found = dict(
        (name, outcome)
        for outcome, name in re.findall(r"^(PASSED|FAILED) tests/test_uses_check.py::(\w+)", said, re.M)
    )
    return found, said


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("api") / "project"
    shutil.copytree(REPO / "examples" / "user_project", project, ignore=shutil.ignore_patterns("__pycache__"))
    return project


def test_properties_that_hold_pass_and_those_that_cannot_run_fail(project, tmp_path):
    found, said = outcomes(project, tmp_path)
    assert found == {
        "test_the_layer_matches_the_oracle": "PASSED",
        "test_the_layer_refuses_sizes_it_cannot_compute": "PASSED",
        "test_a_property_that_is_skipped_fails": "FAILED",
        "test_a_property_that_does_not_exist_fails": "FAILED",
        "test_the_users_settings_are_left_as_they_were": "PASSED",
    }, said
    assert "NotChecked: test_modules.py::test_each_output_depends" in said
    assert "declares no schedule of its layers" in said
    assert "NotChecked: 'test_attention.py::test_no_such_property': test_attention.py has no property" in said
    # nothing of the kit's left in the project: Hypothesis's files of its run go to a temporary folder
    assert [p.name for p in project.rglob(".hypothesis")] == []


def test_a_fault_fails_the_property_that_kills_it_with_its_requirement(project, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(project, broken, ignore=shutil.ignore_patterns("__pycache__"))
    source = (broken / "attention.py").read_text()
    checks = "        if config.n_head % config.n_kv_head != 0:\n"
    scale = "        scale = 1.0 / math.sqrt(q.size(-1))\n"
    assert checks in source and scale in source
    source = source.replace(checks, "        if False:\n").replace(scale, "        scale = 1.0\n")
    (broken / "attention.py").write_text(source)
    found, said = outcomes(broken, tmp_path)
    assert found["test_the_layer_matches_the_oracle"] == "FAILED", said
    assert found["test_the_layer_refuses_sizes_it_cannot_compute"] == "FAILED", said
    assert "PropertyFailed" in said and "LAYER-1" in said and "LAYER-2" in said
    assert "built a layer for 3 query heads over 2 KV heads" in said
