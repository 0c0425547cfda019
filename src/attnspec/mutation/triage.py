"""Triage: the survivors a campaign accepts as equivalent mutants, each with its reason.

Two sources, one format (mutant name -> {"reason", ...}):

- a TOML file of ``[[survivor]]`` entries (``mutant``, ``reason``, optionally ``replacement``, the
  change the entry expects, and ``target``, one name or a list, for a file shared by campaigns);
- a comment in the user's own source, on a line the mutant changes or on the comment line just
  above it::

      scores = scores.masked_fill(~allowed, float("-inf"))  # attnspec: equivalent F1 -- reason

  which triages every mutant of that fault there.  The reason is shown in every report.

A triage entry that matches no survivor is reported, so that stale entries do not pile up.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from .faults.annotations import ANNOTATION

INLINE = re.compile(r"#\s*attnspec:\s*equivalent\s+(?P<fault>F\d+)\s*(?:--|—|:)\s*(?P<reason>.+?)\s*$")
MALFORMED = re.compile(r"#\s*attnspec:")


class TriageError(ValueError):
    pass


def targets_of(entry: dict) -> list[str]:
    """A triage entry's targets: one name, or a list of them (a family's layer and model adapters)."""
    return entry["target"] if isinstance(entry["target"], list) else [entry["target"]]


def from_file(path: Path, target: str | None = None) -> dict[str, dict]:
    """The entries of a TOML triage file (those for ``target`` when given: then every entry must
    name its targets)."""
    if not path.exists():
        return {}
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("survivor", [])
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise TriageError(f"{path}: not a valid TOML triage file: {error}") from None
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise TriageError(f"{path}: [[survivor]] entries expected, each a table (mutant, reason)")
    needed = ("target", "mutant", "reason") if target is not None else ("mutant", "reason")
    for entry in entries:
        if not all(entry.get(key) for key in needed):
            raise TriageError(f"{path}: every [[survivor]] needs {', '.join(needed)}: {entry}")
    return {
        entry["mutant"]: dict(entry, source=str(path))
        for entry in entries
        if target is None or target in targets_of(entry)
    }


def inline_comments(text: str) -> dict[int, tuple[str, str]]:
    """line -> (fault id, reason) of every triage comment in a source; a comment that starts like
    one but does not parse is an error (a typo must not silently triage nothing)."""
    found = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if "attnspec:" not in line or not MALFORMED.search(line) or ANNOTATION.search(line):
            continue  # a site annotation (faults/annotations.py) is no triage
        match = INLINE.search(line)
        if match is None:
            raise TriageError(
                f"line {number}: an attnspec comment reads `# attnspec: equivalent F<n> -- reason` (triage) "
                f"or `# attnspec: site F<n>` (a fault's site), got {line.strip()!r}"
            )
        found[number] = (match["fault"], match["reason"])
    return found


def inline(sources: dict[str, str], mutants: list) -> dict[str, dict]:
    """Triage entries from the comments in ``sources`` (shown path -> text) for ``mutants`` (report
    Mutants), plus one ``unused:<path>:<line>`` key per comment that matched no mutant."""
    entries: dict[str, dict] = {}
    comments = {path: inline_comments(text) for path, text in sources.items()}
    used: set[tuple[str, int]] = set()
    for mutant in mutants:
        lines = comments.get(mutant.path, {})
        first, last = mutant.start[0], max(mutant.end[0], mutant.start[0])
        texts = sources[mutant.path].splitlines() if mutant.path in sources else []
        candidates = list(range(first, last + 1))
        above = first - 1
        if 1 <= above <= len(texts) and texts[above - 1].lstrip().startswith("#"):
            candidates.append(above)
        for line in candidates:
            if line in lines and lines[line][0] == mutant.operator:
                entries[mutant.name] = {"reason": lines[line][1], "source": f"{mutant.path}:{line}"}
                used.add((mutant.path, line))
                break
    for path, lines in comments.items():
        for line, (fault, reason) in lines.items():
            if (path, line) not in used:
                entries[f"unused:{path}:{line}"] = {
                    "reason": reason,
                    "source": f"{path}:{line}",
                    "fault": fault,
                }
    return entries


def untriaged(mutant, triage: dict[str, dict]) -> str:
    """'' if the survivor is triaged, else why not."""
    entry = triage.get(mutant.name)
    if entry is None:
        return "not triaged"
    if "replacement" in entry and entry["replacement"] != mutant.replacement:
        return f"stale triage entry (it expects replacement {entry['replacement']!r})"
    return ""
