"""The kill matrix: which requirements' properties kill each catalogue fault, and how fast.

A campaign stops a mutant's run at its first failing test, except for the catalogue mutants when
the kill matrix is on: those run every test that executes their lines (engine.py; any other test
runs the mutated function as in the clean run, which passed), skipping, once they have failed, a
test whose requirements and attention path the fault's row already holds (from the mutant itself or
its siblings).  Each failing test is one line [test, requirement ids, seconds, attention path], and a
cell (fault, requirement) holds the fastest failing test of that requirement that ran over the
fault's mutants.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..faults import FAULTS

Matrix = dict[str, dict[str, float]]  # fault id -> requirement id -> seconds of the fastest kill
FAULT_IDS = {fault.id for fault in FAULTS}
Paths = dict[str, set[str]]  # fault id -> attention paths ("explicit", "tiled") whose tests killed it


def failures_by_fault(mutants: list, results: dict) -> dict[str, list[list]]:
    """Each catalogue fault's failing-test lines over its killed mutants (report Mutants; their
    lines in ``results["mutants"][name]["failures"]``)."""
    lines: dict[str, list[list]] = {}
    for mutant in mutants:
        if mutant.operator in FAULT_IDS and mutant.status == "Killed":
            lines.setdefault(mutant.operator, []).extend(results["mutants"][mutant.name]["failures"])
    return lines


def kill_cells(failures_by_fault: dict[str, list[list]]) -> tuple[Matrix, Paths]:
    """The matrix's cells from each fault's failing-test lines (one row per fault given, even empty)."""
    cells: Matrix = {}
    paths: Paths = {}
    for fault_id, failures in failures_by_fault.items():
        row = cells.setdefault(fault_id, {})
        on = paths.setdefault(fault_id, set())
        for _test, requirements, seconds, path in failures:
            for rid in requirements:
                row[rid] = min(row.get(rid, float("inf")), float(seconds))
            if path:
                on.add(path)
    return cells, paths


def write_matrix(
    cells: Matrix,
    paths: Paths,
    out_dir: Path,
    root: Path,
    checked: set[str] | None = None,
    into: Path | None = None,
) -> str:
    """kill-matrix.json and kill-matrix.png in ``out_dir`` (written into ``into`` when given: a folder
    whose files then replace out_dir's); returns the terminal table.  The heatmap is drawn again only
    when what it shows changed (2 s of matplotlib, most of an incremental campaign's report when no
    catalogue mutant ran)."""
    into = into or out_dir
    shown = [cells, [(f.id, f.description, sorted(f.kills)) for f in FAULTS]]
    drawn = hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:16]
    saved_path, heatmap = out_dir / "kill-matrix.json", out_dir / "kill-matrix.png"
    try:
        unchanged = heatmap.exists() and json.loads(saved_path.read_text()).get("heatmap") == drawn
    except (OSError, ValueError):
        unchanged = False
    table = matrix_table(cells, paths, checked)
    if unchanged or write_heatmap(cells, into / heatmap.name):
        table += f"\n  heatmap: {heatmap.relative_to(root) if heatmap.is_relative_to(root) else heatmap}"
    saved = {"requirements": cells, "paths": {fault: sorted(on) for fault, on in paths.items()}}
    saved["heatmap"] = drawn  # a digest of what kill-matrix.png shows, written once it is drawn
    (into / saved_path.name).write_text(json.dumps(saved, indent=1, sort_keys=True))
    return table


def matrix_table(matrix: Matrix, paths: Paths, checked: set[str] | None = None) -> str:
    """One line per fault: the requirements that kill it, fastest first, and the attention paths
    on which it was killed ('-': only by tests that run on no particular path).  '!' marks an
    expected requirement (per the catalogue; only those in ``checked`` when given: the ones whose
    properties ran for the target) that did not kill it, or a fault killed on some attention
    paths but not on all of them."""
    every_path = set().union(*paths.values())
    lines = ["kill matrix (requirement: seconds of its fastest failing test; paths that killed it):"]
    for fault in FAULTS:
        row = matrix.get(fault.id)
        if row is None:
            continue
        kills = "  ".join(f"{rid} {s:.2f}s" for rid, s in sorted(row.items(), key=lambda kv: kv[1]))
        missed = [rid for rid in fault.kills if rid not in row and (checked is None or rid in checked)]
        note = f"   ! expected but not killing: {', '.join(missed)}" if missed else ""
        killed_on = paths.get(fault.id, set())
        if killed_on and killed_on != every_path:
            note += f"   ! not killed on: {', '.join(sorted(every_path - killed_on))}"
        on = ", ".join(sorted(killed_on)) or "-"
        lines.append(f"  {fault.id:<4} {len(row):2d} requirements  [{on}]  {kills or 'NONE'}{note}")
    return "\n".join(lines)


def write_heatmap(matrix: Matrix, path: Path) -> bool:
    """PNG heatmap fault x requirement (colour: seconds to kill; blank: no kill; dot: expected).
    Returns False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm
    except ImportError:
        return False
    faults = [f for f in FAULTS if f.id in matrix]
    requirements = sorted(
        {rid for row in matrix.values() for rid in row} | {r for f in faults for r in f.kills}
    )
    fastest = 0.005  # the colour scale's floor: a kill in 0.000 s is drawn as 5 ms
    grid = [[max(matrix[f.id].get(rid, float("nan")), fastest) for rid in requirements] for f in faults]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(requirements) + 2), 0.45 * len(faults) + 1.8))
    image = ax.imshow(grid, cmap="viridis_r", norm=LogNorm(vmin=fastest, vmax=10), aspect="auto")
    for i, fault in enumerate(faults):
        for j, rid in enumerate(requirements):
            if rid in fault.kills:
                ax.plot(
                    j, i, marker="o", markersize=3, color="red" if rid not in matrix[fault.id] else "white"
                )
    ax.set_xticks(range(len(requirements)), requirements, rotation=90, fontsize=8)
    ax.set_yticks(
        range(len(faults)), [f"{f.id} {f.description.split(' (')[0][:44]}" for f in faults], fontsize=8
    )
    ax.set_title(
        "catalogue faults killed by requirement (colour: seconds to kill; dot: expected)", fontsize=9
    )
    fig.colorbar(image, ax=ax, label="seconds of the fastest failing test")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
