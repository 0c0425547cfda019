"""A catalogue campaign on any code: the catalogue's mutants at their sites in the given files,
judged by a test source, with every report.

The campaigns on code outside impl/ all run here, on the one engine:
- ``attnspec mutate SOURCE... -- pytest ...``: the user's own pytest session (one warm process);
- ``attnspec mutate SOURCE... -- COMMAND``: any other test command (one process per run);
- ``attnspec mutate --kit --impl module:OBJ [SOURCE...]``: the kit's properties run against the
  target (a conformance campaign; a built-in adapter brings its own sources), which is also what
  the repository's ``python -m campaigns run --target NAME`` runs.

1. The files are read where they are, never written: every catalogue mutant of them (or, with
   ``since``, of the functions changed since a git ref) is written as a whole mutated module into a
   fresh workspace (a temporary folder), with the plan of the campaign;
2. the engine runs in its own process group (worker.py, forked from this process: no second
   interpreter to start, src/attnspec/runner/forking.py): the generator is the code swap of
   generators/sites.py, the test source the pytest session or the command (suites/);
3. the reports go to the output folder: mutation-report.json (Stryker schema) and index.html,
   mutation-summary.txt (also printed), junit.xml (one case per fault), annotations.txt (GitHub
   workflow commands, printed under GitHub Actions), mutation-results.json (what ``incremental``
   reuses), and with the kit the kill matrix: written into a temporary folder in it, then moved
   over the previous ones as a set, mutation-results.json last.  The workspace is removed, also on
   Ctrl-C (one left by a campaign killed outright, engine and all, is removed by the next); an
   interrupted campaign leaves the reports' folder as it was, or, interrupted as they are moved in,
   this run's reports whole.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from attnspec.runner import folders

from . import history, suggest
from .engine import CLEAN_TIMEOUT_S
from .errors import CampaignError, Interrupted
from .faults import FAULTS, source_digest
from .generators import annotated
from .generators.evidence import evidence
from .generators.sites import SiteMutant, changed_since, function_spans, mutants_in
from .reports.annotations import annotations
from .reports.html import render
from .reports.junit import junit_xml
from .reports.matrix import failures_by_fault, kill_cells, write_matrix
from .reports.stryker import Mutant, stryker_report
from .reports.summary import fault_rows, summary_text
from .sources import SKIPPED_DIRS, Source, is_test_module
from .triage import TriageError, inline
from .watch import Watch, engine_env, interrupted, interrupts_held, log_tail

RESULTS = "mutation-results.json"
REPORT = "mutation-report.json"
STAGING = ".attnspec-tmp-"  # the reports' temporary folder, in their folder: OUT/.attnspec-tmp-XXXXXXXX
FAULT_ORDER = [fault.id for fault in FAULTS]
WORKSPACE_PREFIX = "attnspec-mutate-"  # a campaign's temporary folder, in the system's temp folder
STALE_AFTER_S = 60.0  # a workspace this old whose lock is free has no campaign left
CONFIG_FILES = ("pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini", "conftest.py")


@dataclass
class Settings:
    name: str  # the campaign's name (a target, or the user's command)
    sources: list[Source]
    suite: str  # "kit", "pytest" or "command"
    arguments: list[str]  # pytest's arguments, or the command
    out_dir: Path
    impl: str = ""  # the kit's target
    workers: int = 2
    select: str = ""  # the kit's properties that pytest -k selects
    triage: dict = field(default_factory=dict)  # from a triage file; inline comments are added
    since: str | None = None
    incremental: bool = False
    keep: bool = False
    cwd: Path = field(default_factory=Path.cwd)
    github: bool = False  # print the annotations (also when GITHUB_ACTIONS is set)
    table: bool = False  # write fault-table.json (the repository's conformance table)
    clean_timeout_s: float = CLEAN_TIMEOUT_S  # a test of the clean run running longer stops the campaign
    suggest_targets: tuple[str, ...] = ()  # --impl beside a test command: the targets suggest.py runs
    kill_matrix: bool = True  # the kit's campaign fills the kill matrix (else: each mutant's first killer)
    require_graded: bool = False  # --strict: a fault present in the code but not graded fails the gate

    @property
    def strict(self) -> bool:
        """The user's own tests: a mutant no test executes counts as undetected."""
        return self.suite != "kit"

    @property
    def title(self) -> str:
        if self.suite == "kit":
            return f"conformance campaign: {self.name}"
        return f"mutation campaign of `{self.name}`"


