"""A toy copy of the project for real campaigns in seconds: impl/ and specs/ as they are (or impl/
cut down to the modules the toy tests reach), properties/ replaced by the given test modules."""

from __future__ import annotations

import shutil
from pathlib import Path

from mutants.campaign import REPO_ROOT

# impl/masks.py alone, as the package: what a toy suite that reaches only the masks imports.
MASKS_ONLY = "from .masks import additive_mask, attention_mask, check_window, layer_window\n"


def toy_root(where: Path, tests: dict[str, str], impl_init: str | None = None) -> Path:
    """The toy project under ``where``.  With ``impl_init``, impl/ holds masks.py and that __init__.py
    alone: mutmut then generates the masks' mutants only (about 1 s instead of 7.6 s a campaign)."""
    root = where / "toy"
    shutil.copytree(REPO_ROOT / "specs", root / "specs", ignore=shutil.ignore_patterns("__pycache__"))
    if impl_init is None:
        shutil.copytree(REPO_ROOT / "impl", root / "impl", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        (root / "impl").mkdir()
        shutil.copy(REPO_ROOT / "impl" / "masks.py", root / "impl" / "masks.py")
        (root / "impl" / "__init__.py").write_text(impl_init)
    (root / "properties").mkdir()
    (root / "properties" / "__init__.py").write_text("")
    for name, text in tests.items():
        (root / "properties" / name).write_text(text)
    return root
