"""Conformance campaigns: the fault catalogue injected into someone else's attention code.

``python -m mutants run --target NAME`` (a built-in adapter whose code lives in an installed
package) or ``--source FILE --impl module:object`` (a user's file) grades the kit on that code:

1. the target's source files (an adapter's ``sources``, or FILE) are read where they are
   installed, never written: every catalogue mutant of them (mutants/sites.py) is written as a
   whole mutated module into a fresh workspace;
2. mutants/target_worker.py runs the kit against the unmutated target once, recording which
   test executes which line, then each mutant in a forked child against the tests that reach it;
3. the reports go to reports/<NAME>/: mutation-report.json (Stryker schema), index.html,
   mutation-summary.txt (every fault's status), kill-matrix.json/.png and fault-table.json (the
   row of the README's conformance table).  The workspace is removed, also on Ctrl-C.

Honest accounting: a fault without a site in the target says "no site"; a mutant that no property
executes is "not exercised", with what the target would have to expose for the kit to reach it;
a survivor fails the gate unless mutants/conformance-triage.toml lists it for this target with
the reason it is equivalent there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .catalogue import FAULTS
from .html import render
from .matrix import failures_by_fault, kill_cells, write_matrix
from .report import Mutant, percent, stryker_report, untriaged
from .sites import SiteMutant, mutants_in

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
TRIAGE_FILE = PACKAGE_DIR / "conformance-triage.toml"
CATALOGUE_FILE = PACKAGE_DIR / "catalogue.py"


class ConformanceError(RuntimeError):
    pass


@dataclass
class Source:
    module: str
    file: Path
    only: set[str] | None  # function qualnames, None for the whole module


def catalogue_fingerprint() -> str:
    """Which catalogue a table was measured with (its operators' source)."""
    return hashlib.sha256(CATALOGUE_FILE.read_bytes()).hexdigest()[:16]


def module_file(module: str) -> Path:
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError as error:
        raise ConformanceError(f"{module} is not installed ({error})") from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ConformanceError(f"{module} has no Python source file to mutate")
    return Path(spec.origin).resolve()


def target_sources(name: str) -> list[Source]:
    """The sources a built-in adapter declares."""
    from attnspec.properties import targets

    if name not in targets.ADAPTERS:
        raise ConformanceError(f"{name} is not a built-in adapter ({', '.join(targets.ADAPTERS)})")
    try:
        target = targets.load(name)
    except ModuleNotFoundError as error:
        raise ConformanceError(targets.missing_module_hint(name, error)) from None
    if not target.sources:
        raise ConformanceError(f"the {name} adapter declares no sources to mutate")
    found = []
    for spec in target.sources:
        module, _, only = spec.partition(":")
        found.append(Source(module, module_file(module), set(only.split(",")) if only else None))
    return found


def file_source(file: str, impl: str) -> Source:
    """FILE as a module: the --impl module when it is that file, else its dotted path from here."""
    path = Path(file).resolve()
    if not path.is_file():
        raise ConformanceError(f"--source {file}: no such file")
    module = impl.partition(":")[0]
    sys.path.insert(0, os.getcwd())
    try:
        if module_file(module) == path:
            return Source(module, path, None)
    except ConformanceError:
        pass
    try:
        dotted = path.relative_to(Path.cwd()).with_suffix("").as_posix().replace("/", ".")
    except ValueError:
        raise ConformanceError(
            f"--source {file} lies outside the current directory: run from above it"
        ) from None
    return Source(dotted, path, None)


def shown_path(source: Source) -> str:
    """The file as reports show it: its module's path inside its package."""
    return source.module.replace(".", "/") + ".py"


def report_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


# --- running ------------------------------------------------------------------------------------


def worker_env(impl: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MUTANT_UNDER_TEST", None)
    paths = [str(REPO_ROOT), os.getcwd(), env.get("PYTHONPATH", "")]
    env.update(
        ATTNSPEC_IMPL=impl,
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HYPOTHESIS_PROFILE="mutation",
        ATTNSPEC_DEVICE="cpu",  # forked workers cannot share a CUDA context
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
    )
    return env


def run_worker(workspace: Path, impl: str) -> dict:
    command = [sys.executable, "-m", "mutants.target_worker", str(workspace)]
    process = subprocess.Popen(command, env=worker_env(impl), start_new_session=True)
    try:
        process.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
                process.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
    results_file = workspace / "results.json"
    if not results_file.exists():
        raise ConformanceError(f"the test runner exited with {process.returncode} and wrote no results")
    results = json.loads(results_file.read_text())
    if "error" in results:
        raise ConformanceError(results["error"])
    return results


def write_plan(
    workspace: Path, sources: list[Source], mutants: list[SiteMutant], select: str, children: int
) -> None:
    import attnspec.properties as properties

    properties_dir = Path(properties.__file__).resolve().parent
    (workspace / "sources").mkdir()
    planned = []
    for mutant in mutants:
        file = workspace / "sources" / f"{mutant.name}.py"
        file.write_text(mutant.source, encoding="utf-8")
        planned.append(
            {
                "name": mutant.name,
                "module": mutant.module,
                "qualname": mutant.qualname,
                "file": str(file),
                "lines": list(mutant.lines),
            }
        )
    plan = {
        "properties": str(properties_dir),
        "rootdir": str(properties_dir.parent),
        "select": select,
        "max_children": children,
        "modules": {source.module: str(source.file) for source in sources},
        "mutants": planned,
    }
    (workspace / "plan.json").write_text(json.dumps(plan, indent=1))


# --- reporting ----------------------------------------------------------------------------------


def load_triage(target: str, path: Path = TRIAGE_FILE) -> dict[str, dict]:
    if not path.exists():
        return {}
    entries = tomllib.loads(path.read_text()).get("survivor", [])
    for entry in entries:
        if not entry.get("target") or not entry.get("mutant") or not entry.get("reason"):
            raise ConformanceError(
                f"{path}: every [[survivor]] needs a target, a mutant and a reason: {entry}"
            )
    return {entry["mutant"]: entry for entry in entries if target in targets_of(entry)}


def targets_of(entry: dict) -> list[str]:
    """A triage entry's targets: one name, or a list of them (a family's layer and model adapters)."""
    return entry["target"] if isinstance(entry["target"], list) else [entry["target"]]


def as_report_mutants(mutants: list[SiteMutant], results: dict) -> list[Mutant]:
    made = []
    for site in mutants:
        result = results["mutants"].get(site.name, {"status": "Pending", "failures": [], "tests": []})
        failures = result.get("failures", [])
        made.append(
            Mutant(
                name=site.name,
                path=site.path,
                operator=site.fault,
                status=result["status"],
                start=site.start,
                end=site.end,
                replacement=site.replacement,
                diff=site.diff,
                covered_by=result.get("tests", []),
                killed_by=[f[0] for f in failures],
                killing_requirements=sorted({r for f in failures for r in f[1]}),
                duration_s=result.get("duration"),
                problem=result.get("reason", ""),
            )
        )
    return made


def fault_rows(mutants: list[Mutant], triage: dict[str, dict]) -> dict[str, dict]:
    """Per fault: sites, mutants, killed, survived, triaged, not exercised, other, and a status."""
    rows = {}
    for fault in FAULTS:
        own = [m for m in mutants if m.operator == fault.id]
        survived = [m for m in own if m.status == "Survived"]
        triaged = [m for m in survived if not untriaged(m, triage)]
        row = {
            "sites": len({(m.path, m.start[0]) for m in own}),
            "mutants": len(own),
            "killed": sum(m.status == "Killed" for m in own),
            "survived": len(survived),
            "triaged": len(triaged),
            "not_exercised": sum(m.status == "NoCoverage" for m in own),
        }
        row["other"] = row["mutants"] - row["killed"] - row["survived"] - row["not_exercised"]
        if not own:
            status = "no site"
        elif row["not_exercised"] == row["mutants"]:
            status = "not exercised"
        elif row["survived"] > row["triaged"] or row["other"]:
            status = "survived" if row["survived"] > row["triaged"] else "not killed"
        elif row["killed"]:
            status = "killed"
        else:
            status = "equivalent"
        row["status"] = status
        rows[fault.id] = row
    return rows


def summary_text(
    name: str, mutants: list[Mutant], rows: dict, triage: dict, wall_s: float, report: Path
) -> tuple[str, list[str]]:
    killed = sum(m.status == "Killed" for m in mutants)
    survived = sum(m.status == "Survived" for m in mutants)
    out = [
        f"conformance campaign: {name}, {len(mutants)} catalogue mutants in {wall_s:.0f} s",
        f"killed {killed}   survived {survived}   "
        f"not exercised {sum(m.status == 'NoCoverage' for m in mutants)}   "
        f"test strength {percent(killed, killed + survived)} (killed/(killed+survived))",
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
            detail += f", {row['killed']} killed by {', '.join(killers)}"
        out.append(f"  {fault.id:<4} {row['status']:<13} {fault.description}  [{detail}]")
        for mutant in own:
            where = f"{mutant.path}:{mutant.start[0]}"
            if mutant.status == "NoCoverage":
                out.append(
                    f"         not exercised: {mutant.name} at {where} (no property runs this line; "
                    f"the kit reaches {fault.id} through {fault.reached_through})"
                )
            elif mutant.status == "Survived":
                why = untriaged(mutant, triage)
                if not why:
                    reason = triage[mutant.name]["reason"]
                    out.append(f"         survived, triaged: {mutant.name} at {where}: {reason}")
                else:
                    out.append(f"         SURVIVED ({why}): {mutant.name} at {where}")
                    out += ["           " + line for line in mutant.diff.splitlines()[2:]]
            elif mutant.status != "Killed":
                out.append(f"         {mutant.status}: {mutant.name} at {where} {mutant.problem}")
        if row["status"] in ("survived", "not killed"):
            failures.append(f"{fault.id} {row['status']}")
    stale = sorted(set(triage) - {m.name for m in mutants if m.status == "Survived"})
    if stale:
        out += ["", "triage entries that match no survivor (remove them): " + ", ".join(stale)]
    out += ["", f"report: {report}"]
    out.append("gate: " + ("passed" if not failures else "FAILED: " + "; ".join(failures)))
    return "\n".join(out), failures


def requirement_order(rid: str) -> tuple[str, int]:
    prefix, _, number = rid.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (rid, 0)


def write_reports(
    name: str, sources: list[Source], mutants: list[Mutant], results: dict, wall_s: float, root: Path
) -> int:
    out_dir = root / "reports" / report_name(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    texts = {shown_path(s): s.file.read_text(encoding="utf-8") for s in sources}
    performance = {"setup": 0.0, "initialRun": results["clean_s"], "mutation": results["mutation_s"]}
    config = {"target": name, "mode": "conformance", "sources": {shown_path(s): str(s.file) for s in sources}}
    report = stryker_report(mutants, texts, results["duration_by_test"], config, performance)
    report["framework"] = {
        "name": "attnspec conformance",
        "dependencies": {"attnspec fault catalogue": ", ".join(f.id for f in FAULTS)},
    }
    report_path = out_dir / "mutation-report.json"
    report_path.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    (out_dir / "index.html").write_text(render(report), encoding="utf-8")
    triage = load_triage(name)
    rows = fault_rows(mutants, triage)
    text, failures = summary_text(name, mutants, rows, triage, wall_s, report_path.relative_to(root))
    cells, paths = kill_cells(failures_by_fault(mutants, results))
    text += "\n\n" + write_matrix(cells, paths, out_dir, root, set(results.get("requirements_run", [])))
    print(text, flush=True)
    (out_dir / "mutation-summary.txt").write_text(text + "\n")
    (out_dir / "fault-table.json").write_text(
        json.dumps(
            {"target": name, "catalogue": catalogue_fingerprint(), "seconds": round(wall_s), "faults": rows},
            indent=1,
        )
    )
    return 1 if failures else 0


def run(
    name: str,
    sources: list[Source],
    impl: str,
    *,
    children: int,
    select: str = "",
    keep: bool = False,
    root: Path = REPO_ROOT,
) -> int:
    """One conformance campaign; returns the gate's exit status (0 passed, 1 failed)."""
    started = time.monotonic()
    mutants: list[SiteMutant] = []
    for source in sources:
        mutants += mutants_in(
            source.file.read_text(encoding="utf-8"), source.module, shown_path(source), source.only
        )
    faults = ", ".join(f.id for f in FAULTS if any(m.fault == f.id for m in mutants))
    files = ", ".join(s.module + ("" if s.only is None else f" ({len(s.only)} functions)") for s in sources)
    print(f"{name}: {len(mutants)} catalogue mutants of {faults} in {files}", flush=True)
    workspace = Path(tempfile.mkdtemp(prefix="attnspec-conformance-"))
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        write_plan(workspace, sources, mutants, select, children)
        results = run_worker(workspace, impl)
        reported = as_report_mutants(mutants, results)
        return write_reports(name, sources, reported, results, time.monotonic() - started, root)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if keep:
            print(f"workspace kept at {workspace}")
        else:
            shutil.rmtree(workspace, ignore_errors=True)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
