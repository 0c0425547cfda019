"""How well a check names the fault it fails: for each catalogue mutant a campaign killed with a
diagnosis in its plan (engine.diagnosed), whether the diagnosis named the fault the mutant injected."""

from __future__ import annotations

from collections import defaultdict


def diagnosis_rows(mutants: dict[str, dict]) -> dict[str, list[int]]:
    """fault -> [killed mutants whose diagnosis named it, killed mutants diagnosed], in catalogue order."""
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for entry in mutants.values():
        fault, named = entry.get("fault"), entry.get("diagnosed")
        if fault is None or entry.get("status") != "Killed" or named is None:
            continue
        rows[fault][1] += 1
        rows[fault][0] += isinstance(named, list) and fault in named
    return dict(sorted(rows.items(), key=lambda item: int(item[0][1:])))


def diagnosis_summary(mutants: dict[str, dict], floor: float | None) -> tuple[str, list[str]]:
    """(the lines of the summary, gate failures): the share of killed catalogue mutants whose fault
    the diagnosis named, per fault, failing under ``floor`` (a fraction); ("", []) without diagnoses."""
    rows = diagnosis_rows(mutants)
    named, total = sum(row[0] for row in rows.values()), sum(row[1] for row in rows.values())
    if not total:
        return "", []
    share = named / total
    missed = [f"{fault} {row[0]}/{row[1]}" for fault, row in rows.items() if row[0] < row[1]]
    lines = [
        f"diagnosis: the check names the injected fault for {named} of {total} killed catalogue mutants "
        f"({100 * share:.1f}%)",
        f"  not always named: {', '.join(missed)}" if missed else "  every fault named every time",
    ]
    failures = []
    if floor is not None and share < floor:
        failures.append(f"diagnosis accuracy {100 * share:.1f}% is under the floor {100 * floor:.1f}%")
        lines.append(f"  FAIL: {failures[-1]}")
    return "\n".join(lines), failures