# --- planning ----------------------------------------------------------------------------------


def plan_mutants(settings: Settings) -> tuple[list[SiteMutant], dict[str, dict], str, dict[str, str]]:
    """The mutants, the spans of the functions they mutate, the digest of the files' module-level
    code, and the files' texts (by shown path)."""
    mutants: list[SiteMutant] = []
    functions: dict[str, dict] = {}
    context: list[str] = []
    texts: dict[str, str] = {}
    for source in settings.sources:
        text = source.file.read_text(encoding="utf-8")
        texts[source.shown] = text
        spans = function_spans(text)
        only = source.only
        if settings.since is not None:
            try:
                changed = changed_since(settings.since, source.file, spans)
            except ValueError as error:
                raise CampaignError(str(error)) from None
            only = changed if only is None else only & changed
        made = mutants_in(text, source.module, source.shown, only)
        refused = annotated.refusals(text, source.module, source.shown, only)
        if refused:  # an annotation that grades nothing where the user pointed: before anything runs
            more = f" (and {len(refused) - 1} more such annotations)" if len(refused) > 1 else ""
            raise CampaignError(refused[0] + more)
        mutants += made
        lines = text.splitlines(keepends=True)
        rest = list(lines)
        for qualname, (first, last, body) in spans.items():
            key = f"{source.module}.{qualname}"
            function_text = "".join(lines[first - 1 : last])
            rest[first - 1 : last] = [""] * (last - first + 1)
            if any(m.qualname == qualname for m in made):
                functions[key] = {
                    "file": str(source.file),
                    "first": first,
                    "last": last,
                    "body": body,
                    "digest": history.code_digest(function_text),
                }
        context.append(f"{source.module}\n{''.join(rest)}")
    return mutants, functions, history.digest(*context), texts


def support_texts(settings: Settings, mutated: set[Path]) -> list[str]:
    """What the tests' results depend on beside their own modules and the mutated files: the kit's
    support code, or the project's configuration and non-test Python files."""
    if settings.suite == "kit":
        import attnspec

        kit = Path(attnspec.__file__).resolve().parent
        files = sorted(
            p
            for folder in ("protocol", "kit", "specs", "adapters")
            for p in (kit / folder).rglob("*.py")
            if not p.name.startswith("test_")
        )
        return [settings.impl, settings.select] + [
            f"{p.relative_to(kit)}\n{p.read_text(encoding='utf-8')}" for p in files
        ]
    files = []
    reports = Path(os.path.relpath(settings.out_dir, settings.cwd.resolve())).parts  # no support: --out
    for path in sorted(settings.cwd.rglob("*")):
        relative = path.relative_to(settings.cwd)
        if any(part.startswith(".") or part in SKIPPED_DIRS for part in relative.parts[:-1]):
            continue
        if reports and reports[0] != ".." and relative.parts[: len(reports)] == reports:
            continue
        if not path.is_file() or path.resolve() in mutated:
            continue
        if (path.suffix == ".py" and not is_test_module(path.name)) or path.name in CONFIG_FILES:
            files.append(f"{relative.as_posix()}\n{path.read_text(encoding='utf-8', errors='replace')}")
    return [" ".join(settings.arguments), *files]


def kit_arguments(settings: Settings) -> list[str]:
    import attnspec.kit.properties as properties

    folder = Path(properties.__file__).resolve().parent
    arguments = [str(folder), "-c", os.devnull, f"--rootdir={folder.parent}", "-p", "no:cacheprovider"]
    # --tb=native: pytest's own traceback style parses each frame's source (seconds per failing test)
    arguments += ["-q", "--no-header", "--tb=native", "-p", "no:warnings", f"--impl={settings.impl}"]
    return arguments + (["-k", settings.select] if settings.select else [])


