"""The SOURCE arguments of `attnspec mutate`: files, and folders of them (a model's modeling file and
the shared module where its masks are built are one campaign)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnspec.mutation.campaign import sources_named
from attnspec.mutation.errors import CampaignError


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
