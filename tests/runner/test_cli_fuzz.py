"""A fuzz of the command lines: random argument lists and malformed files against `attnspec check`,
`attnspec mutate` and `python -m campaigns`.  Whatever it is given, a command answers with its documented
exit codes (0, 1, 2; 4 never) and never shows the user a traceback.

Each case forks from the warm kit server (kit_runs.py), so a case costs what the command does: the
default profile draws 40 cases per command, HYPOTHESIS_PROFILE=ci 150 and thorough 500.  The cases that
would start real work are kept cheap: a check always ends with ``--profile quick`` and a ``-k`` that
selects one property; a campaign's test command fails at once; `python -m campaigns` always gets one
argument it must refuse (it would otherwise run the main job)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.kit_runs import left_in, left_running, run_module, tree_digest, users_env

REPO = Path(__file__).resolve().parents[2]
TOY = (REPO / "examples" / "toy_attention.py").read_text()
CASES = {"quick": 10, "default": 40, "ci": 150, "thorough": 500}[
    os.environ.get("HYPOTHESIS_PROFILE", "default")
]
FUZZ = settings(
    max_examples=CASES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# values a user might type, or mistype, for anything
WORDS = [
    "",
    " ",
    "-",
    "--",
    "0",
    "-1",
    "1",
    "3",
    "1e309",
    "nan",
    "inf",
    "-inf",
    "1/0",
    "2/1",
    "x",
    "é",
    "toy:attention",
    "toy:",
    ":attention",
    ":",
    "toy",
    "toy.py",
    "toy.py:attention",
    "nope:attention",
    "syntax:attention",
    "syntax.py",
    "binary.py",
    "empty.py",
    "folder",
    "folder/",
    "missing.py",
    "bad.toml",
    "triage.toml",
    "/",
    "a" * 300,
    "impl",
    "torch",
    "hf-llama",
    "cpu",
    "cuda",
    "meta",
    "cuda:7",
    "long",
    "short",
    "no",
    "quick",
    "ci",
    "--help",
    "fifo",
    "/dev/full",
    "/dev/null",
]
FILES = {
    "toy.py": TOY,
    "syntax.py": "def attention(q, k, v\n    return q\n",
    "empty.py": "",
    "bad.toml": "[[survivor]\nmutant = ",
    "triage.toml": '[[survivor]]\nmutant = 3\nreason = ["x"]\n',
}
CHECK_OPTIONS = [
    "--profile",
    "--device",
    "-k",
    "--junitxml",
    "--db",
    "--budget",
    "-j",
    "--jobs",
    "--timeout",
    "--max-memory",
    "--seed",
    "--tb",
    "-x",
    "-v",
    "-vv",
    "--bogus",
]
MUTATE_OPTIONS = [
    "--kit",
    "--impl",
    "-k",
    "--since",
    "--incremental",
    "--out",
    "-j",
    "--workers",
    "--triage",
    "--timeout",
    "--github-annotations",
    "--list-faults",
    "--bogus",
]
FAILS_AT_ONCE = [sys.executable, "-c", "raise SystemExit(3)"]
MUTANTS_REFUSED = [
    ["--shard", "0/0"], ["--shard", "3/2"], ["--shard", "x"], ["--min-strength", "abc"],
    ["--max-children", "-4"], ["--target", "no-such-adapter"], ["--source", "missing.py"], ["--bogus"],
]  # fmt: skip


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("fuzz")
    for name, text in FILES.items():
        (cwd / name).write_text(text)
    (cwd / "binary.py").write_bytes(b"\x00\xff\xfe" * 100)
    (cwd / "folder").mkdir()
    os.mkfifo(cwd / "fifo")  # a report written there, or a file read from it, would wait forever
    return cwd


# values that make sense for an option, besides any word
VALUES = {
    "--profile": ["quick", "default"], "--device": ["cpu", "meta", "cuda"],
    "-k": ["oracle", "shapes", "none"], "-j": ["1", "2", "64", "999999"],
    "--jobs": ["1", "3"], "--timeout": ["0.001", "1", "60", "1e-9", "inf"],
    "--max-memory": ["0", "0.001", "4", "1e12", "inf"], "--tb": ["long", "no"],
    "--seed": ["0", "7", "-1", "99999999999999999999"], "--db": ["db", "folder", "", "fifo", "toy.py"],
    "--junitxml": ["out.xml", "folder", "missing/out.xml", "", "fifo", "/dev/full"],
    "--impl": ["toy:attention", "impl"], "--since": ["HEAD", "nope"],
    "--out": ["reports", "toy.py", "/proc/none", "", "fifo"], "--workers": ["1", "0", "999999"],
    "--triage": ["bad.toml", "triage.toml", "missing.toml", "folder", "fifo", "/dev/null"],
    "--budget": ["0.5", "30", "inf", "1e308"],
}  # fmt: skip


def words(options: list[str], first: list[str]) -> st.SearchStrategy[list[str]]:
    """An argument list: mostly a plausible first argument, then options, mostly with a value that
    makes sense for them, now and then a stray word."""
    pair = st.sampled_from(options).flatmap(
        lambda option: (st.sampled_from(VALUES.get(option, WORDS)) | st.sampled_from(WORDS)).map(
            lambda value: [option, value]
        )
    )
    flag = st.sampled_from(options).map(lambda option: [option])
    stray = st.sampled_from(WORDS).map(lambda word: [word])
    parts = st.lists(st.one_of(pair, pair, flag, stray), max_size=3)
    return st.tuples(st.sampled_from(first) | st.sampled_from(WORDS), parts).map(
        lambda drawn: [drawn[0], *(word for part in drawn[1] for word in part)]
    )


def answered(cwd: Path, command: list[str]) -> None:
    """``python -m attnspec COMMAND`` (or ``python -m campaigns``, from the repository) answers as
    documented: a known exit code, no traceback, the user's own files as they were (a report or a
    database it was asked to write may come and go), no process left running and nothing left in its
    temporary folder."""
    before = tree_digest(cwd) if cwd != REPO else {}
    module = "campaigns" if cwd == REPO else "attnspec"
    with tempfile.TemporaryDirectory(prefix="fuzz-tmp-") as tmp:
        env = {**users_env(), "TMPDIR": tmp}
        done = run_module([sys.executable, "-m", module, *command], cwd, env, timeout=300)
        left = left_in(Path(tmp))
    output = done.stdout + done.stderr
    assert "Traceback (most recent call last)" not in output, (command, output[-3000:])
    assert done.returncode in (0, 1, 2), (command, done.returncode, output[-3000:])
    assert left_running(done) == [] and left == [], (command, left_running(done), left)
    if cwd != REPO:
        outputs = named_outputs(command)  # a file the user asked it to write there may change
        assert users_files(tree_digest(cwd), outputs) == users_files(before, outputs), command


OUTPUTS = ("--junitxml", "--db", "--out")  # the options that name a path the command writes


def named_outputs(command: list[str]) -> set[str]:
    return {value for option, value in zip(command, command[1:], strict=False) if option in OUTPUTS}


def users_files(digests: dict[str, str], outputs: set[str] = frozenset()) -> dict[str, str]:
    return {
        name: digest
        for name, digest in digests.items()
        if (name in FILES or name == "binary.py") and name not in outputs
    }


@FUZZ
@given(args=words(CHECK_OPTIONS, ["toy:attention", "toy.py:attention", "syntax:attention", "impl"]))
def test_attnspec_check_answers_any_command_line(fuzz_dir: Path, args: list[str]):
    if any(word in ("-h", "--help") for word in args):
        return  # help exits 0 and prints usage: nothing to fuzz
    answered(fuzz_dir, ["check", *args, "--profile", "quick", "-k", "test_output_and_weight_shapes"])


@FUZZ
@given(
    args=words(MUTATE_OPTIONS, ["toy.py", "syntax.py", "binary.py", "empty.py", "folder"]),
    dashes=st.booleans(),
)
def test_attnspec_mutate_answers_any_command_line(fuzz_dir: Path, args: list[str], dashes: bool):
    if any(word in ("-h", "--help") for word in args):
        return
    command = ["mutate", *args, *(["--", *FAILS_AT_ONCE] if dashes else [])]
    answered(fuzz_dir, command + (["-k", "test_output_and_weight_shapes"] if "--kit" in args else []))


@FUZZ
@given(
    subcommand=st.sampled_from(["run", "merge", "table", "", "bogus"]),
    args=st.lists(st.sampled_from(WORDS), max_size=3),
    refused=st.sampled_from(MUTANTS_REFUSED),
)
def test_python_m_mutants_answers_any_command_line(tmp_path_factory, subcommand, args, refused):
    out = tmp_path_factory.mktemp("merged")
    if subcommand == "merge":  # folders that are no shard's reports, merged into a folder of the test's
        command = ["merge", "--out", str(out), *(args or ["missing"])]
    else:
        command = [subcommand, *refused, *args] if subcommand else [*refused, *args]
    if any(word in ("-h", "--help") for word in command) or command[:1] == ["table"]:
        return  # help prints usage; table rewrites the docs' table from the reports (no input to refuse)
    answered(REPO, command)
