"""What a campaign leaves in reports/, from one run or from the merged results of its shards:

- mutation-report.json (Stryker's mutation-testing-report-schema) and index.html;
- mutation-summary.txt (also printed): counts, every catalogue fault's status, untriaged survivors,
  the gate, and the kill matrix with kill-matrix.json/.png;
- mutation-results.json: the engine's results (per test its coverage, duration and fingerprint,
  per mutant its status and failing tests), what ``--incremental`` reuses and ``merge`` combines.

``python -m campaigns merge DIR...`` takes the reports/ folders (or their mutation-report.json) of the
shards of one campaign, checks that they are the shards 1..n of the same code, and writes the
outputs of the whole campaign, with the gate applied to the merged result.
"""

from __future__ import annotations

import difflib
import json
from importlib import metadata
from pathlib import Path

from ..faults import FAULTS
from ..history import coverage as tests_by_function
from .diagnosis import diagnosis_summary
from .html import render
from .matrix import failures_by_fault, kill_cells, write_matrix
from .stryker import Mutant, fill_result, stryker_report
from .summary import summarize

HISTORY = "mutation-results.json"


class MergeError(ValueError):
    pass


def publish(
    out_dir: Path,
    root: Path,
    mutants: list[Mutant],
    sources: dict[str, str],
    results: dict,
    info: dict,
    performance: dict[str, float],
    wall_s: float,
    min_strength: float | None,
    triage: dict[str, dict],
    diagnosis_floor: float | None = None,
) -> int:
    """Write every output of a campaign to ``out_dir``; returns the gate's exit status (failing also
    where the diagnosis names fewer killed catalogue mutants' faults than ``diagnosis_floor``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    durations = {test: entry["duration"] for test, entry in results["tests"].items()}
    for mutant in mutants:  # kept with the results, for a merge of shards to show the same diffs
        if mutant.name in results["mutants"] and mutant.diff:
            results["mutants"][mutant.name]["diff"] = mutant.diff
    framework = {
        "name": "mutmut (mutants) and attnspec's engine (runner)",
        "version": metadata.version("mutmut"),
        "dependencies": {"attnspec fault catalogue": ", ".join(f.id for f in FAULTS)},
    }
    for mutant in mutants:
        mutant.triage = triage.get(mutant.name, {}).get("reason", "")
    report = stryker_report(mutants, sources, durations, info, performance, framework)
    (out_dir / HISTORY).write_text(json.dumps(results), encoding="utf-8")
    report_path = out_dir / "mutation-report.json"
    report_path.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    (out_dir / "index.html").write_text(render(report), encoding="utf-8")
    shown = report_path.relative_to(root) if report_path.is_relative_to(root) else report_path
    text, failures = summarize(mutants, info, wall_s, shown, triage, min_strength)
    diagnosis, missed = diagnosis_summary(results["mutants"], diagnosis_floor)
    text += f"\n\n{diagnosis}" if diagnosis else ""
    failures += missed
    if results.get("matrix"):  # the catalogue mutants ran every covering property
        cells, paths = kill_cells(failures_by_fault(mutants, results))
        text += "\n\n" + write_matrix(cells, paths, out_dir, root)
    print(text, flush=True)
    (out_dir / "mutation-summary.txt").write_text(text + "\n")
    return 1 if failures else 0


# --- merging shards ----------------------------------------------------------------------------


def report_dir(argument: str) -> Path:
    path = Path(argument)
    folder = path.parent if path.name == "mutation-report.json" else path
    for name in ("mutation-report.json", HISTORY):
        if not (folder / name).exists():
            raise MergeError(f"{folder} holds no {name}: give the reports/ folder of each shard")
    return folder


def from_stryker(path: str, source: str, entry: dict) -> Mutant:
    """A report mutant read back from its Stryker entry (its diff rebuilt from its location, for
    results that do not keep it)."""
    start = (entry["location"]["start"]["line"], entry["location"]["start"]["column"])
    end = (entry["location"]["end"]["line"], entry["location"]["end"]["column"])
    mutant = Mutant(
        name=entry["id"],
        path=path,
        operator=entry["mutatorName"],
        status=entry["status"],
        start=start,
        end=end,
        replacement=entry.get("replacement", ""),
    )
    lines = source.splitlines(keepends=True)
    first = sum(len(line) for line in lines[: start[0] - 1]) + start[1] - 1
    last = sum(len(line) for line in lines[: end[0] - 1]) + end[1] - 1
    mutated = source[:first] + mutant.replacement + source[last:]
    diff = difflib.unified_diff(
        source.splitlines(), mutated.splitlines(), f"a/{path}", f"b/{path}", n=1, lineterm=""
    )
    mutant.diff = "\n".join(diff)
    return mutant


def merge_results(shards: list[dict]) -> dict:
    """The results of the whole campaign from its shards' results (which must be its shards 1..n)."""
    counts = {tuple(s.get("shard") or (0, 0))[1] for s in shards}
    indices = sorted(tuple(s.get("shard") or (0, 0))[0] for s in shards)
    if len(counts) != 1 or 0 in counts or indices != list(range(1, len(shards) + 1)):
        found = ", ".join(f"{s.get('shard')}" for s in shards)
        raise MergeError(f"need the shards 1..n of one campaign, each once; got {found}")
    (count,) = counts
    if count != len(shards):
        raise MergeError(f"the campaign was split into {count} shards, {len(shards)} given")
    first = shards[0]
    for shard in shards[1:]:
        for key in ("fingerprints", "functions", "matrix"):
            if shard.get(key) != first.get(key):
                raise MergeError(f"shard {shard['shard']} ran other code or options ({key} differ)")
        if set(shard["tests"]) != set(first["tests"]):
            raise MergeError(f"shard {shard['shard']} ran other tests")
    mutants: dict[str, dict] = {}
    for shard in shards:
        for name, entry in shard["mutants"].items():
            if name in mutants:
                raise MergeError(f"{name} ran in two shards")
            mutants[name] = entry
    phases = {
        "clean_s": max(s["phases"]["clean_s"] for s in shards),
        "mutants_s": max(s["phases"]["mutants_s"] for s in shards),
        "mutants_run": sum(s["phases"]["mutants_run"] for s in shards),
        "mutants_reused": sum(s["phases"]["mutants_reused"] for s in shards),
        "tests_traced": max(s["phases"]["tests_traced"] for s in shards),
    }
    return dict(first, shard=None, mutants=mutants, phases=phases)


