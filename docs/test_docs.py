"""The tutorials run as written, so that the documentation cannot drift from the code.

Each tutorial page (docs/tutorials/*.md), and the README's quick start, is replayed in an empty folder,
top to bottom:

- a ``python`` block whose first line is a comment naming a file (``# mykern.py``, ``# tests/x.py``)
  is written to that file (a later block of the same name replaces it, as the reader edits it);
- each line of a ``sh`` block is a command, run in that folder; a trailing comment ``# exit N`` is the
  exit code the page promises (0 without one).  ``python3 -m pip install ...`` lines are the
  environment this test runs in, which has attnspec installed;
- a ``text`` block right after a ``sh`` block is output the page shows: each of its lines must be a
  line of the last command's output.

Run by ``tox -e docs`` (beside ``mkdocs build --strict``), not by the default test run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((REPO / "docs" / "tutorials").glob("*.md"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE_LINE = re.compile(r"^# ([\w./-]+\.py)\n")
EXIT = re.compile(r"#.*\bexit (\d+)")
INSTALL = ("python3 -m pip install", "pip install")


def steps(markdown: str) -> list[tuple[str, str]]:
    """The page's fenced blocks, in order: (language, text)."""
    return [(match.group(1), match.group(2)) for match in FENCE.finditer(markdown)]


def commands(block: str) -> list[tuple[str, int]]:
    """(command, the exit code the page promises) for each command line of a sh block."""
    found = []
    for line in block.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith(INSTALL):
            continue
        expected = EXIT.search(line)
        command = line.split(" #", 1)[0].strip()
        found.append((command, int(expected.group(1)) if expected else 0))
    return found


def run(command: str, folder: Path) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    if argv[0] == "attnspec":  # this environment's attnspec, whatever PATH holds
        argv = [sys.executable, "-m", "attnspec", *argv[1:]]
    elif argv[0] == "python":
        argv[0] = sys.executable
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("HYPOTHESIS_PROFILE", None)  # the page's commands run as a reader runs them
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=900)


def replay(markdown: str, folder: Path) -> int:
    """Replays a page in ``folder``; returns how many commands ran."""
    ran, last = 0, None
    for language, text in steps(markdown):
        named = FILE_LINE.match(text)
        if language == "python" and named:
            path = folder / named.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        elif language == "sh":
            for command, expected in commands(text):
                last = run(command, folder)
                output = last.stdout + last.stderr
                assert last.returncode == expected, (
                    f"`{command}` exited {last.returncode}, the page says {expected}:\n{output[-4000:]}"
                )
                ran += 1
        elif language == "text" and last is not None:
            lines = {line.strip() for line in (last.stdout + last.stderr).splitlines()}
            missing = [line for line in text.splitlines() if line.strip() and line.strip() not in lines]
            assert not missing, f"the page shows output that `{command}` did not print: {missing}"
    return ran


@pytest.mark.parametrize("page", TUTORIALS, ids=[page.stem for page in TUTORIALS])
def test_a_tutorial_runs_as_written(page: Path, tmp_path: Path) -> None:
    assert replay(page.read_text(encoding="utf-8"), tmp_path) >= 1, f"{page.name} runs no command"
    assert not (tmp_path / ".hypothesis").exists(), "a check wrote .hypothesis/ into the user's folder"


def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "attnspec check" in quick_start
    # its mutate line grades a project of the reader's own (the grading tutorial replays one)
    assert replay(quick_start.replace("\nattnspec mutate", "\n# attnspec mutate"), tmp_path) >= 1


def test_the_triton_how_to_runs_as_written(tmp_path: Path) -> None:
    """The how-to that checks a Triton kernel of a reader's own and finds the bug planted in it, on the
    CPU through Triton's interpreter (``tox -e triton`` runs it; elsewhere triton is not installed)."""
    pytest.importorskip("triton", reason="needs triton: pip install 'attnspec[triton]' (tox -e triton)")
    page = REPO / "docs" / "how-to" / "triton.md"
    assert replay(page.read_text(encoding="utf-8"), tmp_path) >= 3


def test_the_tutorials_are_in_the_site() -> None:
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    for page in TUTORIALS:
        assert f"tutorials/{page.name}" in config, f"{page.name} is not in mkdocs.yml's nav"
