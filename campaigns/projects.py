"""Public projects' own test suites graded against the catalogue: ``python -m campaigns.projects``.

For each project below, pinned to one release, the script downloads its source distribution from
PyPI (``pip download --no-deps --no-binary :all: NAME==VERSION``, into a work folder outside the
repository), extracts it, installs what its tests need into a virtual environment of its own
(torch pinned to 2.13.0 by a constraints file, so pip never brings another torch; attnspec from
this checkout, editable), and runs

    attnspec mutate <its attention files> -- python -m pytest -x -q -p no:cacheprovider <its tests>

in the extracted folder, the tests unmodified, with a time limit per project.  What a project
needs that cannot be had offline (a checkpoint on a hub, a test folder the release leaves out, a
wheel that does not load with a CPU torch) is said for that project, and the others go on.

From each campaign's reports (mutation-summary.txt, mutation-results.json, mutation-report.json)
it writes one row into campaigns/projects-table.json (projects not run this time keep their row)
and rewrites the table between the markers of docs/explanation/project-suites.md (campaigns/
table.py's page-block writer).  ``--table`` only rewrites the page from the JSON.

    python -m campaigns.projects                          # every project
    python -m campaigns.projects --project litgpt --out reports/projects
    python -m campaigns.projects --checkout transformers=~/src/transformers   # a clone at v5.24.0

Exit status: 0 when every project that was asked for was graded or said why it could not be
reached, 1 when a campaign failed to run (its clean run failed, it ran out of time), 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import table
from .conformance import REPO_ROOT, catalogue_fingerprint

TABLE_FILE = Path(__file__).resolve().parent / "projects-table.json"
PAGE = REPO_ROOT / "docs" / "explanation" / "project-suites.md"
BEGIN = "<!-- project suites table: python -m campaigns.projects -->"
END = "<!-- end of project suites table -->"
TORCH = "torch==2.13.0"  # what pyproject.toml pins; the constraints file holds every venv to it
LIMIT_S = 600  # a project's campaign, by default (the clean run and every mutant)
INSTALL_LIMIT_S = 1200


@dataclass(frozen=True)
class Project:
    """One project: where its code comes from, what its tests need, which files are mutated and
    which test modules (and selections) judge them."""

    name: str  # as on PyPI
    version: str
    sources: tuple[str, ...]  # relative to the extracted folder (or, ``installed``, module names)
    tests: tuple[str, ...]  # pytest arguments: modules, node ids, -k / --deselect selections
    deps: tuple[str, ...]  # what its tests import, beside torch and attnspec
    why: str  # why these modules and selections (shown in the docs)
    env: dict[str, str] = field(default_factory=dict)
    installed: bool = False  # mutate the installed wheel's files (module names in ``sources``)
    unreachable: str = ""  # why the project cannot be graded offline at all (nothing is downloaded)
    checkout_only: str = ""  # only with --checkout NAME=DIR: why, and which clone
    known: str = ""  # a known reason its tests may not even collect here, said when they do not
    limit_s: int = LIMIT_S


PROJECTS: tuple[Project, ...] = (
    Project(
        "litgpt",
        "0.5.13",
        sources=("litgpt/model.py",),
        # test_model.py checks every model family against Hugging Face's at tiny sizes (transformers
        # < 4.57, as litgpt's test extra pins it), test_rope.py its RoPE variants, the other two its
        # latent attention and YaRN.  Left out: the CUDA-only cases (skipped by litgpt itself), the
        # one test that fetches a config from the Hub (stablelm_zephyr: network), and four slow ones
        # that would run again for every mutant they reach (test_rope_cache_length[gemma-3] 16 s,
        # the multimodal Gemma-3 cases 4-6 s each, test_model_compile: torch.compile).
        tests=(
            "tests/test_model.py",
            "tests/test_rope.py",
            "tests/test_multihead_latent_attention.py",
            "tests/test_yarn.py",
            "-k",
            "not stablelm_zephyr and not multimodal_gemma_3 and not test_rope_cache_length "
            "and not test_model_compile",
        ),
        deps=(
            "lightning==2.6.6",
            "jsonargparse[signatures]==4.41.0",
            "huggingface-hub==0.36.2",
            "psutil==7.2.2",
            "safetensors==0.8.0",
            "tokenizers==0.22.2",
            "tqdm==4.70.1",
            "transformers==4.56.2",
            "einops==0.8.2",
            "protobuf==7.36.2",
            "pytest-dependency==0.6.1",
            "pytest-rerunfailures==16.7",
            "pytest-timeout==2.4.0",
            "pytest-benchmark==5.3.1",
        ),
        why="its model tests (every family against Hugging Face's, at tiny sizes), RoPE, latent "
        "attention and YaRN tests; without the test that fetches a config from the Hub "
        "(`stablelm_zephyr`) and four slow ones (`test_rope_cache_length`, the multimodal Gemma-3 "
        "cases, `test_model_compile`)",
        env={"HF_HUB_OFFLINE": "1"},
    ),
    Project(
        "local-attention",
        "1.11.2",
        sources=(
            "local_attention/local_attention.py",
            "local_attention/transformer.py",
            "local_attention/rotary.py",
        ),
        tests=("tests/test_local_attention.py",),  # its only test module: the KV cache against a full pass
        deps=("einops==0.8.2", "hyper-connections==0.4.11"),
        why="its only test module (decoding with the KV cache against a full pass, 16 cases)",
    ),
    Project(
        "keras",
        "3.15.1",
        # The sdist's keras/ has no __init__.py (the build writes it), so the tests import the
        # installed wheel of the same release: its files are the ones mutated (read where they are
        # installed, never written), the sdist gives the tests.  KERAS_BACKEND=torch: the pinned torch.
        sources=(
            "keras.src.layers.attention.multi_head_attention",
            "keras.src.layers.attention.grouped_query_attention",
            "keras.src.layers.attention.attention",
            "keras.src.layers.attention.additive_attention",
            "keras.src.backend.torch.nn",
        ),
        tests=("keras/src/layers/attention/",),  # the attention layers' own test modules, all of them
        deps=("keras==3.15.1",),
        why="the attention layers' own test modules (keras/src/layers/attention/*_test.py, 116 tests), "
        "with the torch backend; the files mutated are the installed wheel's of the same release "
        "(the sdist's keras/ is no package until built)",
        env={"KERAS_BACKEND": "torch"},
        installed=True,
    ),
    Project(
        "timm",
        "1.0.31",
        sources=("timm/layers/attention.py", "timm/layers/attention2d.py"),
        # test_layers.py's attention cases and one small ViT through test_models.py's forward test
        tests=(
            "tests/test_layers.py",
            "tests/test_models.py::test_model_forward",
            "-k",
            "attn2d or mqa_v2 or vit_tiny_patch16_224",
        ),
        deps=("torchvision==0.28.0", "pyyaml", "huggingface_hub", "safetensors", "pytest-timeout"),
        why="test_layers.py's attention cases and one ViT's forward test",
        known="torchvision's Linux wheels on PyPI are CUDA builds: beside a CPU build of torch, `import "
        "torchvision` fails (operator torchvision::nms does not exist), and timm imports it everywhere",
    ),
    Project(
        "openai-whisper",
        "20250625",
        sources=("whisper/model.py",),
        tests=("tests/test_transcribe.py",),
        deps=(),
        why="",
        unreachable="its only test that runs whisper/model.py, tests/test_transcribe.py, downloads the "
        "`tiny` checkpoint first; the others (audio, normalizer, timing, tokenizer) never build a model",
    ),
    Project(
        "transformers",
        "5.24.0",
        sources=(
            "src/transformers/models/llama/modeling_llama.py",
            "src/transformers/models/mistral/modeling_mistral.py",
            "src/transformers/models/gemma/modeling_gemma.py",
            "src/transformers/masking_utils.py",
        ),
        tests=(
            "tests/models/llama/test_modeling_llama.py",
            "tests/models/mistral/test_modeling_mistral.py",
            "tests/models/gemma/test_modeling_gemma.py",
            "-k",
            "not IntegrationTest",  # the integration tests load checkpoints (and need RUN_SLOW)
        ),
        # its own release from PyPI brings its dependencies; the checkout's src/ is imported first
        deps=("transformers==5.24.0", "parameterized", "pytest-asyncio", "sentencepiece"),
        why="the model tests of Llama, Mistral and Gemma, without the integration tests",
        env={"HF_HUB_OFFLINE": "1"},
        checkout_only="tests/models/ is not in the sdist and github.com is not reachable from here: "
        "pass --checkout transformers=DIR with a clone of huggingface/transformers at tag v5.24.0",
    ),
)
BY_NAME = {project.name: project for project in PROJECTS}


# --- fetching and installing ---------------------------------------------------------------------


def run(command: list[str], cwd: Path | None = None, limit: float = INSTALL_LIMIT_S, env=None):
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=limit, env=env, stdin=subprocess.DEVNULL
    )


def last_lines(text: str, n: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip() and "is ignored" not in line]
    return " / ".join(lines[-n:])


def first_error(text: str) -> str:
    """The first exception a failed pytest run shows (``E   RuntimeError: ...``), else its last lines."""
    found = re.search(r"^E?\s*((?:\w+\.)*\w+(?:Error|Exception): .+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else last_lines(text, 2)


def fetch(project: Project, work: Path) -> Path:
    """The extracted sdist (extracted afresh each run, so the tests are as released)."""
    downloads = work / "sdist"
    downloads.mkdir(parents=True, exist_ok=True)
    stem = project.name.replace("-", "_").lower() + "-" + project.version
    wanted = (stem + ".tar.gz").replace("-", "_")
    found = [p for p in downloads.glob("*.tar.gz") if p.name.lower().replace("-", "_") == wanted]
    if not found:
        spec = f"{project.name}=={project.version}"
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        done = run([*pip, "-d", str(downloads), spec])
        found = [p for p in downloads.glob("*.tar.gz") if p.name.lower().replace("-", "_") == wanted]
        if done.returncode or not found:
            raise Unreached(f"pip download {spec} failed: {last_lines(done.stdout + done.stderr)}")
    folder = work / "src" / stem
    if folder.exists():
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(found[0]) as archive:
        archive.extractall(folder.parent, filter="data")
    extracted = folder.parent / found[0].name[: -len(".tar.gz")]
    if extracted != folder:
        extracted.rename(folder)
    return folder


def venv_for(project: Project, work: Path, log) -> Path:
    """The project's virtual environment (made once, installed again only when its list changed)."""
    venv = work / "venvs" / project.name
    python = venv / "bin" / "python"
    constraints = work / "constraints.txt"
    constraints.write_text(TORCH + "\n")
    wanted = [TORCH, "-e", str(REPO_ROOT), *project.deps]
    stamp = venv / "attnspec-projects.json"
    if python.exists() and stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return python
    if not python.exists():
        made = run([sys.executable, "-m", "venv", str(venv)])
        if made.returncode:
            raise Unreached(f"python -m venv failed: {last_lines(made.stderr)}")
    log(f"  installing into {venv}: {' '.join(wanted)}")
    done = run([str(python), "-m", "pip", "install", "--quiet", "-c", str(constraints), *wanted])
    if done.returncode:
        raise Unreached(f"pip install failed: {last_lines(done.stdout + done.stderr)}")
    stamp.write_text(json.dumps(wanted))
    return python


