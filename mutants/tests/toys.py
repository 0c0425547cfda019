"""A toy copy of the project for real campaigns in seconds: impl/ and specs/ as they are,
properties/ replaced by the given test modules."""

from __future__ import annotations

import shutil
from pathlib import Path

from mutants.campaign import REPO_ROOT


def toy_root(where: Path, tests: dict[str, str]) -> Path:
    root = where / "toy"
    for name in ("impl", "specs"):
        shutil.copytree(REPO_ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "properties").mkdir()
    (root / "properties" / "__init__.py").write_text("")
    for name, text in tests.items():
        (root / "properties" / name).write_text(text)
    return root
