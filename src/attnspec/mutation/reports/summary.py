"""The one-screen summaries and the gates: the impl/ campaign's (:func:`summarize`: every mutant,
mutmut's included, with the untriaged survivors) and a catalogue campaign's on any code
(:func:`fault_rows` and :func:`summary_text`: every fault's status, with the surviving diffs and
the triage reasons).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..faults import FAULTS, FAULTS_BY_ID, GENERIC
from ..triage import untriaged
from .stryker import ANOTHER_SHARD, UNDETECTED, Mutant


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


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


KERNELS_ONLY = "a fault of tiled kernels: impl/ has no online softmax (flash-ref and the Triton zoo have it)"


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
        f"mutation campaign: {', '.join(how)}; mutants by mutmut {metadata.version('mutmut')}",
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
        if fault.kernel_only and result.status == "no site":  # impl/ has no online softmax
            out.append(f"  {fault.id:<4} {'kernels':<9} {fault.description}  [{KERNELS_ONLY}]")
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


def fault_rows(
    mutants: list[Mutant],
    triage: dict[str, dict],
    strict: bool = False,
    present: dict[str, str] | None = None,
) -> dict[str, dict]:
    """Per fault: sites, mutants, killed, survived, triaged, not exercised, other, and a status.
    ``strict`` (a user's own tests): a mutant no test executes is a survivor too, unless triaged;
    the kit's campaigns say "not exercised" instead (the target does not expose that code).  A fault
    with no site is "not recognised" where ``present`` gives the line that shows its feature
    (generators/evidence.py), else "no site": the code has no such feature."""
    rows = {}
    present = present or {}
    for fault in FAULTS:
        own = [m for m in mutants if m.operator == fault.id]
        undetected = [m for m in own if m.status == "Survived" or (strict and m.status == "NoCoverage")]
        triaged = [m for m in undetected if not untriaged(m, triage)]
        row = {
            "sites": len({(m.path, m.start[0]) for m in own}),
            "mutants": len(own),
            "killed": sum(m.status == "Killed" for m in own),
            "survived": sum(m.status == "Survived" for m in own),
            "triaged": len(triaged),
            "not_exercised": sum(m.status == "NoCoverage" for m in own),
        }
        row["other"] = row["mutants"] - row["killed"] - row["survived"] - row["not_exercised"]
        if not own and fault.id in present:
            status = "not recognised"
            row["present"] = present[fault.id]
        elif not own:
            status = "no site"
        elif row["not_exercised"] == row["mutants"] and not (strict and len(undetected) > len(triaged)):
            status = "not exercised" if not strict else "equivalent"
        elif len(undetected) > len(triaged) or row["other"]:
            status = "survived" if len(undetected) > len(triaged) else "not killed"
        elif row["killed"]:
            status = "killed"
        else:
            status = "equivalent"
        row["status"] = status
        rows[fault.id] = row
    return rows


def summary_text(
    title: str,
    mutants: list[Mutant],
    rows: dict,
    triage: dict,
    wall_s: float,
    report: Path,
    strict: bool = False,
    notes: tuple[str, ...] = (),
    require_graded: bool = False,
) -> tuple[str, list[str]]:
    """The summary of a catalogue campaign (``title``: its first words) and its gate's failures.
    Killers are named by requirement when the tests check requirements (the kit), else by test.
    ``require_graded`` (``attnspec mutate --strict``): a fault present in the code but not graded
    (not recognised) fails the gate too; without it the summary's first line says so, and the gate
    judges what was graded."""
    killed = sum(m.status == "Killed" for m in mutants)
    survived = sum(m.status == "Survived" for m in mutants)
    not_run = sum(m.status == "NoCoverage" for m in mutants)
    undetected = survived + (not_run if strict else 0)
    unrecognised = [fault_id for fault_id, row in rows.items() if row["status"] == "not recognised"]
    graded = [
        fault_id for fault_id, row in rows.items() if row["status"] not in ("no site", "not recognised")
    ]
    out = []
    if unrecognised:  # what the score below cannot see comes first
        out += not_graded_lines(unrecognised, len(graded), require_graded) + [""]
    out += [
        f"{title}, {len(mutants)} catalogue mutants in {wall_s:.0f} s",
        f"killed {killed}   survived {survived}   not exercised {not_run}   "
        f"test strength {percent(killed, killed + undetected)} "
        f"(killed/(killed+{'undetected' if strict else 'survived'}))",
        *notes,
        "",
        "catalogue faults:",
    ]
    failures = []
    for fault in FAULTS:
        row = rows[fault.id]
        own = [m for m in mutants if m.operator == fault.id]
        detail = f"{row['mutants']} mutant(s) at {row['sites']} site(s)"
        if row["killed"]:
            killers = sorted({r for m in own for r in m.killing_requirements}, key=requirement_order)
            if not killers:
                killers = sorted({m.killed_by[0] for m in own if m.killed_by})
            detail += f", {row['killed']} killed by {', '.join(killers)}"
        if row["status"] == "not recognised":
            detail = f"present at {row['present']}, no mutant placed: {unplaceable_advice(fault.id)}"
            if require_graded:
                failures.append(f"{fault.id} present, not graded")
        out.append(f"  {fault.id:<4} {row['status']:<14} {fault.description}  [{detail}]")
        for mutant in own:
            where = f"{mutant.path}:{mutant.start[0]}"
            undetected_here = mutant.status == "Survived" or (strict and mutant.status == "NoCoverage")
            if undetected_here and not untriaged(mutant, triage):
                entry = triage[mutant.name]
                out.append(
                    f"         {mutant.status.lower()}, triaged equivalent: {mutant.name} at {where}: "
                    f"{entry['reason']}"
                )
            elif mutant.status == "NoCoverage":
                reach = "no test runs this line" if strict else "no property runs this line; "
                reach += "" if strict else f"the kit reaches {fault.id} through {fault.reached_through}"
                label = "NOT EXERCISED" if strict else "not exercised"
                out.append(f"         {label}: {mutant.name} at {where} ({reach})")
                if strict:
                    out += ["           " + line for line in mutant.diff.splitlines()[2:]]
            elif mutant.status == "Survived":
                out.append(f"         SURVIVED ({untriaged(mutant, triage)}): {mutant.name} at {where}")
                out += ["           " + line for line in mutant.diff.splitlines()[2:]]
            elif mutant.status != "Killed":
                why = mutant.problem or mutant.reason
                out.append(f"         {mutant.status}: {mutant.name} at {where} {why}")
        if row["status"] in ("survived", "not killed"):
            failures.append(f"{fault.id} {row['status']}")
    detected = {m.name for m in mutants if m.status == "Survived" or (strict and m.status == "NoCoverage")}
    stale = sorted(
        triage[name].get("source", name) if name.startswith("unused:") else name
        for name in set(triage) - detected
    )
    if stale:
        out += ["", "triage entries that match no survivor (remove them): " + ", ".join(stale)]
    if any(untriaged(m, triage) for m in mutants if m.name in detected):
        out += [
            "",
            "a survivor that cannot change what your code computes (equivalent) is triaged by a comment on "
            "its line: `# attnspec: equivalent F<n> -- why`",
        ]
    out += ["", f"report: {report}"]
    out.append("gate: " + ("passed" if not failures else "FAILED: " + "; ".join(failures)))
    return "\n".join(out), failures


def unplaceable_advice(fault_id: str) -> str:
    """What to do about a fault present in the code but not recognised: where it has generic edits, an
    annotation places them; where it has none, no annotation can (the campaign refuses one), and no
    triage comment applies either (one accepts a surviving mutant, and there is none): a test."""
    if fault_id in GENERIC:
        return f"end that line with `# attnspec: site {fault_id}` and the campaign grades it"
    return f"no annotation can place it (the fault has no generic edit): {by_hand(fault_id)}"


def by_hand(fault_id: str) -> str:
    """How to guard a fault no mutant can be placed for: a test, and what the kit checks it by."""
    kills = ", ".join(FAULTS_BY_ID[fault_id].kills)
    return (
        f"guard {fault_id} with a test of your own: the kit checks it as {kills} (`attnspec specs -v` "
        'names the properties; `attnspec.check(TARGET, "test_FILE.py::test_NAME")` runs one in a test)'
    )


def not_graded_lines(unrecognised: list[str], graded: int, require_graded: bool) -> list[str]:
    """The summary's first lines where faults present in the code were not graded: how many and which,
    then what to do about each kind."""
    count = len(unrecognised)
    faults = "fault present in the code was" if count == 1 else "faults present in the code were"
    gate = (
        "these fail the gate (--strict)"
        if require_graded
        else "the gate judges the graded ones (with --strict, these fail it)"
    )
    out = [
        f"NOT GRADED: {count} {faults} not graded ({', '.join(unrecognised)}): see below",
        f"  graded {graded} of the {graded + count} faults whose feature the code has; {gate}",
    ]
    placeable = [f for f in unrecognised if f in GENERIC]
    unplaceable = [f for f in unrecognised if f not in GENERIC]
    if placeable:
        out.append(
            f"  {', '.join(placeable)}: end the line shown below with `# attnspec: site F<n>` and the "
            "campaign grades it, or report the idiom"
        )
    if unplaceable:
        out.append(
            f"  {', '.join(unplaceable)}: no annotation can place {'it' if len(unplaceable) == 1 else 'them'}"
            " (no generic edit): guard each with a test of your own (below, what the kit checks it by), "
            "and report the idiom"
        )
    return out


def requirement_order(rid: str) -> tuple[str, int]:
    prefix, _, number = rid.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (rid, 0)
