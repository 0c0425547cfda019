"""The Stryker report (mutation-testing-report-schema, version 2) of any campaign, from its
mutants as :class:`Mutant` records, and how a mutant's location is found in its source.

Locations come from a diff: the original function and the mutant are compared, the common prefix
and suffix are cut off, and what is left of the original is widened to whole tokens.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

from ..faults import FAULTS

UNDETECTED = ("Survived", "NoCoverage")  # what the gate calls a survivor
ANOTHER_SHARD = "run by another shard"  # the reason of a shard report's Pending mutants
THRESHOLDS = {"high": 80, "low": 60}


@dataclass
class Mutant:
    name: str  # e.g. attnspec.impl.masks.x_attention_mask__mutmut_3, pkg.mod.Attention.forward__F3_1
    path: str  # source file as reports show it, e.g. attnspec/impl/masks.py
    operator: str  # mutmut operator name (swap_op, number, ...) or catalogue fault id (F1..F27)
    status: str  # Stryker status
    start: tuple[int, int] = (1, 1)  # 1-based line and column, end exclusive
    end: tuple[int, int] = (1, 1)
    replacement: str = ""
    diff: str = ""
    covered_by: list[str] = field(default_factory=list)
    killed_by: list[str] = field(default_factory=list)
    killing_requirements: list[str] = field(default_factory=list)
    duration_s: float | None = None
    tests_completed: int | None = None
    reason: str = ""  # why a mutant is Pending (another shard), a Timeout or a RuntimeError
    triage: str = ""  # why a survivor is an equivalent mutant (a triage file or an inline comment)
    problem: str = ""  # set when the replayed tag and mutmut's mutant disagree


# --- locating a mutant -------------------------------------------------------------------------

WORD = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
TWO_CHAR_OPERATORS = {
    "<=",
    ">=",
    "==",
    "!=",
    "**",
    "//",
    "<<",
    ">>",
    "->",
    ":=",
    "+=",
    "-=",
    "*=",
    "/=",
    "%=",
    "&=",
    "|=",
    "^=",
    "@=",
}


def same_token(a: str, b: str) -> bool:
    """Whether a and b, side by side, belong to one token (a name, a number like 1.5, `<=`)."""
    number = (a == "." and b.isdigit()) or (a.isdigit() and b == ".")
    return (a in WORD and b in WORD) or a + b in TWO_CHAR_OPERATORS or number


def whole_tokens(text: str, start: int, end: int) -> tuple[int, int]:
    while 0 < start < len(text) and same_token(text[start - 1], text[start]):
        start -= 1
    while 0 < end < len(text) and same_token(text[end - 1], text[end]):
        end += 1
    return start, end


def changed_span(original: str, mutated: str, node: tuple[int, int] | None = None) -> tuple[int, int, str]:
    """(start, end, replacement): original[start:end] became replacement.

    The common prefix and suffix are cut off, the rest is trimmed of whitespace and widened to
    whole tokens (so `<=` -> `<` reports `<=`, not `=`).  A pure insertion reports the token it
    is glued to (`<` -> `<=`), else the token after it (`in` -> `not in`) unless only the one
    before it lies in `node`, the (start, end) offsets of the replaced node (`is` -> `is not`).
    """
    prefix = len(os.path.commonprefix([original, mutated]))
    suffix = len(os.path.commonprefix([original[::-1], mutated[::-1]]))
    suffix = min(suffix, min(len(original), len(mutated)) - prefix)
    start, end = prefix, len(original) - suffix
    while start < end and original[start].isspace():
        start += 1
    while end > start and original[end - 1].isspace():
        end -= 1
    if start < end:
        start, end = whole_tokens(original, start, end)
    elif start > 0:  # a pure insertion at `start`
        before = after = start
        while before > 0 and original[before - 1].isspace():
            before -= 1
        while after < len(original) - 1 and original[after].isspace():
            after += 1
        glued_to_previous = before == start  # `<` -> `<=`
        start, end = whole_tokens(original, after, after + 1)
        if before > 0 and (glued_to_previous or (node and not node[0] <= start < node[1])):
            start, end = whole_tokens(original, before - 1, before)
    # the same stretch of the mutant: its changed middle plus whatever the widening added
    replacement = mutated[
        min(start, prefix) : len(mutated) - (len(original) - max(end, len(original) - suffix))
    ]
    return start, end, replacement.strip()


def offset_of(text: str, line: int, column0: int) -> int:
    """Offset of a 1-based line and 0-based column."""
    return sum(len(row) for row in text.splitlines(keepends=True)[: line - 1]) + column0


def line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def fill_result(mutant: Mutant, result: dict | None, coverage: dict[str, list[str]]) -> None:
    """A mutant's status, tests and time from its entry in results.json (None: another shard's);
    ``coverage``: the tests that call each function (history.coverage)."""
    if result is None:
        mutant.reason = ANOTHER_SHARD
        return
    mutant.status = result["status"]
    mutant.covered_by = list(coverage.get(result["function"], []))
    failures = result.get("failures", [])
    if failures:
        mutant.killed_by, mutant.killing_requirements = [failures[0][0]], list(failures[0][1])
    mutant.duration_s = result.get("seconds")
    mutant.tests_completed = result.get("tests_run")
    mutant.reason = result.get("reason", "")


# --- the Stryker report ------------------------------------------------------------------------


def fault_descriptions() -> dict[str, str]:
    return {fault.id: f"{fault.id}: {fault.description}" for fault in FAULTS}


def stryker_report(
    mutants: list[Mutant],
    sources: dict[str, str],
    durations: dict[str, float],
    config: dict,
    performance: dict[str, float],
    framework: dict | None = None,
) -> dict:
    descriptions = fault_descriptions()
    files: dict[str, dict] = {
        path: {"language": "python", "source": source, "mutants": []} for path, source in sources.items()
    }
    for mutant in mutants:
        if mutant.path not in files:
            continue
        entry = {
            "id": mutant.name,
            "mutatorName": mutant.operator,
            "description": descriptions.get(mutant.operator, f"mutmut operator {mutant.operator}"),
            "replacement": mutant.replacement,
            "location": {
                "start": {"line": mutant.start[0], "column": mutant.start[1]},
                "end": {"line": mutant.end[0], "column": mutant.end[1]},
            },
            "status": mutant.status,
            "coveredBy": mutant.covered_by,
        }
        if mutant.killed_by:
            entry["killedBy"] = mutant.killed_by
        if mutant.duration_s:
            entry["duration"] = round(mutant.duration_s * 1000)
        if mutant.tests_completed is not None:
            entry["testsCompleted"] = mutant.tests_completed
        if mutant.problem or mutant.reason or mutant.triage:
            entry["statusReason"] = mutant.problem or (
                f"equivalent (triaged): {mutant.triage}" if mutant.triage else mutant.reason
            )
        files[mutant.path]["mutants"].append(entry)
    test_files: dict[str, dict] = defaultdict(lambda: {"tests": []})
    for test_id in sorted(durations):
        test_file, _, test_name = test_id.partition("::")
        test_files[test_file]["tests"].append({"id": test_id, "name": test_name or test_id})
    return {
        "schemaVersion": "2",
        "thresholds": THRESHOLDS,
        "config": config,
        "files": files,
        "testFiles": dict(test_files),
        "performance": {phase: round(seconds * 1000) for phase, seconds in performance.items()},
        "framework": framework
        or {
            "name": "attnspec's mutation engine",
            "dependencies": {"attnspec fault catalogue": ", ".join(f.id for f in FAULTS)},
        },
        "system": {"ci": bool(os.environ.get("CI")), "cpu": {"logicalCores": os.cpu_count() or 1}},
    }