def pytest_arguments(settings: Settings) -> list[str]:
    """The user's pytest arguments, with nothing written into their project (no cache)."""
    return [*settings.arguments, "-p", "no:cacheprovider", "-q", "--no-header", "--tb=native"]


def write_plan(
    settings: Settings, workspace: Path, mutants: list[SiteMutant], functions: dict, context: str
) -> None:
    (workspace / "sources").mkdir()
    planned = []
    originals: dict[str, str] = {}  # file -> its text
    for mutant in mutants:
        file = workspace / "sources" / f"{mutant.name}.py"
        file.write_text(mutant.source, encoding="utf-8")
        function = f"{mutant.module}.{mutant.qualname}"
        span = functions[function]
        if span["file"] not in originals:
            originals[span["file"]] = Path(span["file"]).read_text(encoding="utf-8")
        original = originals[span["file"]]
        planned.append(
            {
                "name": mutant.name,
                "fault": mutant.fault,
                "module": mutant.module,
                "qualname": mutant.qualname,
                "function": function,
                "file": str(file),
                "original": functions[function]["file"],
                "lines": list(mutant.lines),
                # the statements a test must run for the mutant to act (None: its signature, every call)
                "site": history.function_site(original, mutant.source, span["first"], span["last"]),
                "code": history.digest(functions[function]["digest"], mutant.diff.split("\n", 2)[-1]),
            }
        )
    previous = settings.out_dir / RESULTS
    mutated = {source.file.resolve() for source in settings.sources}
    plan = {
        "workspace": str(workspace),
        "cwd": str(settings.cwd),
        "suite": settings.suite,
        "workers": max(1, settings.workers),
        "matrix": settings.suite == "kit" and settings.kill_matrix,
        "min_timeout_s": 60.0 if settings.suite == "kit" else 30.0,
        "clean_timeout_s": settings.clean_timeout_s,
        "incremental": settings.incremental,
        "previous": str(previous) if settings.incremental and previous.exists() else None,
        "history": str(previous) if previous.exists() else None,  # its killers are tried first
        "progress": str(workspace / "progress.json"),
        "results": str(workspace / "results.json"),
        "mutants": planned,
        "functions": functions,
        "context": context,
        "support": support_texts(settings, mutated),
        "paths": sorted({str(s.root) for s in settings.sources if s.root} | {str(settings.cwd)}),
    }
    if settings.suite == "kit":
        plan["pytest_args"] = kit_arguments(settings)
    elif settings.suite == "pytest":
        plan["pytest_args"] = pytest_arguments(settings)
    else:
        plan["command"] = settings.arguments
        named = [settings.cwd / a for a in settings.arguments[1:]]  # the files the command names
        plan["test_files"] = [
            str(p.resolve()) for p in named if p.is_file() and p.resolve().is_relative_to(settings.cwd)
        ]
    (workspace / "plan.json").write_text(json.dumps(plan, indent=1))


def worker_env(settings: Settings, workspace: Path, paths: list[str]) -> dict[str, str]:
    import attnspec

    kit = str(Path(attnspec.__file__).resolve().parent.parent)
    extra = {
        "PYTHONPATH": os.pathsep.join([kit, *paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    }
    if settings.suite == "kit":
        extra.update(ATTNSPEC_IMPL=settings.impl, HYPOTHESIS_PROFILE="mutation")
    # whatever Hypothesis keeps (its example database, its cache of the code's constants: .hypothesis/
    # where it runs) goes to the workspace, not the user's project, and goes with it
    extra.update(HYPOTHESIS_STORAGE_DIRECTORY=str(workspace / "hypothesis"))
    return engine_env(**extra)


# --- reporting ----------------------------------------------------------------------------------


def report_mutants(mutants: list[SiteMutant], results: dict, triage: dict) -> list[Mutant]:
    coverage = history.coverage(results["tests"])
    made = []
    for site in mutants:
        result = results["mutants"].get(site.name, {"status": "Pending", "failures": []})
        failures = result.get("failures", [])
        covering = coverage.get(result.get("function", ""), [])
        reaching = history.reaching(result, covering, results["tests"]) if "site" in result else []
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
                covered_by=reaching,
                killed_by=[f[0] for f in failures],
                killing_requirements=sorted({r for f in failures for r in f[1]}),
                duration_s=result.get("seconds"),
                tests_completed=result.get("tests_run"),
                reason=result.get("reason", ""),
                triage=triage.get(site.name, {}).get("reason", ""),
            )
        )
    return made


