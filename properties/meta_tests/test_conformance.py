"""The conformance kit (`pytest properties --impl NAME`) fails broken targets, and says why.

Each broken copy of the torch adapter or of impl's layer (broken_targets.py) follows another
legitimate convention; the oracle property must fail it with a message that names that convention, while
the correct adapter passes every property it has the capabilities for.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_properties(impl: str, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "properties", "--ignore=properties/meta_tests"]
    command += ["-p", "no:cacheprovider", "-q", f"--impl={impl}"]
    return subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_torch_adapter_passes_every_property_it_can_run():
    done = run_properties("torch")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "capabilities of --impl torch" in done.stdout
    assert " passed" in done.stdout and " failed" not in done.stdout


@pytest.mark.parametrize(
    "broken, convention",
    [
        ("INCLUSIVE_WINDOW", "a window of W+1"),
        ("TILED_GQA", "tile-style GQA"),
        ("TOP_LEFT", "top-left alignment"),
        ("INTERLEAVED_ROPE", "interleaved RoPE pairs"),
    ],
)
def test_a_target_with_another_convention_fails_with_a_message_that_names_it(broken, convention):
    oracle_properties = "test_matches_the_oracle or test_layer_matches_the_oracle_layer or test_rope_matches"
    done = run_properties(f"properties.meta_tests.broken_targets:{broken}", "-k", oracle_properties)
    assert done.returncode == 1, done.stdout[-3000:]
    assert f"convention mismatch: the target follows {convention}" in done.stdout, done.stdout[-3000:]


def test_an_unknown_target_is_a_usage_error():
    done = run_properties("no_such_package.module:thing")
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage-error exit code
    assert "no_such_package" in done.stdout + done.stderr
