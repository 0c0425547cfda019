"""Where `attnspec check` writes: attnspec-failures/ (the reproducers and report.txt), --junitxml and
--db, each checked before anything runs, so that a run never ends NOT CHECKED, nor hangs, for a path
it could have refused at once; and a report that cannot be written once the run is over (a disk that
filled meanwhile) goes to a temporary folder that is named, the verdict as it was.

attnspec-failures/ is held by one check at a time (folders.hold): a second check in the same
folder is refused at once, so that neither overwrites the other's reproducers and each printed rerun
command replays its own run.  Where the folder the check runs in cannot be written (a read-only
checkout), the failures go to a temporary folder, named with them.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attnspec.runner import folders

FAILURES = "attnspec-failures"  # in the folder the check runs in: the reproducers and report.txt
ELSEWHERE = "attnspec-failures-"  # the temporary folder's prefix where that cannot be written


class OutputError(Exception):
    """A path the check cannot write to, in one line for the user."""


def output_file(option: str, text: str) -> Path:
    """The file ``option`` names, refused unless a regular file can be written there (a FIFO would
    block the run at its end, a device swallow or refuse the report): made and removed again where it
    did not exist, its folders left to be made at the end where they do not exist yet."""
    path = _named(option, text)
    if path.exists() or path.is_symlink():
        mode = path.stat().st_mode if path.exists() else 0
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise OutputError(f"{option} {text}: {kind}; give the path of a file to write")
    home = _nearest_folder(option, text, path.parent)
    try:
        if path.parent.is_dir():
            existed = path.exists()
            with open(path, "a"):
                pass
            if not existed:
                path.unlink()
        elif not os.access(home, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied", str(home))
    except OSError as error:
        raise OutputError(f"{option} {text}: {error.strerror or error}") from None
    return path


def database_folder(option: str, text: str) -> Path:
    """The folder ``option`` names for Hypothesis's database: refused unless it is a folder or can be
    made one."""
    path = _named(option, text)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {text}: not a folder; give a folder for the failing examples")
    home = _nearest_folder(option, text, path)
    if not os.access(home, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {text}: {home} cannot be written")
    return path


def _named(option: str, text: str) -> Path:
    if not text.strip():
        raise OutputError(f"{option}: an empty path; give a path")
    return Path(text).expanduser()


def _nearest_folder(option: str, text: str, path: Path) -> Path:
    """The nearest existing ancestor of ``path`` (``path`` itself where it exists): a folder."""
    home = path.absolute()
    while not home.exists() and home != home.parent:
        home = home.parent
    if not home.is_dir():
        raise OutputError(f"{option} {text}: {home} is not a folder")
    return home


@contextmanager
def failures_folder(cwd: Path) -> Iterator[tuple[Path, str]]:
    """This check's folder for its failures, held for the run, and why it is not attnspec-failures/ in
    ``cwd`` ("" where it is): that folder, made and held (folders.hold), its earlier reproducers and
    report removed; where it cannot be made, a new temporary folder.  Raises OutputError where another
    check holds it.  An empty folder does not stay."""
    why = ""
    try:
        holding = folders.hold(cwd / FAILURES, remove_empty=True)
    except folders.Busy:
        raise OutputError(
            f"another attnspec check is running in {cwd} and writes {FAILURES}/ there: wait for it to end, "
            "or run this one from another folder"
        ) from None
    except OSError as error:
        why = f"{FAILURES}/ cannot be written in {cwd}: {error.strerror or error}"
        holding = folders.hold(Path(tempfile.mkdtemp(prefix=ELSEWHERE)), remove_empty=True)
    try:
        _clear(holding.folder)
        yield holding.folder, why
    finally:
        holding.release()


def _clear(folder: Path) -> None:
    """The reproducers and report of an earlier check go: what the folder holds is this check's."""
    for path in folder.iterdir():
        if path.suffix in (".py", ".pt", ".txt") and path.is_file():
            path.unlink()


def delivered(made: Path, path: Path) -> str:
    """``made`` (a report written in the check's temporary folder) copied to ``path``: "" once there;
    where that fails, moved to a new temporary folder, and a line that says where and why."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(made, path)
        return ""
    except OSError as error:
        kept = Path(tempfile.mkdtemp(prefix=ELSEWHERE)) / path.name
        shutil.move(made, kept)
        return f"{path} could not be written ({error.strerror or error}): the report is at {kept}"


def written_or_elsewhere(path: Path, write) -> tuple[Path, str]:
    """``write(path)``; where that fails, ``write`` into a new temporary folder instead: the path
    written and, for the latter, why."""
    try:
        write(path)
        return path, ""
    except OSError as error:
        kept = Path(tempfile.mkdtemp(prefix=ELSEWHERE)) / path.name
        write(kept)
        return kept, f"{path} could not be written ({error.strerror or error})"