def installed_files(project: Project, python: Path, env: dict) -> list[str]:
    """The installed files of ``sources`` given as module names."""
    code = "import importlib.util, sys\nfor m in sys.argv[1:]: print(importlib.util.find_spec(m).origin)"
    found = run([str(python), "-c", code, *project.sources], env=env, limit=300)
    if found.returncode:
        raise Unreached(f"its installed modules cannot be found: {last_lines(found.stderr)}")
    return found.stdout.split()


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the campaign's process group (the engine removes its workspace), SIGKILL after 60 s."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class Unreached(Exception):
    """The project cannot be graded here: the message says why."""


# --- one campaign --------------------------------------------------------------------------------


def campaign(project: Project, folder: Path, python: Path, out: Path, log) -> dict:
    env = {**os.environ, **project.env, "PYTHONDONTWRITEBYTECODE": "1"}
    if not project.installed:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH", "")]))
    if project.name == "transformers":
        env["PYTHONPATH"] = os.pathsep.join([str(folder / "src"), env.get("PYTHONPATH", "")])
    sources = installed_files(project, python, env) if project.installed else list(project.sources)
    pytest = ["python", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *project.tests]
    collected = run([str(python), *pytest[1:], "--collect-only"], cwd=folder, env=env, limit=600)
    if collected.returncode:
        said = first_error(collected.stdout + collected.stderr)
        known = f": {project.known}" if project.known else ""
        raise Unreached(f"its tests do not collect here ({said}){known}")
    out.mkdir(parents=True, exist_ok=True)
    command = [str(python.parent / "attnspec"), "mutate", *sources, "--out", str(out), "--", *pytest]
    log(f"  {' '.join(command[1:])}  (in {folder}, at most {project.limit_s} s)")
    started = time.monotonic()
    with open(out.parent / f"{out.name}.log", "w") as output:
        process = subprocess.Popen(
            command, cwd=folder, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        try:
            code = process.wait(timeout=project.limit_s)
        except subprocess.TimeoutExpired:
            stop(process)
            code = None
        except KeyboardInterrupt:  # its own session hears no Ctrl-C: pass it on
            stop(process)
            raise
    wall = round(time.monotonic() - started)
    row = {"exit": code, "campaign_s": wall}
    if code is None:
        return {**row, "status": "timed out", "reason": f"the campaign ran past {project.limit_s} s"}
    if code not in (0, 1):
        tail = last_lines((out.parent / f"{out.name}.log").read_text(errors="replace"), 4)
        return {**row, "status": "not graded", "reason": f"attnspec mutate exited {code}: {tail}"}
    return {**row, **graded(out, folder, sources), "status": "graded"}


# --- reading a campaign's reports ----------------------------------------------------------------

FAULT_LINE = re.compile(
    r"^\s+(F\d+)\s+(killed|survived|not exercised|no site|not recognised|equivalent|not killed|elsewhere)\b"
)
PRESENT = re.compile(r"present at (?P<where>.+?), no mutant placed")
PHASES = ("clean_s", "mutants_s", "mutants_run", "test_runs", "test_runs_all", "all_tests_s", "tests_traced")


def fault_order(fault: str) -> int:
    return int(fault[1:])


def graded(out: Path, folder: Path, sources: list[str]) -> dict:
    """The row of a campaign that ran: per fault its state, the survivors' diffs, the phases' times."""
    summary = (out / "mutation-summary.txt").read_text(encoding="utf-8")
    results = json.loads((out / "mutation-results.json").read_text(encoding="utf-8"))
    report_file = out / "mutation-report.json"
    report = json.loads(report_file.read_text(encoding="utf-8")) if report_file.exists() else {"files": {}}
    statuses: dict[str, str] = {}
    present: dict[str, str] = {}
    for line in summary.splitlines():
        match = FAULT_LINE.match(line)
        if match and match.group(1) not in statuses:
            statuses[match.group(1)] = match.group(2)
            where = PRESENT.search(line)
            if match.group(2) == "not recognised" and where:
                present[match.group(1)] = shorten(where.group("where"), folder)
    by_fault: dict[str, list[str]] = {}
    for entry in results.get("mutants", {}).values():
        by_fault.setdefault(entry["fault"], []).append(entry["status"])
    faults = {}
    for fault, status in sorted(statuses.items(), key=lambda item: fault_order(item[0])):
        own = by_fault.get(fault, [])
        if status in ("no site", "not recognised", "elsewhere") or not own:
            state = "not recognised" if status == "not recognised" else "no site"
        elif all(s == "Killed" for s in own):
            state = "killed"
        elif "Survived" in own:
            state = "survived"
        elif "NoCoverage" in own:
            state = "not exercised"
        else:
            state = "not killed"  # timeouts or errors, nothing survived
        faults[fault] = {
            "state": state,
            "mutants": len(own),
            "killed": own.count("Killed"),
            "survived": own.count("Survived"),
            "not_exercised": own.count("NoCoverage"),
        }
        if fault in present:
            faults[fault]["present"] = present[fault]
    phases = results.get("phases", {})
    return {
        "faults": faults,
        "survivors": survivors(report, folder),
        "not_exercised_at": not_exercised(report, folder),
        **{name: phases.get(name) for name in PHASES},
        "files": [shorten(source, folder) for source in sources],
    }


def shorten(path: str, folder: Path) -> str:
    """A path as the docs show it: inside the project, or from its package on (site-packages)."""
    text = str(path)
    if text.startswith(str(folder) + os.sep):
        return text[len(str(folder)) + 1 :]
    return re.sub(r"^.*?site-packages/", "", text)


def located(report: dict, status: str, folder: Path):
    for path, entry in report.get("files", {}).items():
        source = entry.get("source", "")
        for mutant in entry.get("mutants", []):
            if mutant.get("status") == status:
                yield shorten(path, folder), source, mutant


def survivors(report: dict, folder: Path) -> list[dict]:
    """Each surviving mutant: its fault, where, and its edit as the changed lines, - then +."""
    found = []
    for path, source, mutant in located(report, "Survived", folder):
        start, end = mutant["location"]["start"], mutant["location"]["end"]
        starts = [0]
        for line in source.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        first = starts[start["line"] - 1] + start["column"] - 1
        last = starts[end["line"] - 1] + end["column"] - 1
        mutated = source[:first] + mutant.get("replacement", "") + source[last:]
        diff = [
            line.rstrip()
            for line in difflib.unified_diff(source.splitlines(), mutated.splitlines(), n=0, lineterm="")
            if line[:1] in "-+" and not line.startswith(("---", "+++"))
        ]
        found.append(
            {
                "fault": mutant.get("mutatorName", ""),
                "mutant": mutant["id"],
                "where": f"{path}:{start['line']}",
                "diff": "\n".join(diff),
            }
        )
    return sorted(found, key=lambda s: (fault_order(s["fault"]), s["where"], s["mutant"]))


def not_exercised(report: dict, folder: Path) -> dict[str, list[str]]:
    """fault -> the lines of its mutants that no test runs."""
    found: dict[str, list[str]] = {}
    for path, _, mutant in located(report, "NoCoverage", folder):
        where = f"{path}:{mutant['location']['start']['line']}"
        found.setdefault(mutant.get("mutatorName", ""), []).append(where)
    ordered = sorted(found.items(), key=lambda item: fault_order(item[0]))
    return {fault: sorted(set(lines)) for fault, lines in ordered}


# --- the table -----------------------------------------------------------------------------------


def counts(row: dict) -> dict[str, list[str]]:
    """The faults of a graded row by what became of them."""
    by: dict[str, list[str]] = {}
    for fault, entry in sorted(row.get("faults", {}).items(), key=lambda item: fault_order(item[0])):
        by.setdefault(entry["state"], []).append(fault)
    graded_faults = [f for s in ("killed", "survived", "not exercised", "not killed") for f in by.get(s, [])]
    return {
        "present": sorted(graded_faults + by.get("not recognised", []), key=fault_order),
        "graded": sorted(graded_faults, key=fault_order),
        "killed": by.get("killed", []),
        "survived": by.get("survived", []),
        "not exercised": by.get("not exercised", []),
        "not killed": by.get("not killed", []),
        "not recognised": by.get("not recognised", []),
    }


def seconds(value) -> str:
    return "-" if value is None else f"{value:.0f} s" if isinstance(value, (int, float)) else str(value)


def number(value) -> str:
    return "-" if value is None else str(value)


def ids(faults: list[str]) -> str:
    return f"{len(faults)}" + (f" ({', '.join(faults)})" if faults else "")


def render(measured: dict) -> str:
    projects = [measured["projects"][p.name] for p in PROJECTS if p.name in measured["projects"]]
    lines = [
        "| project | version | files mutated | tests run (pytest arguments) | result |",
        "|---|---|---|---|---|",
    ]
    for row in projects:
        files = "<br>".join(f"`{f}`" for f in row.get("files") or row.get("sources", []))
        tests = " ".join(row["tests"]).replace("|", "\\|")
        result = row["status"] + (f" (exit {row['exit']})" if row.get("exit") is not None else "")
        lines.append(f"| {row['project']} | {row['version']} | {files} | `{tests}` | {result} |")
    lines += [
        "",
        "| project | faults present | graded | killed | survived | not exercised | not recognised | "
        "mutants killed | clean run | mutants | campaign | test runs (every test on every mutant) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    unreached = []
    for row in projects:
        if row["status"] != "graded":
            unreached.append(row)
            continue
        by = counts(row)
        mutants = sum(e["mutants"] for e in row["faults"].values())
        killed = sum(e["killed"] for e in row["faults"].values())
        runs = number(row.get("test_runs"))
        if row.get("test_runs_all") is not None:
            runs += f" ({row['test_runs_all']}, ~{seconds(row.get('all_tests_s'))})"
        lines.append(
            f"| {row['project']} | {len(by['present'])} | {len(by['graded'])} | {ids(by['killed'])} | "
            f"{ids(by['survived'])} | {ids(by['not exercised'])} | {ids(by['not recognised'])} | "
            f"{killed} of {mutants} | {seconds(row.get('clean_s'))} | {seconds(row.get('mutants_s'))} | "
            f"{seconds(row.get('campaign_s'))} | {runs} |"
        )
    if unreached:
        lines.append("")
        for row in unreached:
            lines.append(f"- **{row['project']} {row['version']}: {row['status']}.** {row['reason']}.")
    for row in projects:
        if row["status"] != "graded":
            continue
        lines += ["", f"### {row['project']} {row['version']}", "", f"Tests: {row['why']}.", ""]
        for fault in counts(row)["not recognised"]:
            lines.append(f"- {fault} present but not recognised, at {row['faults'][fault]['present']}")
        unrun = row.get("not_exercised_at", {})
        for fault in sorted(unrun, key=fault_order):
            lines.append(f"- {fault} has mutants on lines no selected test runs: {', '.join(unrun[fault])}")
        if row.get("survivors"):
            lines += ["", "Surviving mutants (each a fault the tests ran and did not detect):", ""]
            for survivor in row["survivors"]:
                where = f"{survivor['fault']} at `{survivor['where']}`:"
                lines += [where, "", "```diff", survivor["diff"], "```", ""]
            lines.pop()
    digests = sorted({row["catalogue"] for row in projects if row["status"] == "graded"})
    digest = ", ".join(digests)
    lines += ["", f"Measured on 2 cores with torch 2.13.0 (CPU), the catalogue at digest {digest}."]
    return "\n".join(lines)


def page_block(text: str) -> str:
    return table.page_block(text, BEGIN, END)


def write_table(measured: dict) -> None:
    TABLE_FILE.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
    table.write_block(PAGE, render(measured), BEGIN, END)


def load_table() -> dict:
    if TABLE_FILE.exists():
        return json.loads(TABLE_FILE.read_text())
    return {"made_by": "python -m campaigns.projects", "projects": {}}


# --- the command ---------------------------------------------------------------------------------


def grade(project: Project, work: Path, out: Path, checkout: Path | None, log) -> dict:
    row = {
        "project": project.name,
        "version": project.version,
        "sources": list(project.sources),
        "tests": list(project.tests),
        "why": project.why,
        "catalogue": catalogue_fingerprint(),
    }
    try:
        if project.unreachable:
            raise Unreached(project.unreachable)
        if project.checkout_only and checkout is None:
            raise Unreached(project.checkout_only)
        if checkout is not None:
            folder = checkout.expanduser().resolve()
            check_checkout(project, folder)
        else:
            log(f"  fetching {project.name}=={project.version}")
            folder = fetch(project, work)
        python = venv_for(project, work, log)
        row.update(campaign(project, folder, python, out / project.name, log))
    except Unreached as why:
        row.update({"status": "not reached", "reason": str(why).rstrip(".")})
    except subprocess.TimeoutExpired as error:
        row.update({"status": "not reached", "reason": f"{' '.join(map(str, error.cmd[:4]))} ran too long"})
    return row


def check_checkout(project: Project, folder: Path) -> None:
    """A checkout must be the pinned release: its package says so."""
    version_file = folder / "src" / "transformers" / "__init__.py" if project.name == "transformers" else None
    if version_file is None:
        return
    if not version_file.exists():
        raise Unreached(f"{folder} is no transformers checkout ({version_file} is missing)")
    found = re.search(r'__version__\s*=\s*"([^"]+)"', version_file.read_text(encoding="utf-8"))
    if not found or found.group(1) != project.version:
        have = found.group(1) if found else "no version"
        raise Unreached(
            f"{folder} holds transformers {have}, not {project.version}: check out tag v{project.version}"
        )
    missing = [t for t in project.tests if t.startswith("tests/") and not (folder / t).exists()]
    if missing:
        raise Unreached(f"{folder} lacks {', '.join(missing)}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    summary = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m campaigns.projects", description=summary)
    parser.add_argument(
        "--project", action="append", choices=sorted(BY_NAME), help="only this project (repeatable)"
    )
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "reports" / "projects", help="the reports' folder"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "attnspec-projects",
        help="downloads, extracted sources and venvs (kept between runs; never in the repository)",
    )
    parser.add_argument(
        "--checkout", action="append", default=[], metavar="NAME=DIR", help="use a clone instead of the sdist"
    )
    parser.add_argument("--limit", type=int, help="seconds per campaign (default: the project's, 600)")
    parser.add_argument("--table", action="store_true", help="only rewrite the docs' table from the JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.table:
        write_table(load_table())
        print(f"wrote the table of {PAGE.relative_to(REPO_ROOT)}")
        return 0
    checkouts = {}
    for given in args.checkout:
        name, _, folder = given.partition("=")
        if name not in BY_NAME or not folder:
            print(f"--checkout {given}: give NAME=DIR, NAME one of {', '.join(BY_NAME)}", file=sys.stderr)
            return 2
        checkouts[name] = Path(folder)
    if args.work.resolve().is_relative_to(REPO_ROOT):
        print("--work must lie outside the repository (nothing is vendored)", file=sys.stderr)
        return 2
    chosen = [BY_NAME[name] for name in args.project] if args.project else list(PROJECTS)
    measured = load_table()
    failed = False
    for project in chosen:
        if args.limit:
            project = dataclasses.replace(project, limit_s=args.limit)
        print(f"{project.name} {project.version}", flush=True)
        row = grade(project, args.work, args.out, checkouts.get(project.name), lambda s: print(s, flush=True))
        measured["projects"][project.name] = row
        failed |= row["status"] in ("timed out", "not graded")
        if row["status"] == "graded":
            by = counts(row)
            print(
                f"  graded in {row['campaign_s']} s: {len(by['present'])} faults present, "
                f"{len(by['graded'])} graded, killed {len(by['killed'])}, survived {len(by['survived'])}, "
                f"not exercised {len(by['not exercised'])}, not recognised {len(by['not recognised'])}",
                flush=True,
            )
        else:
            print(f"  {row['status'].upper()}: {row['reason']}", flush=True)
        write_table(measured)  # after each project: an interrupted run keeps what it measured
    print(f"wrote {TABLE_FILE.relative_to(REPO_ROOT)} and the table of {PAGE.relative_to(REPO_ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
