"""Run one mutation campaign in a fresh workspace outside the working tree.

mutmut writes its working copy to ./mutants/ (a hard-coded name), and stale copies re-attach old
results to new mutant numbers.  So every campaign:

1. copies the package (src/attnspec, without its mutation engine) and the tests that grade impl
   (tests/: impl's own, the specification's and the kit's helpers', with their fixtures) into a new
   temporary directory, as attnspec/ and tests/ (mutmut names a mutant after its file's path:
   attnspec.impl.*), with a generated pyproject.toml that configures mutmut and pytest for the
   campaign, plus the mutation engine (attnspec/mutation) as the package ``attnspec_mutation``, so
   that nothing of the engine is imported from the copy mutmut makes;
2. runs mutmut's generator there in its own process group
   (src/attnspec/mutation/generators/mutmut_operators.py): it installs the operators, has mutmut
   generate the mutants, and runs the one engine (one pytest session, one fork per mutant) with
   OMP_NUM_THREADS=1 (forked children cannot hang on torch's thread pool) and Hypothesis's
   `mutation` profile;
3. polls the engine's progress file for a progress line (src/attnspec/mutation/watch.py);
4. leaves the workspace's results.json to the reports, and deletes the workspace afterwards, also
   on Ctrl-C or SIGTERM (the whole process group is stopped first).

Nothing is written to the working tree except reports/ (git-ignored).
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import attnspec.mutation as engine_package
from attnspec.mutation.faults import FAULTS
from attnspec.mutation.reports.outputs import HISTORY
from attnspec.mutation.watch import Watch, engine_env, interrupted, log_tail

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
PACKAGE = "attnspec"
KIT_PROPERTIES = f"{PACKAGE}/kit/properties"
# The repository's tests a campaign runs besides the kit's properties: those that grade impl in process
# (tests/fixtures: what they import).  Tests that run the kit in a subprocess never reach a mutant (the
# tests that cover one are those whose in-process calls reach it), so in a campaign they would only cost
# minutes of its clean run: tests/targets/ (the kit against outside targets) and these three.
GRADING = ("impl", "specs", "kit")  # folders of tests/ the campaign runs
TESTS = ("conftest.py", "__init__.py", *GRADING, "fixtures")  # what it copies
SUBPROCESS_TESTS = (
    "tests/kit/test_capability_subsets.py",
    "tests/kit/test_layer_declarations.py",
    "tests/kit/test_relations.py",
)
PYCACHE = ("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
IGNORED = shutil.ignore_patterns(*PYCACHE)
ENGINE = "attnspec_mutation"  # the engine's package, as the workspace names it
GENERATOR = f"{ENGINE}.generators.mutmut_operators"
TRIAGE_FILE = PACKAGE_DIR / "triage.toml"
DIAGNOSE = "attnspec.adapters.impl_target:named_faults"  # impl and its declared variants


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
    pytest_options.update(testpaths=[KIT_PROPERTIES], pythonpath=["."], addopts="--strict-markers")
    source = root / "src" / PACKAGE
    package = [path.name for path in source.iterdir() if path.name not in ("impl", "mutation", "__pycache__")]
    mutmut_options = {
        "source_paths": [f"{PACKAGE}/impl/"],
        "also_copy": [
            *(f"{PACKAGE}/{name}" + ("/" if (source / name).is_dir() else "") for name in sorted(package)),
            "tests/",
        ],
        "use_git_change_detection": False,
    }
    lines = ["# generated by `python -m campaigns` for one campaign", "[tool.mutmut]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in mutmut_options.items()]
    lines += ["", "[tool.pytest.ini_options]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in pytest_options.items()]
    return "\n".join(lines) + "\n"


def prepare_workspace(campaign: Campaign) -> None:
    source = campaign.root / "src" / PACKAGE
    if not (source / "impl").is_dir():
        raise CampaignError(f"{source / 'impl'} is missing")
    shutil.copytree(source, campaign.workspace / PACKAGE, ignore=shutil.ignore_patterns("mutation", *PYCACHE))
    for name in TESTS:  # a toy project (tests/fixtures/toys.py) has none
        path, copy = campaign.root / "tests" / name, campaign.workspace / "tests" / name
        if not path.exists():
            continue
        if path.is_dir():
            shutil.copytree(path, copy, ignore=IGNORED)
        else:
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, copy)
    shutil.copytree(Path(engine_package.__file__).parent, campaign.workspace / ENGINE, ignore=IGNORED)
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
        # each killed catalogue mutant's diagnosis: which faults the check names (the summary grades it)
        "diagnose": DIAGNOSE,
        # --tb=native: pytest's own traceback style parses each frame's file, and a mutated file holds
        # every mutant of its functions (seconds per failing test)
        "pytest_args": ["--rootdir=.", "-q", "--no-header", "--tb=native", "-p", "no:cacheprovider"]
        + ["-p", "no:randomly"]
        + [f"--ignore={path}" for path in SUBPROCESS_TESTS]
        + [KIT_PROPERTIES]
        + [f"tests/{name}" for name in GRADING if (campaign.root / "tests" / name).is_dir()],
    }
    (campaign.workspace / "plan.json").write_text(json.dumps(plan, indent=1))


def driver_env(workspace: Path) -> dict[str, str]:
    return engine_env(
        HYPOTHESIS_PROFILE="mutation",  # the profile conftest.py loads whenever MUTANT_UNDER_TEST is set
        PYTHONHASHSEED="0",  # the same set orders, so the same test ids, from campaign to campaign
    )


# --- running ------------------------------------------------------------------------------------


def run_campaign(campaign: Campaign) -> dict:
    """Generate and test the mutants in the prepared workspace: the engine's results, or
    CampaignError when the campaign could not run."""
    log = campaign.workspace / "driver.log"
    command = [sys.executable, "-m", GENERATOR, "--max-children", str(campaign.max_children)]
    if campaign.faults_only:
        command.append("--faults-only")
    command.append("plan.json")
    watch = Watch(campaign.workspace, campaign.started, starting="generating mutants")
    code = watch.run(command, driver_env(campaign.workspace), log, cwd=campaign.workspace)
    campaign.finished = watch.finished
    campaign.reports.mkdir(exist_ok=True)
    shutil.copy(log, campaign.reports / "mutation-campaign.log")
    results_path = campaign.workspace / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    if code != 0 or "error" in results or not results:
        why = results.get("error") or f"the driver exited with {code}"
        raise CampaignError(f"{why}; last lines of its log:\n{log_tail(log)}")
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
