"""The SOURCE arguments of `attnspec mutate`: files, and folders of them (a model's modeling file and
the shared module where its masks are built are one campaign)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnspec.mutation.errors import CampaignError
from attnspec.mutation.sources import sources_named


def write(root: Path, files: list[str]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("def f(x):\n    return x\n")


def test_a_folder_is_its_python_sources_without_tests_hidden_folders_or_environments(tmp_path):
    write(
        tmp_path,
        [
            "model/__init__.py",
            "model/modeling.py",
            "model/masking.py",
            "model/layers/rope.py",
            "model/test_modeling.py",
            "model/conftest.py",
            "model/modeling_test.py",
            "model/.cache/stale.py",
            "model/venv/lib.py",
            "other.py",
        ],
    )
    shown = [source.shown for source in sources_named(["model", "other.py", "model/masking.py"], tmp_path)]
    assert shown == [
        "model/__init__.py",
        "model/layers/rope.py",
        "model/masking.py",
        "model/modeling.py",
        "other.py",
    ]  # each once, a file named again as well
    assert [s.module for s in sources_named(["model/masking.py"], tmp_path)] == ["model.masking"]


def test_a_folder_without_sources_is_refused(tmp_path):
    write(tmp_path, ["tests/test_a.py"])
    with pytest.raises(CampaignError, match="tests: a folder with no Python source to mutate"):
        sources_named(["tests"], tmp_path)


NAMESPACE_ATTENTION = """\
import math


def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return scores.softmax(dim=-1) @ v
"""

NAMESPACE_TEST = """\
import torch

from ns.sub.attn import attention


def test_matches_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(attention(q, k, v), expected)
"""


@pytest.mark.parametrize("suite", ["pytest", "command"])
def test_a_source_in_a_namespace_package_is_mutated_where_the_tests_import_it(tmp_path, suite):
    # ns/ has no __init__.py (keras' sdist: keras/src/...): the module's name planned from the
    # __init__.py files above it is sub.attn, the tests import ns.sub.attn.  The mutants went into a
    # second copy of the module that no test ran, and both survived; they are killed where it runs,
    # in the warm pytest session and in the processes any other command starts.
    import os
    import subprocess
    import sys

    (tmp_path / "ns" / "sub").mkdir(parents=True)
    (tmp_path / "ns" / "sub" / "__init__.py").write_text("")
    (tmp_path / "ns" / "sub" / "attn.py").write_text(NAMESPACE_ATTENTION)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_attn.py").write_text(NAMESPACE_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSPEC_", "HYPOTHESIS_"))}
    command = [sys.executable, "-m", "attnspec", "mutate", "ns/sub/attn.py", "--out", "../out"]
    tests = (
        ["pytest", "tests"] if suite == "pytest" else ["sh", "-c", f"'{sys.executable}' -m pytest -q tests"]
    )
    done = subprocess.run(
        [*command, "--", *tests],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "killed 2   survived 0" in done.stdout, done.stdout
