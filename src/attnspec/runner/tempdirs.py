"""Temporary folders that a run killed with SIGKILL does not leave behind for good.

Each folder is locked (flock on the folder itself) while the run that made it lives, forked children
included, and removed on the way out; a run killed before it could remove its folder leaves it
unlocked, and the next run that makes a folder with the same prefix removes it (``collect_stale``).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # no flock (Windows): folders are removed on the way out only
    fcntl = None  # type: ignore[assignment]

STALE_AFTER_S = 60.0  # a folder this old whose lock is free has no run left


@contextmanager
def locked_folder(prefix: str) -> Iterator[Path]:
    """A new temporary folder, locked while this process (and the children it forks) live; removed on
    the way out.  Stale folders of the same prefix are removed first."""
    collect_stale(prefix)
    # made with interrupts held back until the try below owns it: one in between would leave it behind
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        folder = Path(tempfile.mkdtemp(prefix=prefix))
        owner = os.open(folder, os.O_RDONLY) if fcntl is not None else None
        if owner is not None:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if owner is not None:
            os.close(owner)


def collect_stale(prefix: str, folder: Path | None = None, settle_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove the temporary folders of runs that died without removing them (killed with SIGKILL, a
    machine that lost power): one whose lock can be taken has no owner.  A folder younger than
    ``settle_s`` is left alone: its run may not have locked it yet.  Returns those removed."""
    removed: list[Path] = []
    if fcntl is None:
        return removed
    for stale in Path(folder or tempfile.gettempdir()).glob(prefix + "*"):
        try:
            if not stale.is_dir() or stale.is_symlink() or time.time() - stale.stat().st_mtime < settle_s:
                continue
            fd = os.open(stale, os.O_RDONLY)
        except OSError:
            continue  # gone meanwhile, or another user's
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a run still owns it
        else:
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale)
        finally:
            os.close(fd)
    return removed
