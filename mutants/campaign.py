"""Run one mutation campaign in a fresh workspace outside the working tree.

mutmut writes its working copy to ./mutants/ (a hard-coded name that is also this package's),
and stale copies re-attach old results to new mutant numbers.  So every campaign:

1. copies impl/, specs/ and properties/ into a new temporary directory, laid out as the installed
   package (attnspec/impl, attnspec/specs, attnspec/properties: the properties import them as
   attnspec.*, and mutmut names a mutant after its file's path), with a generated
   pyproject.toml that configures mutmut and pytest for the campaign, plus four helpers from
   this package (the catalogue, the driver, the engine and its history);
2. runs the driver there in its own process group: it installs the operators, has mutmut generate
   the mutants, and runs the engine (engine.py: one pytest session, one fork per mutant) with
   OMP_NUM_THREADS=1 (forked children cannot hang on torch's thread pool) and Hypothesis's
   `mutation` profile;
3. polls the engine's progress file for a progress line;
4. leaves the workspace's results.json to report.py, and deletes the workspace afterwards, also on
   Ctrl-C or SIGTERM (the whole process group of the driver is stopped first).

Nothing is written to the working tree except reports/ (git-ignored).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .catalogue import FAULTS
from .outputs import HISTORY

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
COPIED_DIRS = ("impl", "specs", "properties")  # each copied to attnspec/<name> in the workspace
PACKAGE = "attnspec"
# Meta tests that run the kit in a subprocess: they never reach a mutant (the tests that cover one are
# those whose in-process calls reach it), so in a campaign they would only cost minutes of its clean run.
SUBPROCESS_TESTS = (
    "meta_tests/test_conformance.py",
    "meta_tests/test_capability_subsets.py",
    "meta_tests/test_broken_kernels.py",
    "meta_tests/test_zoo.py",
    "meta_tests/test_declared.py",
    "meta_tests/test_broken_modules.py",
    "meta_tests/test_broken_backwards.py",
    "meta_tests/test_peers.py",  # runs no kit, but reads README.md and examples/, which a workspace lacks
)
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
HELPERS = {  # file in this package -> module name in the workspace
    "catalogue.py": "attnspec_catalogue.py",
    "driver.py": "attnspec_driver.py",
    "engine.py": "attnspec_engine.py",
    "history.py": "attnspec_history.py",
}
PROGRESS_EVERY_S = 30  # how often a non-TTY gets a progress line (a TTY: every second)
POLL_S = 0.2  # how often the driver is checked on: its end is seen this late at most


class CampaignError(RuntimeError):
    pass


@dataclass
class Campaign:
    root: Path
    faults_only: bool
    max_children: int
    matrix: bool = True  # catalogue mutants run every covering test (the kill matrix)
    shard: tuple[int, int] | None = None  # (i, n): only the mutants of shard i of n
    incremental: bool = False  # reuse reports/mutation-results.json where nothing changed
    workspace: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="attnspec-mutation-")))
    started: float = field(default_factory=time.monotonic)
    tests_started: float | None = None  # when the engine began testing mutants
    finished: float | None = None

    @property
    def mode(self) -> str:
        return "faults-only" if self.faults_only else "full"

    @property
    def reports(self) -> Path:
        return self.root / "reports"


# --- workspace ---------------------------------------------------------------------------------


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def pyproject_text(root: Path) -> str:
    """[tool.mutmut] for the campaign's mutant generation, and the project's own pytest options."""
    pyproject = root / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text()) if pyproject.exists() else {}
    pytest_options = dict(project.get("tool", {}).get("pytest", {}).get("ini_options", {}))
    pytest_options.update(testpaths=[f"{PACKAGE}/properties"], pythonpath=["."], addopts="--strict-markers")
    mutmut_options = {
        "source_paths": [f"{PACKAGE}/impl/"],
        "also_copy": [f"{PACKAGE}/__init__.py", f"{PACKAGE}/specs/", f"{PACKAGE}/properties/"],
        "use_git_change_detection": False,
    }
    lines = ["# generated by `python -m mutants` for one campaign", "[tool.mutmut]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in mutmut_options.items()]
    lines += ["", "[tool.pytest.ini_options]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in pytest_options.items()]
    return "\n".join(lines) + "\n"


def prepare_workspace(campaign: Campaign) -> None:
    for name in COPIED_DIRS:
        if not (campaign.root / name).is_dir():
            raise CampaignError(f"{campaign.root / name} is missing")
        shutil.copytree(campaign.root / name, campaign.workspace / PACKAGE / name, ignore=IGNORED)
    shutil.copy(REPO_ROOT / PACKAGE / "__init__.py", campaign.workspace / PACKAGE / "__init__.py")
    for source, target in HELPERS.items():
        shutil.copy(PACKAGE_DIR / source, campaign.workspace / target)
    (campaign.workspace / "pyproject.toml").write_text(pyproject_text(campaign.root))
    (campaign.workspace / "faults.json").write_text(json.dumps([fault.id for fault in FAULTS]))
    previous = campaign.reports / HISTORY
    plan = {
        "workspace": str(campaign.workspace),
        "workers": max(1, campaign.max_children),
        "matrix": campaign.matrix,
        "shard": list(campaign.shard) if campaign.shard else None,
        "incremental": campaign.incremental,
        "previous": str(previous) if campaign.incremental and previous.exists() else None,
        "progress": str(campaign.workspace / "progress.json"),
        "results": str(campaign.workspace / "results.json"),
        # --tb=native: pytest's own traceback style parses each frame's file, and a mutated file holds
        # every mutant of its functions (seconds per failing test)
        "pytest_args": ["--rootdir=.", "-q", "--no-header", "--tb=native", "-p", "no:cacheprovider"]
        + ["-p", "no:randomly"]
        + [f"--ignore={PACKAGE}/properties/{path}" for path in SUBPROCESS_TESTS]
        + [f"{PACKAGE}/properties"],
    }
    (campaign.workspace / "plan.json").write_text(json.dumps(plan, indent=1))


def driver_env(workspace: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MUTANT_UNDER_TEST", None)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HYPOTHESIS_PROFILE="mutation",  # the profile conftest.py loads whenever MUTANT_UNDER_TEST is set
        ATTNSPEC_DEVICE="cpu",  # forked workers cannot share a CUDA context
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",  # the same set orders, so the same test ids, from campaign to campaign
    )
    return env


# --- running and watching ----------------------------------------------------------------------


def read_progress(workspace: Path) -> dict | None:
    """The engine's progress file (None before the engine starts, or while it is being replaced)."""
    try:
        return json.loads((workspace / "progress.json").read_text())
    except (OSError, ValueError):
        return None