def selection_note(phases: dict) -> str:
    """What test selection saved: the tests the mutants ran against every test on every mutant."""
    runs, every = phases["test_runs"], phases["test_runs_all"]
    return (
        f"test selection: {runs} test runs instead of {every} (every test on every mutant run), "
        f"{phases['tests_s']:.1f} s of tests instead of ~{phases['all_tests_s']:.0f} s"
    )


def git_prefix(cwd: Path) -> str:
    """The path from the repository's root to ``cwd`` (annotations name files from the root)."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    relative = os.path.relpath(cwd.resolve(), Path(top).resolve())
    return "" if relative == "." else Path(relative).as_posix()


def triage_of(settings: Settings, texts: dict[str, str], mutants: list[SiteMutant]) -> dict:
    """The triage file's entries and the sources' inline triage comments, by mutant."""
    triage = dict(settings.triage)
    shown = [
        Mutant(name=m.name, path=m.path, operator=m.fault, status="", start=m.start, end=m.end)
        for m in mutants
    ]
    try:
        triage.update(inline(texts, shown))
    except TriageError as error:
        raise CampaignError(str(error)) from None
    return triage


def write_reports(
    settings: Settings,
    mutants: list[SiteMutant],
    texts: dict[str, str],
    results: dict,
    wall_s: float,
    triage: dict,
    suggested: list[str] | None = None,
    suggested_test: str | None = None,
) -> int:
    """Every report written into a temporary folder in the reports' folder (the same file system), then
    moved over the previous ones as a set (mutation-results.json, what --incremental reads, last),
    interrupts held back meanwhile; then the summary printed.  An interrupt raises Interrupted, saying
    what the reports' folder holds."""
    out_dir = settings.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / f"{STAGING}{secrets.token_hex(4)}"
    had_reports = any((out_dir / name).exists() for name in (RESULTS, REPORT))
    moved = False
    try:
        staging.mkdir()
        text, commands, code = report_files(
            settings, mutants, texts, results, wall_s, triage, suggested, suggested_test, staging
        )
        with interrupts_held():
            move_into(staging, out_dir)
            moved = True
        if settings.github or os.environ.get("GITHUB_ACTIONS") == "true":
            print("\n".join(commands), flush=True)
        print(text, flush=True)
        return code
    except KeyboardInterrupt:
        raise Interrupted(reports_left(shown_path(out_dir, settings.cwd), had_reports, moved)) from None
    finally:
        with interrupts_held():
            shutil.rmtree(staging, ignore_errors=True)


def move_into(staging: Path, out_dir: Path) -> None:
    """Each file of ``staging`` moved over its namesake in ``out_dir``, mutation-results.json last."""
    for name in sorted(os.listdir(staging), key=lambda name: name == RESULTS):
        os.replace(staging / name, out_dir / name)


def reports_left(shown: Path, had_reports: bool, moved: bool) -> str:
    """What an interrupt while the reports were written leaves in their folder (``shown``)."""
    if moved:
        return f"this run's reports are complete in {shown} (its summary in mutation-summary.txt)"
    if had_reports:
        return f"the reports of the previous run in {shown} are as they were (none of this run's written)"
    return "no report written, nothing left behind (the workspace is removed)"


def shown_path(path: Path, cwd: Path) -> Path:
    """``path`` as the user is shown it: from ``cwd`` when it is inside it."""
    return path.relative_to(cwd) if path.is_relative_to(cwd) else path


