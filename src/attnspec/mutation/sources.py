"""What a campaign mutates: the SOURCE arguments (files, folders of them) and a built-in adapter's
declared sources, each as the module the tests import it as."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from attnspec.kit import loading
from attnspec.runner.pytest_plugin import importable_name

from .errors import CampaignError

SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist", "venv", "env"}


@dataclass
class Source:
    module: str  # as imported
    file: Path
    only: set[str] | None = None  # function qualnames, None for the whole module
    shown: str = ""  # the path reports show
    root: Path | None = None  # the folder its top-level package is imported from


def module_file(module: str) -> Path:
    try:
        spec = importlib.util.find_spec(module)
    except (ModuleNotFoundError, ValueError) as error:
        raise CampaignError(f"{module} is not installed ({error})") from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise CampaignError(f"{module} has no Python source file to mutate")
    return Path(spec.origin).resolve()


def adapter_sources(name: str) -> list[Source]:
    """The sources a built-in adapter declares (its ``sources``: "module" or "module:f,g")."""
    from attnspec.protocol import targets

    if name not in targets.ADAPTERS:
        raise CampaignError(f"{name} is not a built-in adapter ({', '.join(targets.ADAPTERS)})")
    try:
        target = loading.load(name)
    except ModuleNotFoundError as error:
        raise CampaignError(targets.missing_module_hint(name, error)) from None
    if not target.sources:
        raise CampaignError(f"the {name} adapter declares no sources to mutate: name the files")
    found = []
    for spec in target.sources:
        module, _, only = spec.partition(":")
        file = module_file(module)
        found.append(
            Source(module, file, set(only.split(",")) if only else None, module.replace(".", "/") + ".py")
        )
    return found


def check_target_name(name: str, cwd: Path) -> None:
    """A CampaignError unless ``name`` is a built-in adapter or ``module:object`` whose module can be
    found from ``cwd`` (found, not imported: the engine imports the user's code, this process does not)."""
    from attnspec.protocol import targets

    module, colon, obj = name.partition(":")
    if name in targets.ADAPTERS:
        return
    if not colon or not module or not obj:
        known = ", ".join(targets.ADAPTERS)
        raise CampaignError(f"--impl {name}: give module:OBJ (what attnspec check takes) or one of {known}")
    sys.path.insert(0, str(cwd))
    try:
        found = findable(module)
    finally:
        sys.path.remove(str(cwd))
    if not found:
        raise CampaignError(f"--impl {name}: no module {module} importable from {cwd}")


def findable(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing its packages (importlib's find_spec
    imports them: their code run here, their bytecode written into the user's project)."""
    top, *parts = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name is found, not imported
    except (ImportError, ValueError):
        return False
    for part in parts:
        if spec is None or not spec.submodule_search_locations:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None


def sources_named(names: list[str], cwd: Path) -> list[Source]:
    """The SOURCE arguments as sources: a file, or a folder's Python files (its test modules,
    conftest.py, hidden folders and virtual environments left out), each once, in the order named."""
    files: list[str] = []
    for name in names:
        folder = cwd / name
        if not folder.is_dir():
            files.append(name)
            continue
        found = sorted(
            path
            for path in folder.rglob("*.py")
            if not any(p.startswith(".") or p in SKIPPED_DIRS for p in path.relative_to(folder).parts[:-1])
            and not is_test_module(path.name)
        )
        if not found:
            raise CampaignError(f"{name}: a folder with no Python source to mutate")
        files += [os.path.relpath(path, cwd) for path in found]
    sources: dict[Path, Source] = {}
    for file in files:
        source = file_source(file, cwd)
        sources.setdefault(source.file, source)
    return list(sources.values())


def is_test_module(name: str) -> bool:
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def file_source(file: str, cwd: Path) -> Source:
    """FILE as the module it is imported as: its dotted path from the first folder above it that
    is no package (no __init__.py), which is then put on the path."""
    try:
        path = (cwd / file).resolve()
        readable = path.is_file() and path.suffix == ".py"
        text = path.read_bytes() if readable else b""
    except OSError as error:  # a name too long, a file it may not read
        raise CampaignError(f"{file[:80]}: {error.strerror or error}") from None
    if not readable:
        raise CampaignError(f"{file}: no such file, or not a Python file")
    try:
        compile(text, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:  # ValueError: a null byte
        where = f":{error.lineno}" if isinstance(error, SyntaxError) and error.lineno else ""
        said = error.msg if isinstance(error, SyntaxError) else str(error)
        raise CampaignError(f"{file}{where}: {said}: a source must compile to be mutated") from None
    except UnicodeDecodeError as error:
        raise CampaignError(f"{file}: not UTF-8 text ({error.reason})") from None
    module, root = importable_name(path)
    shown = os.path.relpath(path, cwd) if path.is_relative_to(cwd) else module.replace(".", "/") + ".py"
    return Source(module, path, None, Path(shown).as_posix(), root)