def progress_line(campaign: Campaign, progress: dict | None) -> str:
    elapsed = int(time.monotonic() - campaign.started)
    clock = f"{elapsed // 60}m{elapsed % 60:02d}s"
    if progress is None:
        return f"[generating mutants {clock}]"
    counts, total = progress["counts"], progress["total"]
    if progress["phase"] == "clean run":
        done = f"{counts['tested']}/" if "tested" in counts else ""  # split over workers: no count
        return f"[clean run {clock}] {done}{total} tests"
    done = sum(counts.values())
    line = f"[testing mutants {clock}] {done}/{total}  " + "  ".join(
        f"{status.lower()} {counts.get(status, 0)}"
        for status in ("Killed", "Survived", "Timeout", "NoCoverage")
    )
    if campaign.tests_started is not None and done:
        elapsed_s = time.monotonic() - campaign.tests_started
        rate = done / elapsed_s if elapsed_s > 0 else 0.0
        eta = (total - done) / rate if rate else 0.0
        line += f"  {rate:.2f}/s  ETA {int(eta) // 60}m{int(eta) % 60:02d}s"
    return line


def watch(campaign: Campaign, process: subprocess.Popen) -> None:
    tty = sys.stdout.isatty()
    last_print = 0.0
    while process.poll() is None:
        time.sleep(POLL_S)
        progress = read_progress(campaign.workspace)
        if campaign.tests_started is None and progress and progress["phase"] == "testing mutants":
            campaign.tests_started = time.monotonic()
        if time.monotonic() - last_print >= (1.0 if tty else PROGRESS_EVERY_S):
            line = progress_line(campaign, progress)
            print("\r" + line.ljust(110) if tty else line, end="" if tty else "\n", flush=True)
            last_print = time.monotonic()
    if tty:
        print()
    if campaign.tests_started is None:
        campaign.tests_started = time.monotonic()


def stop(process: subprocess.Popen) -> None:
    """Stop the driver and everything it forked (its own process group)."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_campaign(campaign: Campaign) -> dict:
    """Generate and test the mutants in the prepared workspace: the engine's results, or
    CampaignError when the campaign could not run."""
    log = campaign.workspace / "driver.log"
    command = [sys.executable, "attnspec_driver.py", "--max-children", str(campaign.max_children)]
    if campaign.faults_only:
        command.append("--faults-only")
    command.append("plan.json")
    with open(log, "w") as out:
        process = subprocess.Popen(
            command,
            cwd=campaign.workspace,
            env=driver_env(campaign.workspace),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        watch(campaign, process)
    finally:
        stop(process)
    campaign.finished = time.monotonic()
    campaign.reports.mkdir(exist_ok=True)
    shutil.copy(log, campaign.reports / "mutation-campaign.log")
    results_path = campaign.workspace / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    if process.returncode != 0 or "error" in results or not results:
        tail = "\n".join(log.read_text(errors="replace").replace("\r", "\n").splitlines()[-40:])
        why = results.get("error") or f"the driver exited with {process.returncode}"
        raise CampaignError(f"{why}; last lines of its log:\n{tail}")
    return results


@contextmanager
def workspace(campaign: Campaign, keep: bool) -> Iterator[Path]:
    """The prepared workspace; removed on the way out, also on Ctrl-C or SIGTERM (KeyboardInterrupt)."""
    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        prepare_workspace(campaign)
        yield campaign.workspace
    finally:
        signal.signal(signal.SIGTERM, previous)
        if keep:
            print(f"workspace kept at {campaign.workspace}")
        else:
            shutil.rmtree(campaign.workspace, ignore_errors=True)
