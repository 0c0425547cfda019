"""The Triton zoo (examples/zoo/triton_kernels/): real ``@triton.jit`` kernels checked as a user checks
them, ``attnspec check TARGET`` in an empty folder.  On the CPU the kit runs them through Triton's
interpreter and says so in the verdict; on a GPU (``tox -e cuda``) the same kernels run compiled.
Every correct kernel passes; every broken twin (twins.py) fails, exit 1, naming its cause in the
first lines of the report.  ``tox -e triton`` runs this module (the cpu env leaves it out: no triton).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from examples.zoo.triton_kernels import KERNELS
from examples.zoo.triton_kernels.twins import TWINS, edited_source
from tests.fixtures.kit_runs import ROOT, users_env

DEVICE = os.environ.get("ATTNSPEC_DEVICE", "cpu")
INTERPRETED = "its Triton kernels interpreted on the CPU (TRITON_INTERPRET=1"
SUMMARY = re.compile(r"^\d+ (failed|passed)\b.* in [\d.]+s( \(\d+:\d\d:\d\d\))?$")
FIRST_LINES = 4  # the report's lines after pytest's summary line that must name a twin's cause


def check(target: str, tmp_path) -> subprocess.CompletedProcess:
    """``attnspec check TARGET --seed 0`` from an empty folder, the repository importable, as a user's
    shell runs it (the same examples every run: a twin fails every run or none)."""
    env = {**users_env(), "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "attnspec", "check", target, "--seed", "0", "--device", DEVICE]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def first_lines(stdout: str) -> list[str]:
    """The report's first lines: those after pytest's summary line ("3 failed, 21 passed ... in 35s")."""
    lines = stdout.splitlines()
    after = next((i for i, line in enumerate(lines) if SUMMARY.match(line.strip())), len(lines))
    return [line for line in lines[after + 1 :] if line.strip()][:FIRST_LINES]


@pytest.mark.parametrize("target", KERNELS)
def test_each_correct_triton_kernel_passes_the_whole_kit(target, tmp_path):
    done = check(target, tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    verdict = done.stdout.strip().splitlines()[-1]
    assert verdict.startswith("PASS:"), verdict
    assert (INTERPRETED in verdict) == (DEVICE == "cpu"), verdict


@pytest.mark.parametrize("name", TWINS)
def test_each_broken_twin_fails_naming_its_cause(name, tmp_path):
    done = check(f"examples.zoo.triton_kernels.twins:{name}", tmp_path)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    first = first_lines(done.stdout)
    assert any(TWINS[name].cause in line for line in first), "\n".join(first) or done.stdout[-3000:]


@pytest.mark.parametrize("name", TWINS)
def test_each_twin_is_its_kernel_with_one_edit(name):
    twin = TWINS[name]
    original = (ROOT / "examples" / "zoo" / "triton_kernels" / twin.kernel).read_text(encoding="utf-8")
    assert original.count(twin.old) == 1
    assert edited_source(name) == original.replace(twin.old, twin.new) != original


@pytest.mark.skipif(DEVICE != "cpu", reason="a run on the CPU only: on a GPU compiled kernels are the point")
def test_kernels_compiled_before_the_check_are_refused_with_what_to_do(tmp_path):
    env = {**users_env(), "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "0"}  # the user's own choice, kept
    command = [sys.executable, "-m", "attnspec", "check", KERNELS[0]]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-2000:]
    assert "were compiled for a GPU" in done.stdout + done.stderr, done.stdout[-3000:]
    assert "set TRITON_INTERPRET=1 before the module is imported" in done.stdout + done.stderr


KERNEL_TEST = '''
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import torch.nn.functional as F

from kern import attention


def test_matches_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(attention(q, k, v), expected, atol=1e-5, rtol=1e-5)
'''


@pytest.mark.skipif(DEVICE != "cpu", reason="the author's test runs its kernel interpreted, on the CPU")
def test_mutate_grades_a_kernel_authors_test_with_mutants_inside_the_jit_kernel(tmp_path):
    """`attnspec mutate` puts its mutants inside the @triton.jit function itself (Triton's interpreter
    reads the kernel's source, so the mutated source is what it is given), and the author's own test
    kills the rescale dropped (F29) there (not in the sinks' merge: it takes no sinks)."""
    source = ROOT / "examples" / "zoo" / "triton_kernels" / "forward.py"
    (tmp_path / "kern.py").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_kern.py").write_text(KERNEL_TEST, encoding="utf-8")
    env = {**users_env(), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "attnspec", "mutate", "kern.py", "--"]
    command += [sys.executable, "-m", "pytest", "-q", "tests/"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stdout[-4000:] + done.stderr[-2000:]
    rows: dict[str, str] = {}
    for line in done.stdout.splitlines():  # the catalogue table's rows (the first line naming each fault)
        if re.match(r"^\s+F\d+\s", line):
            rows.setdefault(line.split()[0], line)
    assert "killed by tests/test_kern.py::test_matches_sdpa" in rows["F29"], rows["F29"]
    assert "_attn_fwd" in done.stdout and "LookupError" not in done.stdout, done.stdout[-4000:]
