"""Read a finished campaign's workspace, write the Stryker report, print the summary, decide the gate.

Inputs (all in the workspace): mutmut's `mutants/<file>.py.meta` (the mutants of each file),
`mutants/<file>.py.spans` (line span of every generated function in the mutated file), the
driver's tags.json (which operator made each mutant) and the engine's results.json (each mutant's
status, covering tests and failing tests; each test's duration).

Locations come from a diff: the unmutated copy of the function (`..._mutmut_orig`) and the
mutant (`..._mutmut_<i>`) are read out of the mutated file, the common prefix and suffix are
cut off, and what is left of the original is found in the original source file.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import mutmut
from mutmut.mutation.diff_apply import generated_function_names
from mutmut.utils.format_utils import orig_function_and_class_names_from_key

from .catalogue import FAULTS, FAULTS_BY_ID
from .history import coverage as tests_by_function

UNDETECTED = ("Survived", "NoCoverage")  # what the gate calls a survivor
ANOTHER_SHARD = "run by another shard"  # the reason of a shard report's Pending mutants
THRESHOLDS = {"high": 80, "low": 60}
TRIAGE_FILE = Path(__file__).resolve().parent / "triage.toml"


@dataclass
class Mutant:
    name: str  # mutmut's mutant name, e.g. attnspec.impl.masks.x_attention_mask__mutmut_3
    path: str  # source file relative to the workspace root, e.g. attnspec/impl/masks.py
    operator: str  # mutmut operator name (swap_op, number, ...) or catalogue fault id (F1..F16)
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


def read_span(lines: list[str], span: list[int]) -> str:
    return "".join(lines[span[0] - 1 : span[1]])


def locate(mutant: Mutant, source: str, original_text: str, mutant_text: str, node: list[int] | None) -> None:
    """Fill mutant.start/end/replacement/diff from the two versions of its function."""
    offsets = []
    found = source.find(original_text) if original_text else -1
    while found >= 0:
        offsets.append(found)
        found = source.find(original_text, found + 1)
    if node:  # several identical functions: take the one holding the replayed node
        offsets = [o for o in offsets if line_column(source, o)[0] <= node[0]] or offsets
        offsets = offsets[-1:]
    if len(offsets) != 1:
        mutant.problem = "its function was not found in the original source"
        return
    offset = offsets[0]
    node_span = None
    if node:
        node_span = (offset_of(source, *node[:2]) - offset, offset_of(source, *node[2:]) - offset)
    start, end, mutant.replacement = changed_span(original_text, mutant_text, node_span)
    mutant.start = line_column(source, offset + start)
    mutant.end = line_column(source, offset + end)
    if node and not (
        tuple(node[:2]) <= (mutant.start[0], mutant.start[1] - 1)
        and (mutant.end[0], mutant.end[1] - 1) <= tuple(node[2:])
    ):
        mutant.problem = f"the change at {mutant.start}-{mutant.end} lies outside the replayed node {node}"
    mutated_source = source[:offset] + mutant_text + source[offset + len(original_text) :]
    diff = difflib.unified_diff(
        source.splitlines(),
        mutated_source.splitlines(),
        f"a/{mutant.path}",
        f"b/{mutant.path}",
        n=1,
        lineterm="",
    )
    mutant.diff = "\n".join(diff)


# --- reading the workspace ---------------------------------------------------------------------


def read_mutants(workspace: Path, results: dict) -> tuple[list[Mutant], dict[str, str]]:
    """(mutants, {source path: original source}); ``results`` is the engine's results.json."""
    tags = json.loads((workspace / "tags.json").read_text(encoding="utf-8"))
    mutated_root = workspace / "mutants"
    coverage = tests_by_function(results["tests"])
    mutants: list[Mutant] = []
    sources: dict[str, str] = {}
    for meta_path in sorted(mutated_root.rglob("*.py.meta")):
        path = meta_path.relative_to(mutated_root).as_posix().removesuffix(".meta")
        names = list(json.loads(meta_path.read_text())["exit_code_by_key"])
        if not names:
            continue
        sources[path] = (workspace / path).read_text()
        spans = json.loads((mutated_root / f"{path}.spans").read_text())["spans"]
        lines = (mutated_root / path).read_text().splitlines(keepends=True)
        for name in names:
            tag = tags.get(name, {})
            mutant = Mutant(name=name, path=path, operator=tag.get("operator", "?"), status="Pending")
            fill_result(mutant, results["mutants"].get(name), coverage)
            if not tag:
                mutant.problem = "the driver's replay did not produce this mutant"
            original_name, generated_name = generated_function_names(name)
            plain_name = orig_function_and_class_names_from_key(name)[0]
            original_text, mutant_text = (
                read_span(lines, spans[generated]).replace(f"def {generated}(", f"def {plain_name}(", 1)
                for generated in (original_name, generated_name)
            )
            locate(mutant, sources[path], original_text, mutant_text, tag.get("node"))
            mutants.append(mutant)
    extra = set(tags) - {mutant.name for mutant in mutants}
    for name in sorted(extra):
        mutants.append(
            Mutant(
                name=name,
                path="?",
                operator=tags[name]["operator"],
                status="Pending",
                problem="replayed by the driver but not generated by mutmut",
            )
        )
    return mutants, sources


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
        if mutant.problem or mutant.reason:
            entry["statusReason"] = mutant.problem or mutant.reason
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
        "framework": {
            "name": "mutmut (mutants) and attnspec's engine (runner)",
            "version": mutmut.__version__,
            "dependencies": {"attnspec fault catalogue": ", ".join(f.id for f in FAULTS)},
        },
        "system": {"ci": bool(os.environ.get("CI")), "cpu": {"logicalCores": os.cpu_count() or 1}},
    }