def merge(
    arguments: list[str],
    out_dir: Path,
    root: Path,
    min_strength: float | None,
    triage: dict[str, dict],
    diagnosis_floor: float | None = None,
) -> int:
    folders = [report_dir(a) for a in arguments]
    reports = [json.loads((f / "mutation-report.json").read_text(encoding="utf-8")) for f in folders]
    shards = [json.loads((f / HISTORY).read_text(encoding="utf-8")) for f in folders]
    results = merge_results(shards)
    files = reports[0]["files"]
    if any(r["files"].keys() != files.keys() for r in reports) or any(
        r["files"][p]["source"] != files[p]["source"] for r in reports for p in files
    ):
        raise MergeError("the shards' reports hold different sources")
    sources = {path: entry["source"] for path, entry in files.items()}
    coverage = tests_by_function(results["tests"])
    mutants = []
    for path, entry in files.items():
        for item in entry["mutants"]:
            mutant = from_stryker(path, sources[path], item)
            if item["id"] not in results["mutants"]:
                raise MergeError(f"no shard ran {item['id']}")
            fill_result(mutant, results["mutants"][item["id"]], coverage)
            mutant.diff = results["mutants"][item["id"]].get("diff", mutant.diff)
            mutants.append(mutant)
    missing = set(results["mutants"]) - {m.name for m in mutants}
    if missing:
        raise MergeError(f"{len(missing)} mutants of the results are in no report, e.g. {sorted(missing)[0]}")
    config = dict(reports[0].get("config", {}), shard=None, merged=len(shards))
    info = {
        "mode": config.get("mode", "full"),
        "max_children": config.get("max_children", 1),
        "shard": f"merged from {len(shards)} shards",
    }
    performance = {
        "setup": 0.0,
        "initialRun": results["phases"]["clean_s"],
        "mutation": results["phases"]["mutants_s"],
    }
    wall_s = results["phases"]["clean_s"] + results["phases"]["mutants_s"]
    return publish(
        out_dir,
        root,
        mutants,
        sources,
        results,
        info,
        performance,
        wall_s,
        min_strength,
        triage,
        diagnosis_floor,
    )
