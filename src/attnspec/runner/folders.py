"""Folders one run holds: a lock (flock on the folder itself) that the run and the children it forks
keep while they live, and that goes with them however they end, SIGKILL included.

- ``hold``: a folder a second run must not write into at the same time (`attnspec check`'s
  attnspec-failures/, `attnspec mutate`'s --out): made where it is missing, locked, a second run
  refused at once (Busy), the folders made removed at the end while empty;
- ``locked_temporary``: a run's temporary folder, removed on the way out; one whose run was killed
  before it could remove it is unlocked, and the next run of the same prefix removes it
  (``collect_stale``).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # no flock (Windows): folders are removed on the way out only
    fcntl = None  # type: ignore[assignment]

STALE_AFTER_S = 60.0  # a folder this old whose lock is free has no run left


class Busy(Exception):
    """Another run holds the folder."""


@dataclass
class Holding:
    """A folder held by this run: its locked descriptor, and the folders to remove while empty as it
    is released (the deepest first)."""

    folder: Path
    fd: int | None
    removable: list[Path]

    def release(self) -> None:
        for folder in self.removable:  # while locked: no other run holds an emptied folder meanwhile
            try:
                folder.rmdir()
            except OSError:
                break
        if self.fd is not None:
            os.close(self.fd)


def hold(folder: Path, remove_empty: bool = False) -> Holding:
    """``folder`` (made, with the folders above it that are missing) locked by this run; at release,
    the folders made, and ``folder`` itself with ``remove_empty``, removed while empty.  Raises Busy
    where another run holds it, OSError where it cannot be made or opened."""
    made = []
    above = folder
    while not os.path.lexists(above) and above != above.parent:
        made.append(above)
        above = above.parent
    removable = made if made or not remove_empty else [folder]
    if fcntl is None:  # no flock (Windows): two runs are not told apart
        folder.mkdir(parents=True, exist_ok=True)
        return Holding(folder, None, removable)
    for _ in range(3):
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise Busy(str(folder)) from None
        # the run that held it last may have removed it between our open and our lock: held, it is ours
        if os.path.lexists(folder) and os.path.samestat(os.fstat(fd), os.stat(folder)):
            return Holding(folder, fd, removable)
        os.close(fd)
    raise Busy(str(folder))


@contextmanager
def locked_temporary(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A new temporary folder, locked while this process (and the children it forks) live; removed on
    the way out unless ``keep``.  Stale folders of the same prefix are removed first."""
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
        if not keep:
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