def report_files(
    settings: Settings,
    mutants: list[SiteMutant],
    texts: dict[str, str],
    results: dict,
    wall_s: float,
    triage: dict,
    suggested: list[str] | None,
    suggested_test: str | None,
    into: Path,
) -> tuple[str, list[str], int]:
    """Every report written into ``into`` (whose files then replace the reports' folder's): the
    summary, the GitHub annotations and the exit status."""
    out_dir = settings.out_dir
    reported = report_mutants(mutants, results, triage)
    durations = {test: entry["duration"] for test, entry in results["tests"].items()}
    phases = results["phases"]
    performance = {
        "setup": max(0.0, wall_s - phases["clean_s"] - phases["mutants_s"]),
        "initialRun": phases["clean_s"],
    }
    performance["mutation"] = phases["mutants_s"]
    config = {
        "campaign": settings.name,
        "mode": settings.suite,
        "sources": {s.shown: str(s.file) for s in settings.sources},
    }
    if settings.since:
        config["since"] = settings.since
    framework = {
        "name": "attnspec mutate" if settings.strict else "attnspec conformance",
        "dependencies": {"attnspec fault catalogue": ", ".join(f.id for f in FAULTS)},
    }
    report = stryker_report(reported, texts, durations, config, performance, framework)
    (into / REPORT).write_text(json.dumps(report, indent=1, ensure_ascii=False))
    rows = fault_rows(reported, triage, settings.strict, present_faults(settings, texts, mutants))
    page = render(report, rows, {m.name: m.diff for m in reported})
    (into / "index.html").write_text(page, encoding="utf-8")
    (into / RESULTS).write_text(json.dumps(results), encoding="utf-8")
    where = shown_path(out_dir / REPORT, settings.cwd)
    tests_run = f"{phases['tests_traced']} of {len(results['tests'])} tests run"
    mutants_run = f"{phases['mutants_run']} run, {phases['mutants_reused']} reused"
    clean, mutation = f"{phases['clean_s']:.1f} s", f"{phases['mutants_s']:.1f} s"
    notes = [f"clean run {clean} ({tests_run}), mutants {mutation} ({mutants_run})"]
    if phases.get("test_runs_all"):
        notes.append(selection_note(phases))
    if results.get("not_reused"):
        notes.append(f"nothing reused: {results['not_reused']}")
    text, failures = summary_text(
        settings.title, reported, rows, triage, wall_s, where, settings.strict, notes, settings.require_graded
    )
    # the requirements whose properties ran for the target (not all skipped): the matrix expects those
    ran = [entry for entry in results["tests"].values() if not entry.get("skipped")]
    requirements = {r for entry in ran for r in entry.get("requirements", [])}
    if settings.suite == "kit":
        cells, paths = kill_cells(failures_by_fault(reported, results))
        text += "\n\n" + write_matrix(cells, paths, out_dir, settings.cwd, requirements, into)
    if suggested:
        text += "\n" + "\n".join(suggested)
    if suggested_test is not None:  # the tests, and the conftest.py that keeps pytest out of --out
        for name, file_text in suggest.out_files(settings, suggested_test).items():
            (into / name).write_text(file_text, encoding="utf-8")
    (into / "junit.xml").write_text(
        junit_xml(settings.title, reported, rows, triage, wall_s, settings.strict)
    )
    commands = annotations(reported, triage, settings.strict, git_prefix(settings.cwd))
    (into / "annotations.txt").write_text("".join(c + "\n" for c in commands))
    ungraded = ungraded_sources(settings, reported)
    if ungraded:  # the first thing said: the score above means nothing for these files
        text = "\n".join(ungraded) + "\n\n" + text
    (into / "mutation-summary.txt").write_text(text + "\n")
    if settings.table:
        table = {
            "target": settings.name,
            "catalogue": catalogue_fingerprint(),
            "seconds": round(wall_s),
            "faults": rows,
        }
        (into / "fault-table.json").write_text(json.dumps(table, indent=1))
    return text, commands, 2 if ungraded else 1 if failures else 0


def present_faults(settings: Settings, texts: dict[str, str], mutants: list[SiteMutant]) -> dict[str, str]:
    """The faults no mutant was placed for whose feature the sources visibly have: fault id ->
    "file:line (`code`)" of the first line that shows it (generators/evidence.py).  Only over whole
    files: a campaign on some functions (--since, module:functions) grades what it chose."""
    if settings.since is not None or any(source.only is not None for source in settings.sources):
        return {}
    sited = {m.fault for m in mutants}
    present: dict[str, str] = {}
    for source in settings.sources:
        for fault, seen in evidence(texts[source.shown]).items():
            if fault not in sited and fault not in present:
                code = seen.code if len(seen.code) <= 60 else seen.code[:57] + "..."
                present[fault] = f"{source.shown}:{seen.line} (`{code}`)"
    return present


