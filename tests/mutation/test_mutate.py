"""`attnspec mutate`: the catalogue's faults in a user's code, judged by the user's own tests.

On a copy of examples/user_project (a GPT-style attention module with a shapes-only test file and
a strong one) and on a tiny project whose tests are a plain script: exit codes, the surviving
faults named, the files never written, nothing left behind on Ctrl-C, --since, --incremental,
inline triage, and the reports (Stryker schema, JUnit, GitHub annotations).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from attnspec.mutation.campaign import WORKSPACE_PREFIX, collect_stale_workspaces
from attnspec.mutation.faults import FAULTS
from attnspec.mutation.watch import SHOWN_TEST_CHARS, Watch
from tests.fixtures.kit_runs import alive_with, left_in, run_module, tree_digest
from tests.fixtures.mutation import check_stryker_shape

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "examples" / "user_project"


def copy_project(where: Path) -> Path:
    project = where / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return project


def environment(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSPEC_", "HYPOTHESIS_", "GITHUB_"))}
    env.pop("MUTANT_UNDER_TEST", None)
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(REPO))
    return env


def mutate(cwd: Path, tmp: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "attnspec", "mutate", "-j", "2", *args]
    return run_module(command, cwd, environment(tmp), timeout)


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory) -> dict:
    """The shapes-only and the strong suite, each once, on one copy of the project."""
    project = copy_project(tmp_path_factory.mktemp("user"))
    tmp = tmp_path_factory.mktemp("tmp")
    before = tree_digest(project)
    runs = {
        name: mutate(
            project,
            tmp,
            "attention.py",
            "--out",
            f"../reports-{name}",
            "--",
            "pytest",
            f"tests/test_{name}.py",
        )
        for name in ("shapes", "strong")
    }
    return {"project": project, "tmp": tmp, "before": before, "runs": runs}


def test_shapes_only_tests_let_faults_survive_and_strong_ones_kill_them_all(campaigns):
    shapes, strong = campaigns["runs"]["shapes"], campaigns["runs"]["strong"]
    assert shapes.returncode == 1, shapes.stdout + shapes.stderr
    assert strong.returncode == 0, strong.stdout + strong.stderr
    survived = re.findall(r"^  (F\d+)\s+survived", shapes.stdout, re.M)
    assert len(survived) >= 5, shapes.stdout  # each named, with its diff
    assert "SURVIVED (not triaged): attention." in shapes.stdout and "\n           -" in shapes.stdout
    assert "gate: FAILED" in shapes.stdout and "gate: passed" in strong.stdout
    assert not re.findall(r"^  F\d+\s+(survived|not killed)", strong.stdout, re.M)
    killed = re.findall(r"^  (F\d+)\s+killed", strong.stdout, re.M)
    assert set(survived) <= set(killed)
    assert re.search(r"killed by tests/test_strong\.py::", strong.stdout)
    # without a target, each survivor is told what would let the kit see it
    seen = dict(re.findall(r"^  (F\d+)\s+through (.+)$", shapes.stdout, re.M))
    assert set(seen) == set(survived) and "--impl module:OBJ" in shapes.stdout, shapes.stdout
    assert seen["F3"].startswith("the attention core"), seen


def test_three_runs_give_the_same_verdicts_and_the_same_killers(tmp_path):
    # Both suites together, two workers, the same reports' folder as a user re-runs: a mutant's killer
    # is its first failing test in an order that no finishing child changes, and the previous run's
    # killer is tried first (an F5 mutant was credited to a test named for F6 on one run and to
    # another test on the next).
    project = copy_project(tmp_path)
    outcomes = []
    for _ in range(3):
        done = mutate(project, tmp_path, "attention.py", "--out", "../reports", "--", "pytest", "tests")
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads((tmp_path / "reports" / "mutation-report.json").read_text())
        outcomes.append(
            {
                mutant["id"]: (mutant["status"], tuple(mutant.get("killedBy", ())))
                for file in report["files"].values()
                for mutant in file["mutants"]
            }
        )
    assert len(outcomes[0]) >= 30 and all(killers for _, killers in outcomes[0].values())
    assert outcomes[0] == outcomes[1] == outcomes[2]


TARGETS = ("--impl", "attnspec_target:ATTENTION", "--impl", "attnspec_target:BLOCK")


def test_with_its_targets_every_survivor_gets_the_test_that_kills_it_and_with_them_none_survives(tmp_path):
    project = copy_project(tmp_path)
    shapes = ("--", "pytest", "tests/test_shapes.py")
    before = mutate(project, tmp_path, "attention.py", *TARGETS, *shapes)
    assert before.returncode == 1, before.stdout[-3000:] + before.stderr[-3000:]
    survived = re.findall(r"^  (F\d+)\s+survived", before.stdout, re.M)
    section = before.stdout.split("the test that kills each survivor:\n", 1)[1]
    named = dict(re.findall(r"^  (F\d+)\s+(test_F\d+_\w+) kills it: [A-Z]+-\d+ ", section, re.M))
    assert len(survived) >= 15 and set(named) == set(survived), section
    assert "the kit sees it through" not in section  # no survivor without its test
    file = "test_attnspec_suggested_attention.py"  # named after the module graded
    assert f"written to attnspec-mutation/{file}: copy it among your tests" in section
    suggested = (project / "attnspec-mutation" / file).read_text()
    for fault, test in named.items():
        assert f'\ndef {test}():\n    """{fault}, ' in suggested
    assert suggested.count("attnspec.check(") >= len(named)
    # the project's README's copy step, followed literally; then a bare pytest passes and leaves nothing
    # of ours behind: the copy in the reports' folder is not collected (same-named test modules in two
    # folders would stop the collection), the kit's Hypothesis files go to a temporary folder
    (copy,) = re.findall(r"^\s*cp (\S+) (\S+)", (PROJECT / "README.md").read_text(), re.M)
    assert copy == (f"attnspec-mutation/{file}", "tests/"), copy
    shutil.copy(project / copy[0], project / copy[1])
    files = set(tree_digest(project))
    bare = bare_pytest(project, tmp_path / "bare")
    assert bare.returncode == 0 and " passed" in bare.stdout, bare.stdout[-3000:] + bare.stderr[-3000:]
    # tree_digest leaves bytecode out, and here .pytest_cache: what pytest and Python write are theirs
    assert sorted(set(tree_digest(project, but=".pytest_cache")) - files) == []
    # no .hypothesis/ nor anything else of ours; pytest's own cache, where its cacheprovider runs
    assert {p.name for p in project.iterdir() if p.name.startswith(".")} - {".pytest_cache"} == {".gitignore"}
    # a project whose pytest searches from its root (no testpaths) collects the copy in tests/ alone
    (project / "pytest.ini").write_text("[pytest]\n")
    found = bare_pytest(project, tmp_path / "bare", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert found.returncode == 0, found.stdout[-3000:] + found.stderr[-3000:]
    assert f"tests/{file}::" in found.stdout and "attnspec-mutation" not in found.stdout, found.stdout
    (project / "pytest.ini").write_text((PROJECT / "pytest.ini").read_text())
    after = mutate(project, tmp_path, "attention.py", *TARGETS, *shapes, f"tests/{file}")
    assert after.returncode == 0, after.stdout[-3000:] + after.stderr[-3000:]
    assert "gate: passed" in after.stdout and "the test that kills each survivor" not in after.stdout
    assert left_in(tmp_path) == ["project"]  # the kit's campaigns removed their workspaces too


def bare_pytest(project: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    """`pytest ARGS` as a user types it in the project's folder: a new interpreter, bytecode written;
    ``tmp``, its temporary folder, is removed after it (pytest's own folders aside, empty)."""
    script = Path(sys.executable).with_name("pytest")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "pytest"]
    env = environment(tmp)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    tmp.mkdir()
    done = subprocess.run(
        [*command, *args], cwd=project, env=env, capture_output=True, text=True, timeout=600
    )
    assert [p for p in left_in(tmp) if not p.startswith("pytest-of-")] == [], left_in(tmp)
    shutil.rmtree(tmp)
    return done


def test_a_target_that_cannot_be_found_stops_the_campaign_before_it_runs(tmp_path):
    project = copy_project(tmp_path)
    for target, said in (("nosuch:X", "no module nosuch importable"), ("nosuch", "give module:OBJ")):
        command = ("attention.py", "--impl", target, "--", "pytest", "tests/test_shapes.py")
        done = mutate(project, tmp_path, *command)
        assert done.returncode == 2 and f"NOT RUN: --impl {target}: {said}" in done.stderr, done.stderr


def test_the_users_files_are_untouched_and_nothing_is_left_behind(campaigns):
    project = campaigns["project"]
    assert tree_digest(project) == campaigns["before"]  # no cache, no bytecode, no mutant written
    assert list(campaigns["tmp"].iterdir()) == []  # the workspaces are gone


def test_the_reports_validate(campaigns, stryker_schema):  # noqa: F811 (the fixture)
    out = campaigns["project"].parent / "reports-shapes"
    report = json.loads((out / "mutation-report.json").read_text())
    check_stryker_shape(report)
    jsonschema.validators.validator_for(stryker_schema)(stryker_schema).validate(report)
    statuses = {m["status"] for f in report["files"].values() for m in f["mutants"]}
    assert {"Killed", "Survived"} <= statuses
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name").split()[0] for c in cases] == [f.id for f in FAULTS]  # one case per fault
    survivors = [m for f in report["files"].values() for m in f["mutants"] if m["status"] == "Survived"]
    assert sum(len(c.findall("failure")) for c in cases) == len(survivors)  # a failure per survivor
    assert int(suite.get("failures")) == sum(1 for c in cases if c.findall("failure"))
    commands = (out / "annotations.txt").read_text().splitlines()
    assert len(commands) == len(survivors)
    for command in commands:
        assert re.fullmatch(r"::warning file=[^,]+,line=\d+,endLine=\d+,col=\d+,title=[^:]+::[^\n]+", command)
        assert "\r" not in command
    page = (out / "index.html").read_text()
    assert page.lower().startswith("<!doctype html>") and survivors[0]["replacement"] in page


def test_a_comment_in_the_source_triages_a_survivor_and_its_reason_is_in_every_report(tmp_path):
    project = copy_project(tmp_path)
    source = project / "attention.py"
    text = source.read_text()
    line = next(x for x in text.splitlines() if "training=self.training" in x)
    source.write_text(text.replace(line, line + "  # attnspec: equivalent F21 -- the model has no dropout"))
    done = mutate(
        project, tmp_path, "attention.py", "--out", "../out", "--", "pytest", "tests/test_shapes.py"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "triaged equivalent: attention.CausalSelfAttention.forward__F21_1" in done.stdout
    assert re.search(r"^  F21\s+equivalent", done.stdout, re.M)
    report = json.loads((tmp_path / "out" / "mutation-report.json").read_text())
    (entry,) = [m for f in report["files"].values() for m in f["mutants"] if m["mutatorName"] == "F21"]
    assert "the model has no dropout" in entry["statusReason"]
    assert "the model has no dropout" in (tmp_path / "out" / "annotations.txt").read_text()
    assert "the model has no dropout" in (tmp_path / "out" / "junit.xml").read_text()
    source.write_text(text.replace(line, line + "  # attnspec: equivalent F21"))  # no reason: refused
    done = mutate(
        project, tmp_path, "attention.py", "--out", "../out2", "--", "pytest", "tests/test_shapes.py"
    )
    assert done.returncode == 2 and "an attnspec comment reads" in done.stderr


def git(cwd: Path, *args: str) -> None:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True)


# The cheaper of the project's suites (6 tests), for what does not depend on how strong the tests are.
SHAPES = "tests/test_shapes.py"


def test_since_a_ref_only_the_changed_functions_mutants_run_and_unchanged_results_are_reused(tmp_path):
    project = copy_project(tmp_path)
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-q", "-m", "start")
    source = project / "attention.py"
    text = source.read_text()
    head, block = text.split("class Block", 1)
    edited = block.replace(
        "        return x + ", "        # the residual around the attention\n        return x + ", 1
    )
    assert edited != block
    source.write_text(head + "class Block" + edited)
    done = mutate(
        project, tmp_path, "attention.py", "--since", "HEAD", "--out", "../since", "--", "pytest", SHAPES
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads((tmp_path / "since" / "mutation-report.json").read_text())
    names = [m["id"] for f in report["files"].values() for m in f["mutants"]]
    assert names and all(name.startswith("attention.Block.forward__") for name in names), names
    assert "(functions changed since HEAD)" in done.stdout
    git(project, "commit", "-q", "-am", "edit")
    done = mutate(
        project, tmp_path, "attention.py", "--since", "HEAD", "--out", "../since2", "--", "pytest", SHAPES
    )
    assert done.returncode == 0 and "nothing to mutate" in done.stdout

    first = mutate(
        project, tmp_path, "attention.py", "--incremental", "--out", "../inc", "--", "pytest", SHAPES
    )
    again = mutate(
        project, tmp_path, "attention.py", "--incremental", "--out", "../inc", "--", "pytest", SHAPES
    )
    assert first.returncode == again.returncode == 1, first.stdout + again.stdout  # reused survivors fail too
    count = len(json.loads((tmp_path / "inc" / "mutation-results.json").read_text())["mutants"])
    assert f"({count} run, 0 reused)" in first.stdout, first.stdout
    assert f"(0 run, {count} reused)" in again.stdout, again.stdout


TINY = """
import math


def scores(q, k, d):
    return q * k / math.sqrt(d)


def slow_scores(q, k, d):
    return q * k / math.sqrt(d)
"""
CHECK = """
import sys

import tiny

assert abs(tiny.scores(2.0, 3.0, 4) - 3.0) < 1e-12, "scores"
if len(sys.argv) > 1:
    import time

    time.sleep(float(sys.argv[1]))
"""


def test_any_command_is_a_test_source_and_a_line_it_never_runs_is_not_exercised(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    (tmp_path / "check.py").write_text(CHECK)
    done = mutate(tmp_path, tmp_path, "tiny.py", "--out", "out", "--", sys.executable, "check.py")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "killed by the test command" in done.stdout
    assert "NOT EXERCISED: tiny.slow_scores__F3_1" in done.stdout  # check.py never calls it
    results = json.loads((tmp_path / "out" / "mutation-results.json").read_text())["mutants"]
    assert results["tiny.scores__F3_1"]["status"] == "Killed"
    assert results["tiny.slow_scores__F3_1"]["status"] == "NoCoverage"


def test_incremental_with_a_command_and_nothing_changed_reuses_every_result(tmp_path):
    project, tmp = tmp_path / "project", tmp_path / "tmp"
    project.mkdir()
    tmp.mkdir()
    (project / "tiny.py").write_text(TINY)
    (project / "check.py").write_text(CHECK)
    command = ("tiny.py", "--incremental", "--", sys.executable, "check.py")
    first, again = mutate(project, tmp, *command), mutate(project, tmp, *command)
    assert first.returncode == 1 and re.search(r"\(\d run, 0 reused\)", first.stdout), first.stdout[-2000:]
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-2000:]  # no clean run left to run
    assert "(0 of 1 tests run), mutants 0.0 s (0 run, 2 reused)" in again.stdout, again.stdout[-2000:]


def test_a_site_annotation_beside_a_triage_comment_is_no_malformed_triage(tmp_path):
    annotated = TINY.replace(
        "def slow_scores(q, k, d):\n    return q * k / math.sqrt(d)",
        "def slow_scores(q, k, d):\n    return q * k / math.sqrt(d)  # attnspec: equivalent F3 -- unused"
        "\n\n\ndef offset_scores(q, k, d, offset):\n    return q * k + offset  # attnspec: site F12",
    )
    (tmp_path / "tiny.py").write_text(annotated)
    (tmp_path / "check.py").write_text(CHECK)
    done = mutate(tmp_path, tmp_path, "tiny.py", "--out", "out", "--", sys.executable, "check.py")
    assert done.returncode == 1 and "NOT RUN" not in done.stderr, done.stdout + done.stderr
    assert "triaged equivalent: tiny.slow_scores__F3_1" in done.stdout
    assert re.search(r"^  F12 ", done.stdout, re.M), done.stdout  # the annotated line is graded


def test_it_cannot_run_when_the_tests_fail_unmutated_or_nothing_can_be_mutated(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    (tmp_path / "check.py").write_text(CHECK.replace("- 3.0)", "- 4.0)"))  # a test that fails unmutated
    (tmp_path / "plain.py").write_text("def f(x):\n    return x\n")
    done = mutate(tmp_path, tmp_path, "tiny.py", "--", sys.executable, "check.py")
    assert done.returncode == 2 and "the clean run did not pass" in done.stderr, done.stderr
    done = mutate(tmp_path, tmp_path, "plain.py", "--", sys.executable, "check.py")
    assert done.returncode == 2 and "nothing to mutate" in done.stderr, done.stderr
    done = mutate(tmp_path, tmp_path, "tiny.py")
    assert done.returncode == 2 and "give the test command after --" in done.stderr
    assert not (tmp_path / "attnspec-mutation").exists()


TRIAGED = ("tiny.py", "--triage", "t.toml")


@pytest.mark.parametrize(
    "files, args, said",
    [
        ({"broken.py": "def f(x:\n    return x\n"}, ["broken.py"], "broken.py:1: "),
        ({"nul.py": "x = 1\0\n"}, ["nul.py"], "nul.py: "),
        ({"t.toml": "[[survivor]\n"}, [*TRIAGED], "t.toml: not a valid TOML triage file"),
        ({"t.toml": "survivor = 3\n"}, [*TRIAGED], "t.toml: [[survivor]] entries expected"),
    ],
    ids=["syntax error", "null byte", "malformed toml", "survivor not a table"],
)
def test_a_bad_source_or_triage_file_is_one_line_and_exit_2_before_anything_runs(tmp_path, files, args, said):
    (tmp_path / "tiny.py").write_text(TINY)
    (tmp_path / "check.py").write_text(CHECK)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    done = mutate(tmp_path, tmp_path, *args, "--", sys.executable, "check.py")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(f"NOT RUN: {said}"), done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_ctrl_c_leaves_nothing_behind(tmp_path):
    project = copy_project(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    before = tree_digest(project)
    command = [sys.executable, "-m", "attnspec", "mutate", "-j", "2", "attention.py", "--", "pytest", "tests"]
    process = subprocess.Popen(
        command,
        cwd=project,
        env=environment(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl-C as a terminal delivers it, even when this run inherited SIGINT ignored (a shell's
        # background job does that): a Python that starts with it ignored keeps it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("[testing mutants") or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    assert left_in(tmp) == []
    assert tree_digest(project) == before and not (project / "attnspec-mutation").exists()
    time.sleep(1)
    assert alive_with(tmp) == ""


def test_the_kit_grades_itself_on_a_users_file_from_the_same_command(tmp_path):
    shutil.copy(REPO / "examples" / "toy_attention.py", tmp_path / "toy_attention.py")
    done = mutate(
        tmp_path,
        tmp_path,
        "--kit",
        "--impl",
        "toy_attention:attention",
        "toy_attention.py",
        "-k",
        "matches_the_oracle",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "conformance campaign: toy_attention:attention" in done.stdout and "kill matrix" in done.stdout


def started_campaign(tmp_path: Path) -> tuple[Path, Path, subprocess.Popen]:
    """The example project's campaign, started with a temporary folder of its own: (the project, that
    folder, the process, its output piped)."""
    project = copy_project(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    command = [sys.executable, "-m", "attnspec", "mutate", "-j", "2", "attention.py", "--", "pytest", "tests"]
    piped = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    process = subprocess.Popen(command, cwd=project, env=environment(tmp), **piped)
    assert process.stdout is not None
    return project, tmp, process


def test_sigterm_while_the_campaign_is_planned_is_an_interrupt(tmp_path):
    project, tmp, process = started_campaign(tmp_path)
    assert process.stdout is not None
    first = process.stdout.readline()  # the first line: the command is planning, no engine yet
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, first + output
    assert "interrupted: nothing was left behind" in output, first + output
    assert left_in(tmp) == [] and not (project / "attnspec-mutation").exists()


def test_reports_that_cannot_be_written_or_a_second_campaign_in_the_folder_stop_before_anything_runs(
    tmp_path,
):
    (tmp_path / "tiny.py").write_text(TINY)
    (tmp_path / "check.py").write_text(CHECK)
    (tmp_path / "notes.txt").write_text("a file, not a folder\n")
    into_a_file = ("--out", "notes.txt/reports")
    done = mutate(tmp_path, tmp_path, "tiny.py", *into_a_file, "--", sys.executable, "check.py")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("NOT RUN: the reports cannot be written into ")
    # a campaign that runs (its test command waits for a file), and a second one in the same folder
    (tmp_path / "slow_check.py").write_text(
        "import pathlib, time\nwhile not pathlib.Path('go').exists():\n    time.sleep(0.05)\n" + CHECK
    )
    command = [sys.executable, "-m", "attnspec", "mutate", "-j", "1", "tiny.py", "--", sys.executable]
    env = environment(tmp_path)
    piped = dict(stdout=subprocess.PIPE, text=True)
    first = subprocess.Popen([*command, "slow_check.py"], cwd=tmp_path, env=env, **piped)
    assert first.stdout is not None
    first.stdout.readline()  # planned: the lock is held
    second = mutate(tmp_path, tmp_path, "tiny.py", "--", sys.executable, "check.py")
    (tmp_path / "go").write_text("")
    first.communicate(timeout=300)
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    assert "NOT RUN: another attnspec mutate is running in " in second.stderr, second.stderr
    assert first.returncode in (0, 1)  # the first ran to its verdict


def test_sigkill_of_the_command_takes_its_engine_and_workspace_with_it(tmp_path):
    _, tmp, process = started_campaign(tmp_path)
    assert process.stdout is not None
    deadline = time.monotonic() + 120
    for line in process.stdout:
        if line.startswith(("[clean run", "[testing mutants")) or time.monotonic() > deadline:
            break
    assert list(tmp.iterdir()), "no workspace while the engine runs"
    process.kill()
    process.communicate(timeout=60)
    deadline = time.monotonic() + 30  # the engine hears of its parent's death, and cleans up
    while time.monotonic() < deadline and (left_in(tmp) or alive_with(tmp)):
        time.sleep(0.2)
    assert left_in(tmp) == [] and alive_with(tmp) == "", alive_with(tmp)


HANGING_TEST = """
import time

import tiny


def test_scores():
    assert abs(tiny.scores(2.0, 3.0, 4) - 3.0) < 1e-12


def test_waits_for_ever():
    while True:
        time.sleep(0.05)
"""


@pytest.mark.parametrize("command", ["pytest", "script"])
def test_a_test_that_hangs_in_the_clean_run_stops_the_campaign_named(tmp_path, command):
    # --timeout bounds each test of the clean run (a command counts as one); the campaign stops with the
    # stuck test named, exit 2, and leaves no process and no workspace
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "tiny.py").write_text(TINY)
    (tmp_path / "test_hangs.py").write_text(HANGING_TEST)
    (tmp_path / "check.py").write_text(CHECK)
    tests = ["pytest", "test_hangs.py"] if command == "pytest" else [sys.executable, "check.py", "3600"]
    started = time.monotonic()
    done = mutate(tmp_path, tmp, "tiny.py", "--timeout", "4", "--", *tests, timeout=300)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    stuck = "test_hangs.py::test_waits_for_ever" if command == "pytest" else "the test command"
    assert f"the clean run did not pass (failing: {stuck} (still running after 4 s" in done.stderr, (
        done.stderr
    )
    assert time.monotonic() - started < 120
    assert left_in(tmp) == [] and alive_with(tmp) == "", alive_with(tmp)
    assert not (tmp_path / "attnspec-mutation").exists()


def test_the_progress_line_names_a_test_of_the_clean_run_that_runs_long():
    watch = Watch(Path("."), started=time.monotonic())
    progress = {"phase": "clean run", "total": 40, "counts": {"tested": 12}, "eta": None}
    test = "tests/" + "deep/" * 20 + "test_x.py::test_waits"
    quick = dict(progress, running={"test": test, "since": time.time() - 1})
    assert watch.line(quick).endswith("12/40 tests")  # a test that runs a second: not named
    line = watch.line(dict(progress, running={"test": test, "since": time.time() - 75}))
    assert line.endswith("; running ..." + test[-(SHOWN_TEST_CHARS - 3) :] + " for 1m15s"), line


def test_a_workspace_left_by_a_campaign_killed_outright_is_removed_by_the_next(tmp_path):
    # the campaign and its engine both killed with SIGKILL: nobody removed the workspace; the next
    # campaign removes it, not one whose campaign still runs (its lock is held), nor a young one
    dead, running, young = (tmp_path / f"{WORKSPACE_PREFIX}{name}" for name in ("dead", "running", "young"))
    for folder in (dead, running, young):
        folder.mkdir()
        (folder / "plan.json").write_text("{}")
    for folder in (dead, running):
        os.utime(folder, (time.time() - 3600, time.time() - 3600))
    lock = os.open(running, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert collect_stale_workspaces(tmp_path) == [dead]
    finally:
        os.close(lock)
    assert sorted(tmp_path.iterdir()) == [running, young]
    # and a real campaign does so on its way
    os.utime(running, (time.time() - 3600, time.time() - 3600))
    (tmp_path / "tiny.py").write_text(TINY)
    (tmp_path / "check.py").write_text(CHECK)
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(tmp_path / "tiny.py", project)
    shutil.copy(tmp_path / "check.py", project)
    done = mutate(project, tmp_path, "tiny.py", "--", sys.executable, "check.py")
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    assert not running.exists() and young.exists()


def test_a_source_no_test_runs_is_not_graded_and_says_so_first(tmp_path):
    # a test command that never imports the source, and a source outside the project: every mutant "not
    # exercised" would grade nothing, so the summary begins by saying so, and the campaign exits 2
    project, outside = tmp_path / "project", tmp_path / "elsewhere"
    for folder in (project, outside):
        folder.mkdir()
    (project / "tiny.py").write_text(TINY)
    (outside / "tiny.py").write_text(TINY)
    (project / "check.py").write_text("assert 1 + 1 == 2\n")
    for source, why in (
        ("tiny.py", "the tests never import it, or never call its functions"),
        ("../elsewhere/tiny.py", "it is outside the project ("),
    ):
        done = mutate(project, tmp_path, source, "--", sys.executable, "check.py")
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        summary = done.stdout.split("NOT GRADED: ", 1)
        assert len(summary) == 2 and summary[1].startswith("no test ran a line of "), done.stdout
        assert why in summary[1].splitlines()[0], summary[1].splitlines()[0]
        assert "\n\nmutation campaign of `" in summary[1], summary[1]  # then the summary as usual