# --- summary and gate --------------------------------------------------------------------------


@dataclass
class FaultResult:
    id: str
    status: str  # killed / survived / no site / timeout / ...
    mutants: list[Mutant]


def fault_results(mutants: list[Mutant]) -> list[FaultResult]:
    results = []
    for fault in FAULTS:
        own = [m for m in mutants if m.operator == fault.id]
        statuses = {m.status for m in own}
        if not own:
            status = "no site"
        elif statuses == {"Killed"}:
            status = "killed"
        elif statuses & set(UNDETECTED):
            status = "survived"
        else:
            status = "/".join(sorted(s.lower() for s in statuses - {"Killed"}))
        results.append(FaultResult(fault.id, status, own))
    return results


def load_triage(path: Path = TRIAGE_FILE) -> dict[str, dict]:
    if not path.exists():
        return {}
    entries = tomllib.loads(path.read_text()).get("survivor", [])
    for entry in entries:
        if not entry.get("mutant") or not entry.get("reason"):
            raise ValueError(f"{path}: every [[survivor]] needs a mutant and a reason, got {entry}")
    return {entry["mutant"]: entry for entry in entries}


def untriaged(mutant: Mutant, triage: dict[str, dict]) -> str:
    """'' if the survivor is triaged, else why not."""
    entry = triage.get(mutant.name)
    if entry is None:
        return "not triaged"
    if "replacement" in entry and entry["replacement"] != mutant.replacement:
        return f"stale triage entry (it expects replacement {entry['replacement']!r})"
    return ""


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def summarize(
    mutants: list[Mutant],
    campaign_info: dict,
    wall_s: float,
    report_path: Path,
    triage: dict[str, dict],
    min_strength: float | None = None,
) -> tuple[str, list[str]]:
    """(summary text, gate failures).  A shard's summary judges its own mutants: a fault whose
    mutants all ran in other shards is not a failure there (the merged report judges it)."""
    elsewhere = {m.name for m in mutants if m.reason == ANOTHER_SHARD}
    sharded = bool(elsewhere)
    mutants = [m for m in mutants if m.name not in elsewhere] if sharded else mutants
    count = defaultdict(int)
    for mutant in mutants:
        count[mutant.status] += 1
    total = len(mutants)
    killed, survived = count["Killed"], count["Survived"]
    other = total - killed - survived - count["Timeout"] - count["NoCoverage"]
    how = [campaign_info["mode"], f"{campaign_info['max_children']} workers"]
    how += [note for note in (campaign_info.get("shard"), campaign_info.get("reuse")) if note]
    out = [
        f"mutation campaign: {', '.join(how)}; mutants by mutmut {mutmut.__version__}",
        f"mutants {total}   killed {killed}   survived {survived}   timeout {count['Timeout']}   "
        f"no-tests {count['NoCoverage']}   other {other}",
        f"mutation score {percent(killed, total)} (killed/all)   "
        f"test strength {percent(killed, killed + survived)} (killed/(killed+survived))",
        f"wall time {wall_s:.0f} s   {total / wall_s if wall_s else 0:.2f} mutants/s",
        "",
        "catalogue faults:",
    ]
    failures: list[str] = []
    for fault, result in zip(FAULTS, fault_results(mutants), strict=True):
        if sharded and result.status == "no site":
            out.append(f"  {fault.id:<4} {'elsewhere':<9} {fault.description}  [in other shards or no site]")
            continue
        killers = sorted({r for m in result.mutants for r in m.killing_requirements})
        detail = f"{len(result.mutants)} mutant(s)"
        if killers:  # mutmut stops at the first failing test: these are the first killers only
            listed = (
                "" if set(killers) & set(fault.kills) else f"; the catalogue lists {', '.join(fault.kills)}"
            )
            detail += f", first failing test checks {', '.join(killers)}{listed}"
        out.append(f"  {fault.id:<4} {result.status:<9} {fault.description}  [{detail}]")
        for mutant in result.mutants:
            if mutant.status != "Killed":
                out.append(f"         {mutant.status}: {mutant.name} at {mutant.path}:{mutant.start[0]}")
        if result.status != "killed":
            failures.append(f"catalogue fault {fault.id} {result.status}")
    problems = [m for m in mutants if m.problem]
    if problems:
        out += ["", "tag/location problems (the replay disagrees with mutmut; the report is unreliable):"]
        out += [f"  {m.name}: {m.problem}" for m in problems]
        failures.append(f"{len(problems)} mutants could not be matched to their operator/location")
    survivors = []  # catalogue faults are judged above and cannot be triaged
    for mutant in mutants:
        if mutant.status in UNDETECTED and mutant.operator not in FAULTS_BY_ID:
            why = untriaged(mutant, triage)
            if why:
                survivors.append((mutant, why))
    out += ["", f"untriaged survivors: {len(survivors)}"]
    for mutant, why in survivors:
        out += [
            f"  {mutant.path}:{mutant.start[0]}:{mutant.start[1]}  {mutant.operator}  {mutant.name}  "
            f"[{mutant.status}, {why}]",
            *("    " + line for line in mutant.diff.splitlines()[2:]),
        ]
    if survivors:
        failures.append(f"{len(survivors)} untriaged survivors")
    used = {m.name for m in mutants if m.status in UNDETECTED}
    unused = sorted(set(triage) - used)
    if unused and campaign_info["mode"] == "full" and not sharded:  # a faults-only run makes none of them
        out += ["", "triage entries that match no survivor (remove them): " + ", ".join(unused)]
    strength = 100 * killed / (killed + survived) if killed + survived else 100.0
    if min_strength is not None and strength < min_strength:
        failures.append(f"test strength {strength:.1f}% < {min_strength}%")
    out += ["", f"report: {report_path}"]
    out.append("gate: " + ("passed" if not failures else "FAILED: " + "; ".join(failures)))
    return "\n".join(out), failures