def ungraded_sources(settings: Settings, mutants: list[Mutant]) -> list[str]:
    """One line for each source of a user's campaign that no test ran a line of (every mutant in it
    not exercised): its grade would be meaningless, and so the campaign's (exit code 2)."""
    if not settings.strict:
        return []  # the kit's campaigns say what a target would have to expose instead
    lines = []
    for source in settings.sources:
        own = [m for m in mutants if m.path == source.shown]
        if not own or any(m.status != "NoCoverage" for m in own):
            continue
        why = "the tests never import it, or never call its functions"
        if source.root is not None and not source.file.is_relative_to(settings.cwd.resolve()):  # a file
            why = (
                f"it is outside the project ({settings.cwd}), so the tests import their own copy if any; "
                "run attnspec mutate from the folder the tests run in, on the file they import"
            )
        lines.append(f"NOT GRADED: no test ran a line of {source.shown}: {why}")
    return lines


def catalogue_fingerprint() -> str:
    """Which catalogue a table was measured with (its operators' source)."""
    return source_digest()


# --- running ------------------------------------------------------------------------------------


def run(settings: Settings) -> int:
    """One campaign; its gate's exit status (0 passed, 1 failed).  Raises CampaignError when it
    cannot run (its reports' folder cannot be written, or another campaign writes there now: both
    found before anything runs), KeyboardInterrupt when interrupted (the workspace is removed either
    way; Interrupted once the reports are written, saying what their folder holds)."""
    started = time.monotonic()
    writable_home(settings.out_dir)
    with one_campaign_in(settings.out_dir, shown_path(settings.out_dir, settings.cwd)):
        return _run(settings, started)


def writable_home(out_dir: Path) -> Path:
    """The folder out_dir is (or will be) made in: its nearest existing ancestor, or itself; a
    CampaignError when no file can be written there (read-only, not a folder, no permission)."""
    home = out_dir
    while not home.exists() and home != home.parent:
        home = home.parent
    try:
        if not home.is_dir():
            raise NotADirectoryError(f"{home} is not a folder")
        probe = tempfile.NamedTemporaryFile(dir=home, prefix=".attnspec-probe-")
        probe.close()
    except OSError as error:
        why = error.strerror or str(error)
        raise CampaignError(
            f"the reports cannot be written into {out_dir}: {why} (give --out a writable folder)"
        ) from None
    return home


@contextmanager
def one_campaign_in(out_dir: Path, shown: Path | None = None) -> Iterator[None]:
    """Holds the reports' folder ``out_dir`` (folders.hold: made if it is not there, and removed at the
    end if still empty) while the campaign runs: a second campaign with the same --out refuses at once,
    one with another --out runs.  The engine, forked, holds it too, until it ends."""
    with interrupts_held():  # the folders made are removed below, whatever comes
        try:
            holding = folders.hold(out_dir)
        except folders.Busy:
            raise CampaignError(
                f"another attnspec mutate is running in {shown or out_dir} (its reports' folder): wait for "
                "it to end, or give this one another --out"
            ) from None
        except OSError as error:
            raise CampaignError(
                f"the reports cannot be written into {out_dir}: {error.strerror or error} (give --out a "
                "writable folder)"
            ) from None
    try:
        yield
    finally:
        with interrupts_held():
            holding.release()


