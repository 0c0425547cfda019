"""The kill matrix: which requirements' properties kill each catalogue fault, and how fast.

mutmut stops a mutant's run at its first failing test, so after the campaign every catalogue
mutant is run once more against every test that reaches it (in mutmut's mutated copy of the
workspace, selected by MUTANT_UNDER_TEST; matrix_worker.py forks one child per mutant from one warm
process).  The kill recorder logs each failing test with its requirement ids and duration, and
skips a test once all its requirements have killed the mutant.  A cell
(fault, requirement) holds the fastest failing test of that requirement over the fault's mutants.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from mutmut.utils.format_utils import mangled_name_from_mutant_name

from .catalogue import FAULTS

Matrix = dict[str, dict[str, float]]  # fault id -> requirement id -> seconds of the fastest kill
Paths = dict[str, set[str]]  # fault id -> attention paths ("explicit", "tiled") whose tests killed it
WORKER = "attnspec_matrix_worker.py"  # matrix_worker.py, as copied into mutmut's copy of the workspace


def matrix_plan(workspace: Path, names: list[str], workers: int) -> dict:
    """The worker's plan: per mutant, the tests that mutmut's coverage run saw call its function (its
    stats in mutants/mutmut-stats.json), the meta tests left out (they check no requirement), fastest
    first, and their clean-run seconds."""
    stats = json.loads((workspace / "mutants" / "mutmut-stats.json").read_text(encoding="utf-8"))
    duration = stats["duration_by_test"]
    mutants = []
    for name in names:
        covering = stats["tests_by_mangled_function_name"].get(mangled_name_from_mutant_name(name), [])
        tests = sorted(
            (t for t in covering if "/meta_tests/" not in t), key=lambda t: (duration.get(t, 0.0), t)
        )
        if tests:
            mutants.append(
                {"name": name, "tests": tests, "budget_s": sum(duration.get(t, 0.0) for t in tests)}
            )
    return {"workers": max(1, workers), "mutants": mutants}


def kill_matrix(
    workspace: Path, env: dict[str, str], mutants_by_fault: dict[str, list[str]], workers: int
) -> tuple[Matrix, Paths]:
    """Run every catalogue mutant against the tests that reach it (matrix_worker.py); ``env`` is the
    campaign's environment.  Also returns, per fault, the attention paths on which a test killed it."""
    out_dir = workspace / "matrix"
    out_dir.mkdir(exist_ok=True)
    names = [name for names in mutants_by_fault.values() for name in names]
    plan = workspace / "matrix-plan.json"
    plan.write_text(json.dumps(matrix_plan(workspace, names, workers)), encoding="utf-8")
    shutil.copy(Path(__file__).with_name("matrix_worker.py"), workspace / "mutants" / WORKER)
    env = dict(env, ATTNSPEC_KILLS_DIR=str(out_dir))
    command = [sys.executable, WORKER, str(plan)]
    with open(workspace / "matrix.log", "w") as log:
        done = subprocess.run(
            command, cwd=workspace / "mutants", env=env, stdout=log, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        tail = (workspace / "matrix.log").read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError("the kill matrix failed:\n" + "\n".join(tail))
    matrix: Matrix = {fault_id: {} for fault_id in mutants_by_fault}
    paths: Paths = {fault_id: set() for fault_id in mutants_by_fault}
    for fault_id, fault_mutants in mutants_by_fault.items():
        for name in fault_mutants:
            log = out_dir / f"{name}.tsv"
            lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
            for line in lines:
                _test, requirements, seconds, path = line.split("\t")
                for rid in filter(None, requirements.split(",")):
                    cell = matrix[fault_id]
                    cell[rid] = min(cell.get(rid, float("inf")), float(seconds))
                if path:
                    paths[fault_id].add(path)
    return matrix, paths


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
