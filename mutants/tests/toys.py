"""A toy copy of the project for real campaigns in seconds: impl/ and specs/ as they are (or impl/
cut down to the modules the toy tests reach), properties/ replaced by the given test modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from attnspec.properties.meta_tests.kit_runs import run_module
from mutants.campaign import REPO_ROOT


def toy_root(where: Path, tests: dict[str, str], masks_only: bool = False) -> Path:
    """The toy project under ``where``.  With ``masks_only``, impl/ holds masks.py alone (the package
    exports its functions), for toy tests that reach nothing else: mutmut then generates the masks'
    mutants only (about 1 s instead of 7.6 s a campaign)."""
    root = where / "toy"
    shutil.copytree(REPO_ROOT / "specs", root / "specs", ignore=shutil.ignore_patterns("__pycache__"))
    if masks_only:
        (root / "impl").mkdir()
        shutil.copy(REPO_ROOT / "impl" / "masks.py", root / "impl" / "masks.py")
        exported = "additive_mask, attention_mask, check_window, layer_window"
        (root / "impl" / "__init__.py").write_text(f"from .masks import {exported}\n")
    else:
        shutil.copytree(REPO_ROOT / "impl", root / "impl", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "properties").mkdir()
    (root / "properties" / "__init__.py").write_text("")
    for name, text in tests.items():
        (root / "properties" / name).write_text(text)
    return root


def mutants_command(
    args: list[str], timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``python -m mutants ARGS`` in the repository, forked from the warm server (kit_runs.py), with this
    run's environment or ``env``."""
    command = [sys.executable, "-m", "mutants", *args]
    return run_module(command, REPO_ROOT, dict(os.environ) if env is None else env, timeout)