def _run(settings: Settings, started: float) -> int:
    mutants, functions, context, texts = plan_mutants(settings)
    files = ", ".join(
        s.shown + ("" if s.only is None else f" ({len(s.only)} functions)") for s in settings.sources
    )
    if not mutants:
        if settings.since is not None:
            print(f"nothing to mutate: no function with a catalogue site changed since {settings.since}")
            return 0
        raise CampaignError(f"nothing to mutate: no catalogue fault has a site in {files}")
    faults = ", ".join(f.id for f in FAULTS if any(m.fault == f.id for m in mutants))
    scope = f" (functions changed since {settings.since})" if settings.since else ""
    print(f"{settings.name}: {len(mutants)} catalogue mutants of {faults} in {files}{scope}", flush=True)
    triage = triage_of(settings, texts, mutants)  # a malformed comment stops it before anything runs
    results = run_engine(settings, mutants, functions, context, started)
    suggested, test = suggestions(settings, mutants, functions, context, results, triage, texts)
    wall_s = time.monotonic() - started
    return write_reports(settings, mutants, texts, results, wall_s, triage, suggested, test)


def suggestions(
    settings: Settings,
    mutants: list[SiteMutant],
    functions: dict,
    context: str,
    results: dict,
    triage: dict,
    texts: dict[str, str],
) -> tuple[list[str], str | None]:
    """The summary's lines on the tests that would kill the survivors (suggest.py), and with targets
    the text of the suggested tests' module (written with the reports), else None."""
    if not settings.strict:
        return [], None
    left = suggest.survivors(mutants, results, triage)
    if not settings.suggest_targets:
        faults = sorted({m.fault for m in left}, key=lambda f: FAULT_ORDER.index(f))
        return suggest.without_target(faults), None
    if not left:
        return [], None

    def run_kit(kit: Settings, pending: list[SiteMutant]) -> dict:
        return run_engine(kit, pending, functions, context, time.monotonic())

    found, notes = suggest.find(settings, left, run_kit)
    if not any(s.checks for s in found):
        return suggest.summary_lines(found, notes, None), None
    where = {m.name: f"{m.path}:{m.lines[0]}" for m in mutants}
    command = "attnspec mutate " + " ".join(
        [*(s.shown for s in settings.sources), *(f"--impl {t}" for t in settings.suggest_targets)]
    )
    test = suggest.module_text(found, f"{command} -- {settings.name}", where)
    written = str(shown_path(settings.out_dir / suggest.file_name(settings), settings.cwd))
    return suggest.summary_lines(found, notes, written, suggest.no_conftest(settings)), test


def run_engine(
    settings: Settings, mutants: list[SiteMutant], functions: dict, context: str, started: float
) -> dict:
    """The engine's results for ``mutants`` under the settings' test source, run in a workspace of
    their own (removed afterwards, also on an interrupt)."""
    previous = signal.signal(signal.SIGTERM, interrupted)
    try:  # the workspace is locked while this campaign and its engine live (folders.locked_temporary)
        with folders.locked_temporary(WORKSPACE_PREFIX, keep=settings.keep) as workspace:
            try:
                return engine_results(settings, workspace, mutants, functions, context, started)
            finally:
                if settings.keep:
                    print(f"workspace kept at {workspace}")
    finally:
        signal.signal(signal.SIGTERM, previous)


def engine_results(
    settings: Settings,
    workspace: Path,
    mutants: list[SiteMutant],
    functions: dict,
    context: str,
    started: float,
) -> dict:
    """The engine run in ``workspace`` on the plan written there, followed; its results."""
    write_plan(settings, workspace, mutants, functions, context)
    plan = json.loads((workspace / "plan.json").read_text())
    watch = Watch(workspace, started)
    log = workspace / "engine.log"
    command = [sys.executable, "-m", "attnspec.mutation.worker", str(workspace)]
    env = worker_env(settings, workspace, plan["paths"])
    code = watch.run(command, env, log, cwd=settings.cwd, fork=True)
    results_path = workspace / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    if code != 0 or "error" in results or not results:
        why = results.get("error") or f"the engine exited with {code}"
        raise CampaignError(f"{why}; last lines of its log:\n{log_tail(log)}")
    return results


def collect_stale_workspaces(folder: Path | None = None, settle_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove the workspaces of campaigns that died without removing them (the campaign and its engine
    both killed with SIGKILL, a machine that lost power): each campaign holds a lock on its workspace
    while it or its engine lives (folders.collect_stale).  Returns those removed."""
    return folders.collect_stale(WORKSPACE_PREFIX, folder, settle_s)
