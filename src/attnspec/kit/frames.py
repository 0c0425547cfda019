"""Where an error was raised: in attnspec's own code (the kit loading, calling or reading a target) or
in the target's, and at which line of the target's own files."""

from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # attnspec


def kit_code(filename: str) -> bool:
    """Whether a frame's file is attnspec's own code (the kit loading, calling or reading a target),
    not the target's: anything of the package but its reference implementation (impl/), which is a
    target like any other."""
    path = Path(filename).resolve()
    return path.is_relative_to(PACKAGE) and not path.is_relative_to(PACKAGE / "impl")


def raised_at(frames: traceback.StackSummary) -> str | None:
    """Where an error was raised ("FILE, line N") in code outside the kit: the innermost frame outside
    the standard library and the installed packages when there is one (the user's own module),
    else the innermost outside the kit; None when the kit itself raised it."""
    outside = [
        frame for frame in frames if not frame.filename.startswith("<") and not kit_code(frame.filename)
    ]
    libraries = [Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "purelib", "platlib")]
    own = [
        frame
        for frame in outside
        if not any(Path(frame.filename).resolve().is_relative_to(lib) for lib in libraries)
    ]
    if not outside:
        return None
    frame = (own or outside)[-1]
    return f"{frame.filename}, line {frame.lineno}"
