"""Hostile targets and hostile conditions against `attnspec check`: each case ends in a verdict that
names what the target did, with no traceback of the kit's, and leaves nothing behind: no process, no
temporary folder, no change to the user's files but the reports asked for.

The targets are the toy kernel (examples/toy_attention.py) with one misbehaviour each: it prints
megabytes, starts processes it never ends, raises KeyboardInterrupt or SystemExit, answers the same
call differently now and then, returns a tuple once past its first calls.  The conditions: two checks
in one folder, a folder where attnspec-failures/ cannot be made, report paths that are FIFOs, devices
or empty, numbers out of range, and a check killed with SIGKILL.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnspec.cli import FAILURES
from attnspec.runner import folders
from attnspec.runner.pytest_plugin import HYPOTHESIS_HOME_PREFIX
from tests.fixtures.kit_runs import alive_with, left_in, run_module, tree_digest, users_env

REPO = Path(__file__).resolve().parents[2]
TOY = (REPO / "examples" / "toy_attention.py").read_text()
ONE = ("-k", "test_masked_weights_are_exactly_zero", "--profile", "quick", "--seed", "1")  # the same cases


def toy_but(body: str, setup: str = "") -> str:
    """The toy kernel, with ``body`` run before each call returns ``result`` (the toy's answer)."""
    indented = "\n".join("    " + line for line in body.strip().splitlines())
    return f"""
import os
import subprocess
import sys
import time

import toy
{setup}

def attention(q, k, v, **kwargs):
    result = toy.attention(q, k, v, **kwargs)
{indented}
    return result


attention.capabilities = toy.attention.capabilities
"""


# a masked weight set to 0.25 (head 0, query 0's first future key) on every causal call of two queries
# or more, for a target that must fail
LEAK = """
if kwargs.get("return_weights") and kwargs.get("causal", True) and q.shape[2] >= 2:
    weights = result[1].clone()
    weights[0, 0, 0, k.shape[2] - q.shape[2] + 1] = 0.25
    result = (result[0], weights)
"""
TARGETS = {
    # 200 kB to each stream on every call (about 100 MB over a check), and a leak
    "chatty": toy_but(
        'sys.stdout.write("x" * 200_000 + "\\n")\nsys.stderr.write("y" * 200_000 + "\\n")\n' + LEAK
    ),
    # a child process on its first two calls, one in a session of its own, never waited for
    "spawner": toy_but(
        'if len(STARTED) < 2:\n    STARTED.append(subprocess.Popen(["sleep", "600"], '
        "start_new_session=bool(STARTED)))",
        "STARTED = []",
    ),
    "interrupts": toy_but("if q.shape[2] >= 6:\n    raise KeyboardInterrupt"),
    "exits_quietly": toy_but("if q.shape[2] >= 6:\n    raise SystemExit(0)"),
    # another answer on every 50th call: a cache that goes stale, a race
    "flaky": toy_but(
        "CALLS.append(1)\nif len(CALLS) % 50 == 0:\n    result = (result[0] + 0.5, result[1]) "
        "if isinstance(result, tuple) else result + 0.5",
        "CALLS = []",
    ),
    # a tuple once past its first three calls (the kit's probe makes those)
    "retyped": toy_but("CALLS.append(1)\nif len(CALLS) > 3:\n    result = (result,)", "CALLS = []"),
    "leaks": toy_but(LEAK),
    "leaks_slowly": toy_but(LEAK + "time.sleep(0.01)"),  # a check of several seconds
}


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("hostile")
    (cwd / "toy.py").write_text(TOY)
    for name, source in TARGETS.items():
        (cwd / f"{name}.py").write_text(source)
    return cwd


def check(cwd: Path, tmp: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`attnspec check ARGS` in ``cwd``, its temporary folder ``tmp`` (forked from the warm kit server;
    the processes a target starts carry TMPDIR, for alive_with)."""
    env = {**users_env(), "TMPDIR": str(tmp)}
    return run_module([sys.executable, "-m", "attnspec", "check", *args], cwd, env, timeout)


def said(done: subprocess.CompletedProcess) -> str:
    return done.stdout[-3000:] + done.stderr[-3000:]


def running_check(cwd: Path, tmp: Path, *args: str) -> subprocess.Popen:
    """`attnspec check ARGS` started in a new interpreter and a session of its own (its temporary folder
    ``tmp``), returned once its properties run (its first progress mark)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "attnspec", "check", *args],
        cwd=cwd,
        env={**users_env(), "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert process.stdout is not None
    while process.stdout.read(1) not in (b".", b"F", b""):
        pass
    return process


def assert_clean(done: subprocess.CompletedProcess, tmp: Path) -> None:
    """No traceback shown, no process nor temporary folder left."""
    assert "Traceback (most recent call last)" not in done.stdout + done.stderr, said(done)
    time.sleep(0.2)
    assert left_in(tmp) == [] and alive_with(tmp) == "", (left_in(tmp), alive_with(tmp))


def test_a_target_that_prints_megabytes_shows_the_last_part_of_its_output(user_dir: Path, tmp_path: Path):
    """The output a failing property captured (pytest shows it with --tb) is kept to its last 64 kB a
    stream, saying how much was dropped: the check's process reads each byte once, and what it shows
    stays readable."""
    done = check(user_dir, tmp_path, "chatty:attention", *ONE, "--tb", "short")
    assert done.returncode == 1, said(done)
    assert len(done.stdout) < 1_000_000, len(done.stdout)
    dropped = r"\[attnspec: [\d,]+ characters of earlier output dropped, the last 65,536 kept\]"
    assert len(re.findall(dropped, done.stdout)) == 2, said(done)  # stdout and stderr
    assert done.stdout.strip().splitlines()[-1].startswith("FAIL: --impl chatty:attention breaks ATTN-2")
    assert_clean(done, tmp_path)


def test_the_processes_a_target_leaves_running_are_ended_and_named(user_dir: Path, tmp_path: Path):
    done = check(user_dir, tmp_path, "spawner:attention", *ONE)
    assert done.returncode == 0, said(done)
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(
        r"the target left \d+ process(es)? running \(sleep 600.*\): the check ended them", lines[-2]
    )
    assert lines[-1].startswith("PASS: --impl spawner:attention")
    assert_clean(done, tmp_path)


@pytest.mark.parametrize(
    "target, raised", [("interrupts", "KeyboardInterrupt"), ("exits_quietly", "SystemExit")]
)
def test_a_target_that_raises_keyboardinterrupt_or_systemexit_fails_that_call(
    user_dir: Path, tmp_path: Path, target: str, raised: str
):
    """Not an interrupt of the run, nor a worker's death outside any call: the call's failure, named
    once with where the target raised it, and the rest of the run goes on."""
    done = check(user_dir, tmp_path, f"{target}:attention", "-k", "oracle or shapes", "--profile", "quick")
    assert done.returncode == 1, said(done)
    line = [line for line in done.stdout.splitlines() if line.startswith("the target raised")]
    assert len(line) == 1 and f"raised {raised}(" in line[0] and f"{target}.py, line" in line[0], said(done)
    assert re.search(r"\(\d+ propert(y|ies)\), first on B=\d+, ", line[0]), line[0]
    verdict = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"FAIL: --impl {target}:attention raises {raised} \(\d+ failed, [1-9]\d* passed.*\)", verdict
    )
    assert_clean(done, tmp_path)


def test_a_target_that_answers_the_same_call_differently_is_told_so_first(user_dir: Path, tmp_path: Path):
    done = check(user_dir, tmp_path, "flaky:attention", "--profile", "quick")
    assert done.returncode == 1, said(done)
    diagnosis = [line for line in done.stdout.splitlines() if line.startswith("diagnosis: ")]
    assert diagnosis and diagnosis[0].startswith(
        "diagnosis: nondeterministic: the same inputs gave different outputs on two calls"
    ), said(done)
    assert_clean(done, tmp_path)


def test_a_target_whose_return_type_changes_after_its_first_call_is_told_what_it_returned(
    user_dir: Path, tmp_path: Path
):
    done = check(user_dir, tmp_path, "retyped:attention", "-k", "oracle or shapes", "--profile", "quick")
    assert done.returncode == 1, said(done)
    assert "AttributeError" not in done.stdout, said(done)
    assert re.search(
        r"^the target returned a tuple of 1 where a tensor is due \(\d+ properties\)", done.stdout, re.M
    )
    assert re.fullmatch(
        r"FAIL: --impl retyped:attention returns a tuple \(.*\)", done.stdout.strip().splitlines()[-1]
    )
    assert_clean(done, tmp_path)


def test_a_second_check_in_the_same_folder_is_refused_and_the_first_keeps_its_report(
    user_dir: Path, tmp_path: Path
):
    # a check that runs on for seconds after its first test, holding the folder
    first = running_check(user_dir, tmp_path, "leaks_slowly:attention", "--profile", "quick")
    second = check(user_dir, tmp_path, "toy:attention", *ONE)
    output = first.communicate(timeout=600)[0].decode(errors="replace")
    assert second.returncode == 2, said(second)
    assert second.stdout.strip().splitlines() == [
        f"NOT CHECKED: another attnspec check is running in {user_dir} and writes {FAILURES}/ there: wait "
        "for it to end, or run this one from another folder"
    ]
    assert first.returncode == 1, output[-3000:]
    assert "test_masked_weights_are_exactly_zero" in (user_dir / FAILURES / "report.txt").read_text()
    time.sleep(0.2)
    assert left_in(tmp_path) == [] and alive_with(tmp_path) == ""


def test_a_failure_stands_where_its_folder_cannot_be_written(user_dir: Path, tmp_path: Path):
    """A file where attnspec-failures/ would go (as good as a read-only checkout): the verdict is FAIL
    still, and the report is in a temporary folder the check names."""
    blocked = tmp_path / "project"
    blocked.mkdir()
    for name in ("toy.py", "leaks.py"):
        (blocked / name).write_text((user_dir / name).read_text())
    (blocked / FAILURES).write_text("not a folder")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = check(blocked, temporary, "leaks:attention", *ONE)
    assert done.returncode == 1, said(done)
    found = re.search(
        rf"^every failure in full: ({re.escape(str(temporary))}/attnspec-failures-\w+/report\.txt) "
        rf"\({FAILURES}/ cannot be written in {re.escape(str(blocked))}: File exists\)$",
        done.stdout,
        re.M,
    )
    assert found and Path(found.group(1)).is_file(), said(done)
    assert done.stdout.strip().splitlines()[-1].startswith("FAIL: --impl leaks:attention breaks ATTN-2")


A_FILE, A_FOLDER = "give the path of a file to write", "give a folder for the failing examples"


@pytest.mark.parametrize(
    "args, line",
    [
        (["--junitxml", "fifo"], "NOT CHECKED: --junitxml fifo: not a regular file; " + A_FILE),
        (["--junitxml", "/dev/full"], "NOT CHECKED: --junitxml /dev/full: not a regular file; " + A_FILE),
        (["--junitxml", "."], "NOT CHECKED: --junitxml .: a folder; " + A_FILE),
        (["--junitxml="], "NOT CHECKED: --junitxml: an empty path; give a path"),
        (["--db="], "NOT CHECKED: --db: an empty path; give a path"),
        (["--db", "toy.py"], "NOT CHECKED: --db toy.py: not a folder; " + A_FOLDER),
        (["--budget", "inf"], "argument --budget: must be a finite number more than 0, got inf"),
        (["--timeout", "1e-9"], "argument --timeout: must be at least 0.5 s, got 1e-9"),
        (["--max-memory", "1e12"], "argument --max-memory: must be at most 8589934592 GiB (0: no cap), got 1e12"),  # noqa: E501
    ],
)  # fmt: skip
def test_a_path_or_number_it_cannot_use_is_refused_before_anything_runs(
    user_dir: Path, tmp_path: Path, args: list[str], line: str
):
    fifo = user_dir / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    before = tree_digest(user_dir)
    done = check(user_dir, tmp_path, "leaks:attention", *ONE, *args, timeout=60)
    assert done.returncode == 2, said(done)
    assert line in (done.stdout + done.stderr).strip().splitlines()[-1], said(done)
    assert tree_digest(user_dir) == before  # no report written, an earlier one kept
    assert_clean(done, tmp_path)


def test_the_temporary_folder_of_a_check_killed_with_sigkill_goes_with_the_next_check(
    user_dir: Path, tmp_path: Path
):
    process = running_check(user_dir, tmp_path, "toy:attention")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    time.sleep(0.5)  # the workers' parent-death signal
    left = [name for name in left_in(tmp_path) if name.startswith(HYPOTHESIS_HOME_PREFIX)]
    assert len(left) == 1, left_in(tmp_path)
    past = time.time() - 2 * folders.STALE_AFTER_S
    os.utime(tmp_path / left[0], (past, past))
    done = check(user_dir, tmp_path, "toy:attention", *ONE)
    assert done.returncode == 0, said(done)
    assert_clean(done, tmp_path)


def test_the_plugins_kit_tests_leave_no_hypothesis_files_in_the_project(user_dir: Path, tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "toy.py").write_text(TOY)
    (project / "test_mine.py").write_text("def test_mine():\n    assert True\n")
    before = tree_digest(project)
    done = run_module(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--attnspec", "toy:attention",
         "--attnspec-profile", "quick", "-k", "test_masked_weights_are_exactly_zero or test_mine"],
        project, users_env(),
    )  # fmt: skip
    assert done.returncode == 0, said(done)
    assert not (project / ".hypothesis").exists()
    assert tree_digest(project) == before  # (your pytest writes its bytecode where it does)
