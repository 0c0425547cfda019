"""`attnspec check`, `attnspec specs` and `attnspec conventions` as a user meets them, run as
`python -m attnspec` from a directory of the user's own modules (forked from the warm kit server, which
is a fresh interpreter's run: test_kit_runs.py; test_install.py runs them from the wheel).

A failing check leads with the failures in brief (no tracebacks unless asked for), a module that
does not import gets one line, a user's test ids carry no impl attention path, and the catalogue
and the conventions print without a checkout."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

import attnspec
import attnspec.cli
from attnspec.cli import FAILURES
from attnspec.kit.run_report import Failure, RunReport, error_in_brief, short_test_name
from attnspec.kit.target_checks import load_problem
from tests.fixtures.kit_runs import alive_with, left_in, run_module, tree_digest, users_env

REPO = Path(__file__).resolve().parents[2]
TOY = (REPO / "examples" / "toy_attention.py").read_text()


def leaking(condition: str, entry: str) -> str:
    """The toy target with one masked weight set to 0.25 at ``entry`` of the weights wherever
    ``condition`` (on tq, tk and the number of heads h) holds."""
    return f"""
import toy

def attention(q, k, v, **kwargs):
    result = toy.attention(q, k, v, **kwargs)
    if not kwargs.get("return_weights"):
        return result
    out, weights = result
    weights = weights.clone()
    h, tq, tk = weights.shape[1], weights.shape[2], weights.shape[3]
    if {condition}:
        weights[{entry}] = 0.25
    return out, weights

attention.capabilities = toy.attention.capabilities
"""


# exactly one masked weight that is not zero: batch 0, head 1, query 0, key 3 (in the future of
# query 0 wherever Tk - Tq < 3)
LEAK = leaking("h > 1 and tq > 0 and tk > 3", "0, 1, 0, 3")

# a masked weight that is not zero in every call with two queries or more: query 0's first future key,
# head 0, so that every property that reads weights fails on nearly every example (the --jobs comparison
# needs the same failures from two runs that draw their own examples)
LEAKS_OFTEN = leaking("tq >= 2 and tk >= 2", "0, 0, 0, tk - tq + 1")


# kernels that break the process they run in on calls of six queries or more (the target's first
# call, the kit's probe, has fewer), and one that does on every call
def hostile(statement: str, condition: str = "q.shape[2] >= 6") -> str:
    return f"""
import ctypes
import os
import time

import torch

import toy


def attention(q, k, v, **kwargs):
    if {condition}:
        {statement}
    return toy.attention(q, k, v, **kwargs)


attention.capabilities = toy.attention.capabilities
"""


HOSTILE = {
    "exits": hostile("os._exit(3)"),
    "segfaults": hostile("ctypes.string_at(0)"),
    "greedy": hostile("torch.ones(50 * 2**30 // 4)"),  # 50 GiB
    "spins": hostile("while True: pass", "q.shape[0] == 2"),
    "sleeps": hostile("time.sleep(3600)", "q.shape[0] == 2"),
    "exits_at_once": hostile("os._exit(3)", "True"),
}


def attnspec_command(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m attnspec ARGS` in ``cwd``, with none of this run's settings for the kit (forked from
    the warm kit server: test_kit_runs.py shows that is a new interpreter's run), and ``env`` besides."""
    return run_module([sys.executable, "-m", "attnspec", *args], cwd, {**users_env(), **(env or {})})


# a kernel that raises on what it cannot take: an odd head size, more than 40 queries (each written
# as it comes; the declared twins say so)
REFUSING = """
import toy


def attention(q, k, v, **kwargs):
    if q.shape[-1] % 2:
        raise ValueError(f"head size must be even, got {q.shape[-1]}")
    if q.shape[-2] > 40:
        raise ValueError(f"at most 40 queries, got {q.shape[-2]}")
    if q.shape[0] > 2:
        raise ValueError(f"at most 2 sequences, got {q.shape[0]}")
    return toy.attention(q, k, v, **kwargs)


attention.capabilities = toy.attention.capabilities - {"weights"}
"""


# a kernel "for inference" that switches autograd off for the whole process on its first call
LEAKY = """
import torch

import toy


def attention(q, k, v, **kwargs):
    torch.set_grad_enabled(False)
    return toy.attention(q, k, v, **kwargs)


attention.capabilities = toy.attention.capabilities
"""


# the toy kernel at 0.3 s a call: eager FlexAttention on a CPU, a kernel that computes on the host
SLOW = """
import time

import toy


def attention(q, k, v, **kwargs):
    time.sleep(0.3)
    return toy.attention(q, k, v, **kwargs)


attention.capabilities = toy.attention.capabilities - {"weights"}
"""


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("user")
    (cwd / "toy.py").write_text(TOY)
    (cwd / "leak.py").write_text(LEAK)
    (cwd / "leaks_often.py").write_text(LEAKS_OFTEN)
    for name, source in HOSTILE.items():
        (cwd / f"{name}.py").write_text(source)
    (cwd / "refusing.py").write_text(REFUSING)
    (cwd / "leaky.py").write_text(LEAKY)
    (cwd / "slow.py").write_text(SLOW)
    limits = "attention.head_dims = (2, 4, 8)\nattention.max_len = 40\nattention.max_batch = 2\n"
    (cwd / "declares.py").write_text(REFUSING + "\n" + limits)
    (cwd / "syntax.py").write_text("def attention(q, k, v\n    return q\n")
    (cwd / "raises.py").write_text("import toy\n\nraise RuntimeError('no GPU found at import')\n")
    return cwd


@pytest.fixture(scope="module")
def leaking(user_dir: Path) -> subprocess.CompletedProcess:
    return attnspec_command(user_dir, "check", "leak:attention", "-k", "test_masked_weights_are_exactly_zero")


def test_a_failure_is_a_block_for_its_requirement_with_its_smallest_case_and_no_traceback(leaking, user_dir):
    assert leaking.returncode == 1, leaking.stdout[-3000:] + leaking.stderr[-2000:]
    lines = leaking.stdout.strip().splitlines()
    # the requirement and its statement, then what failed, on which case, and how to run it again
    at = lines.index(
        "ATTN-2  Weights on masked keys (future keys, keys outside the window) are exactly zero."
    )
    failed, case, rerun = lines[at + 1 : at + 4]
    assert failed.startswith(
        "  failed  test_attention.py::test_masked_weights_are_exactly_zero: weights on future / "
        "out-of-window keys (W="
    ), failed
    # the masked weight by its (batch, head, query, key), not by its index among the masked weights
    assert re.search(
        r"at \(batch, head, query, key\) = \(0, 1, 0, 3\): key 3 is after query 0's position", failed
    )
    # Hypothesis's case without its heading, its comments or the device
    assert re.match(
        r" {2}case {4}test_masked_weights_are_exactly_zero\(case=AttnCase\(batch=1, .*\)", case
    ), case
    assert "# " not in case and "device=" not in case, case
    # the leak is in the weights alone: no call's output misses the oracle, so the property reruns alone
    assert rerun == "  rerun   attnspec check leak:attention -k 'test_masked_weights_are_exactly_zero'", rerun
    # no traceback, no test source, nothing from site-packages, no pytest short summary
    text = leaking.stdout + leaking.stderr
    for word in ("Traceback", "site-packages", "def test_", "AssertionError", "short test summary", "____"):
        assert word not in text, word
    # no Hypothesis patch of the kit's own files (libcst is installed with the mutation extra), and no
    # .hypothesis/ folder at all in the user's (no database without --db, no cache of constants)
    assert "git apply" not in text and not (user_dir / ".hypothesis").exists()
    assert len(lines) < 15, leaking.stdout
    # the whole report in a file; the capabilities in one line; the verdict last
    assert "every failure in full: attnspec-failures/report.txt" in lines
    report = (user_dir / "attnspec-failures" / "report.txt").read_text()
    assert "def test_masked_weights_are_exactly_zero" in report and "AssertionError" in report
    assert lines[-2].startswith("capabilities of --impl leak:attention: blind, decode, documents"), lines[-2]
    assert lines[-1] == "FAIL: --impl leak:attention breaks ATTN-2 (1 failed, 0 passed, 0 skipped)", lines[-1]
    assert not any(line.startswith("diagnosis:") for line in lines)  # nothing to say: no line


def test_tracebacks_on_request(user_dir: Path):
    done = attnspec_command(
        user_dir, "check", "leak:attention", "-k", "test_masked_weights_are_exactly_zero", "--tb", "long"
    )
    assert done.returncode == 1, done.stdout[-3000:]
    assert "def test_masked_weights_are_exactly_zero" in done.stdout
    assert re.search(r"^E +AssertionError: weights on future", done.stdout, re.M)
    # the blocks follow the tracebacks, then the capabilities and the verdict
    block = done.stdout.index("\nATTN-2  Weights on masked keys")
    assert done.stdout.index("AssertionError") < block < done.stdout.index("capabilities of --impl")
    assert done.stdout.strip().splitlines()[-1].startswith("FAIL: --impl leak:attention breaks ATTN-2")


@pytest.mark.parametrize(
    "target, line",
    [
        (
            "syntax:attention",
            r"--impl syntax:attention: syntax cannot be imported: SyntaxError at "
            r"\S*syntax\.py, line 1: '\(' was never closed",
        ),
        (
            "raises:attention",
            r"--impl raises:attention: raises cannot be imported: RuntimeError at "
            r"\S*raises\.py, line 3: no GPU found at import",
        ),
    ],
    ids=["a syntax error", "an exception at import"],
)
def test_a_module_that_raises_at_import_gets_one_line(user_dir: Path, target: str, line: str):
    done = attnspec_command(user_dir, "check", target)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "INTERNALERROR" not in done.stdout + done.stderr
    errors = [text for text in done.stderr.splitlines() if text.strip()]
    assert len(errors) == 1 and re.fullmatch("ERROR: " + line, errors[0]), done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"NOT CHECKED: {target} could not be checked (see above)"


def test_a_users_test_ids_carry_no_attention_path(user_dir: Path):
    done = attnspec_command(user_dir, "check", "toy:attention", "-k", "test_matches_the_oracle", "-v")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "test_attention.py::test_matches_the_oracle[torch.float32] PASSED" in done.stdout
    assert "[explicit" not in done.stdout and "[tiled" not in done.stdout


def failures_in_brief(stdout: str) -> list[str]:
    """The blocks, each as its requirement and its failed test (the message's numbers and the case are
    those of the example Hypothesis found, which may differ from run to run)."""
    lines = stdout.splitlines()
    return [
        f"{line.split()[0]} {lines[i + 1].split(': ', 1)[0].split()[-1]}"
        for i, line in enumerate(lines)
        if re.match(r"[A-Z]+-\d+  ", line)
    ]


def junit_counts(path: Path) -> dict[str, str]:
    suite = ElementTree.parse(path).getroot().find("testsuite")
    assert suite is not None, path.read_text()[:2000]
    return {key: suite.get(key, "") for key in ("tests", "failures", "errors", "skipped")}


def test_the_jobs_report_what_one_process_reports(user_dir: Path):
    """--jobs 3 forks two workers once the properties are collected: the same failures in brief (in the
    order of the collection), table, verdict, exit code and JUnit counts as one process."""
    runs = {}
    for jobs in ("1", "3"):
        junit = user_dir / f"jobs{jobs}.xml"
        selected = "masked or sum_to_one or raising_a_sink or test_matches_the_oracle or batch_elements"
        # one database for both (--db): the second run replays the failing examples the first found
        done = attnspec_command(
            user_dir,
            "check",
            "leaks_often:attention",
            "-k",
            selected,
            "-j",
            jobs,
            f"--junitxml={junit}",
            "--db",
            "db",
        )
        assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
        table = done.stdout[done.stdout.index("capabilities of --impl") :]
        runs[jobs] = (failures_in_brief(done.stdout), table, junit_counts(junit))
    assert len(runs["1"][0]) >= 3, runs["1"][0]
    assert runs["3"] == runs["1"]
    assert any((user_dir / "db").iterdir()), "--db kept no example"


def hostile_check(cwd: Path, tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """`attnspec check ARGS` in a new interpreter whose temporary folder is ``tmp`` (alive_with finds its
    processes by it), and how long it took."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "attnspec", "check", *args],
        cwd=cwd,
        env={**users_env(), "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done, time.monotonic() - started


SELECTED = "test_matches_the_oracle or test_masked_weights_are_exactly_zero or test_batch_elements"


@pytest.mark.parametrize(
    "target, said, verdict",
    [
        ("exits", "the target ended the process (exit code 3)", "ends the process"),
        ("segfaults", "the target crashed the process (signal 11, SIGSEGV)", "crashes the process"),
        ("greedy", "the target exhausted memory: it asked for 50.0 GiB", "exhausts memory"),
    ],
)
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_target_that_breaks_its_process_fails_the_property_and_the_rest_runs(
    user_dir: Path, tmp_path: Path, target: str, said: str, verdict: str, jobs: str
):
    """A crash, an exit or a runaway allocation on some inputs fails the properties it happened in, said
    once with its call; every other test still runs (the counts add up to a correct target's), and no
    process, temporary folder or change of the user's files is left."""
    check = ("-k", SELECTED, "--profile", "quick", "-j", jobs)
    correct, _ = hostile_check(user_dir, tmp_path, "toy:attention", *check)
    assert correct.returncode == 0, correct.stdout[-3000:] + correct.stderr[-3000:]
    everything = sum(map(int, re.search(r"\((\d+) passed, (\d+) skipped", correct.stdout).groups()))
    before = tree_digest(user_dir, but=FAILURES)
    done, _ = hostile_check(user_dir, tmp_path, f"{target}:attention", *check)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(said)]
    assert len(lines) == 1 and re.search(r"\(\d+ propert(y|ies)\), first on B=\d+, ", lines[0]), done.stdout
    last = done.stdout.strip().splitlines()[-1]
    counts = re.fullmatch(
        rf"FAIL: --impl {target}:attention {verdict} \((\d+) failed, (\d+) passed, (\d+) skipped\)", last
    )
    assert counts, last
    assert sum(map(int, counts.groups())) == everything, (last, everything)
    assert tree_digest(user_dir, but=FAILURES) == before
    assert left_in(tmp_path) == [] and alive_with(tmp_path) == ""


@pytest.mark.parametrize("target", ["spins", "sleeps"])
def test_a_target_that_hangs_fails_within_the_hang_budget(user_dir: Path, tmp_path: Path, target: str):
    """A target that hangs on every batch of two (in Python, or in a call that never returns) costs the
    check a few timeouts, not one per property: it stops after three hangs and fails."""
    done, took = hostile_check(user_dir, tmp_path, f"{target}:attention", "--timeout", "2")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    said = [
        line for line in done.stdout.splitlines() if line.startswith("the target hung: one call ran over 2 s")
    ]
    assert len(said) == 1 and "first on B=2, " in said[0], done.stdout
    assert re.search(r"the target hung \d times: the check stopped there, \d+ tests not run", done.stdout)
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"FAIL: --impl {target}:attention hangs \(\d failed, \d+ passed, \d+ skipped, \d+ not run\)", last
    ), last
    assert took < 120, took
    assert left_in(tmp_path) == [] and alive_with(tmp_path) == ""


def test_sigterm_stops_a_hung_check_leaving_nothing(user_dir: Path, tmp_path: Path):
    """SIGTERM (a cancelled CI job) while a worker hangs in the target: the check stops at once, with no
    verdict, no process and no temporary folder left."""
    process = subprocess.Popen(
        [sys.executable, "-m", "attnspec", "check", "sleeps:attention"],
        cwd=user_dir,
        env={**users_env(), "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    seen = ""
    while "F" not in seen and "." not in seen and process.poll() is None:  # the properties run
        seen += process.stdout.read(1)
    time.sleep(2)  # a worker is in the target's sleep by now, or soon
    process.terminate()
    output = seen + process.communicate(timeout=60)[0]
    assert process.returncode == 2, output[-3000:]
    assert output.strip().splitlines()[-1].startswith("NOT CHECKED: the run was interrupted"), output[-3000:]
    time.sleep(0.5)
    assert left_in(tmp_path) == [] and alive_with(tmp_path) == ""


def test_a_target_that_breaks_its_process_on_its_first_call_gets_one_line(user_dir: Path, tmp_path: Path):
    done, _ = hostile_check(user_dir, tmp_path, "exits_at_once:attention")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    said = (done.stdout + done.stderr).strip().splitlines()
    assert any(
        line.startswith("--impl exits_at_once:attention: its first call, attention(q, k, v, causal=True")
        and "ended the process (exit code 3) on B=1, " in line
        for line in said
    ), said
    last = done.stdout.strip().splitlines()[-1]
    assert last == "NOT CHECKED: exits_at_once:attention could not be checked (see above)", last
    assert left_in(tmp_path) == [] and alive_with(tmp_path) == ""


def test_a_memory_cap_too_small_to_run_a_test_is_refused_in_one_line(user_dir: Path):
    # a worker starts as large as the check's process, torch loaded: a cap below that plus some room
    # would fail the kit's own code, not the target's
    done = attnspec_command(user_dir, "check", "toy:attention", "--max-memory", "0.5")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    said = done.stdout.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("NOT CHECKED: --max-memory 0.5: a process of the check"), (
        said
    )
    assert "Traceback" not in done.stdout + done.stderr


def test_ctrl_c_stops_every_process_and_gives_no_verdict(user_dir: Path):
    """Ctrl-C, as a terminal sends it to the check's process and its workers, once the tests run: the
    run stops after the test it is in, with no verdict (what ran says nothing of the rest), exit code 2
    and no process left.  (A KeyboardInterrupt in the middle of a test was lost in 3 of 40 runs on a
    loaded machine, raised inside Hypothesis's garbage-collector callback.)"""
    process = subprocess.Popen(
        [sys.executable, "-m", "attnspec", "check", "toy:attention", "-j", "2"],
        cwd=user_dir,
        env=users_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's job has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stdout is not None
    seen = ""
    while not seen.endswith(".") and process.poll() is None:  # the first passed test's dot
        seen += process.stdout.read(1)
    os.killpg(process.pid, signal.SIGINT)
    output = seen + process.communicate(timeout=60)[0]
    assert process.returncode == 2, output[-3000:]
    verdict = output.strip().splitlines()[-1]
    so_far = r"\(\d+ failed, \d+ passed, \d+ skipped before it stopped\)"
    assert re.fullmatch(r"NOT CHECKED: the run was interrupted " + so_far, verdict), verdict
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-g", str(process.pid)], capture_output=True, text=True)
    assert left.stdout == "", f"processes of the check left running: {left.stdout}"


def test_conventions_prints_conventions_md(user_dir: Path):
    done = attnspec_command(user_dir, "conventions")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (REPO / "src/attnspec/CONVENTIONS.md").read_text(encoding="utf-8")
    assert attnspec.conventions_path().samefile(REPO / "src/attnspec/CONVENTIONS.md")


def test_specs_prints_the_catalogue(user_dir: Path):
    done = attnspec_command(user_dir, "specs", "-v")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^ATTN-2 +\d+ tests", done.stdout, re.M)
    assert "test_attention.py::test_masked_weights_are_exactly_zero" in done.stdout
    summary = r"^\d+ requirements, \d+ with tests, \d+ test items; \d+ on impl's own API, checked by its own"
    assert re.search(summary, done.stdout, re.M)
    usage = attnspec_command(user_dir, "specs", "--help")
    assert usage.stdout.startswith("usage: attnspec specs"), usage.stdout


def test_the_checkouts_catalogue_says_attnspec_specs():
    done = subprocess.run(
        [sys.executable, "-m", "attnspec.specs", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: attnspec specs"), done.stdout


# --- the pieces, in-process ----------------------------------------------------------------------


def _with_notes(error: BaseException, *notes: str) -> BaseException:
    for note in notes:
        error.add_note(note)
    return error


def test_an_error_in_brief_is_its_first_line_and_hypothesis_case():
    error = _with_notes(
        AssertionError("output vs the oracle: max |out - golden| = 1e-01\nmore detail"),
        "Failing test case: test_x(\n    case=AttnCase(batch=1,\n     tq=2),\n    data=data(...),\n)",
        "Draw 1 (dtype): torch.float64",
        "Explanation:\n    These lines were always and only run by failing test cases:",
    )
    message, example = error_in_brief(error)
    assert message == "output vs the oracle: max |out - golden| = 1e-01"
    assert example == (
        "Failing test case: test_x(case=AttnCase(batch=1, tq=2), data=data(...))",
        "Draw 1 (dtype): torch.float64",
    )
    assert error_in_brief(TypeError("attention() got an unexpected keyword"))[0] == (
        "TypeError: attention() got an unexpected keyword"
    )
    group = ExceptionGroup(
        "Hypothesis found 2 distinct failures.",
        [
            _with_notes(AssertionError("first"), "Falsifying example: test_x(\n    seed=1,\n)"),
            ValueError("x"),
        ],
    )
    assert error_in_brief(group) == (
        "first (and 1 other distinct failure)",
        ("Falsifying example: test_x(seed=1)",),
    )


def test_a_failure_in_brief_reads_requirements_test_message():
    failure = Failure(
        short_test_name("src/attnspec/kit/properties/test_attention.py::test_x[torch.float32]"),
        "call",
        ("ATTN-4", "MASK-1"),
        "it broke",
        ("Falsifying example: test_x(seed=1)",),
    )
    assert failure.lines() == [
        "  ATTN-4, MASK-1  test_attention.py::test_x[torch.float32]: it broke",
        "      Falsifying example: test_x(seed=1)",
    ]
    assert Failure("t.py::f", "setup", (), "ValueError: v", ()).lines() == [
        "  (no requirement)  t.py::f (error in setup): ValueError: v"
    ]


def test_a_module_that_cannot_be_collected_is_a_failure_in_brief():
    class Collected:  # what pytest reports for a test module whose import fails
        failed = True
        nodeid = "properties/test_x.py"
        longrepr = "ImportError while importing test module 'test_x.py'.\nTraceback: ...\nE   NameError: foo"

    report = RunReport()
    report.pytest_collectreport(Collected())
    assert report.failure_lines() == ["  (no requirement)  test_x.py (error in collection): NameError: foo"]


def test_a_load_problem_names_the_kit_or_the_users_line():
    try:
        compile("def f(:\n", "/somewhere/mykern.py", "exec")
    except SyntaxError as error:
        line = load_problem("mykern:attention", error)
    assert (
        line == "--impl mykern:attention: mykern cannot be imported: SyntaxError at /somewhere/mykern.py, "
        "line 1: invalid syntax"
    )
    missing = ModuleNotFoundError("No module named 'mykern'", name="mykern")
    assert load_problem("mykern:attention", missing).startswith(
        "--impl mykern:attention: No module named 'mykern' (mykern is imported from the current directory"
    )
    # raised by the kit itself (a lookup, a class named): the message alone, as before
    assert load_problem("mykern:Kernel", TypeError("Kernel is a class: name an instance")) == (
        "--impl mykern:Kernel: Kernel is a class: name an instance"
    )
    # a ModuleNotFoundError raised by hand, as lazy loaders do, names no module: nothing empty is quoted
    by_hand = ModuleNotFoundError("gpt2_t needs the tokenizers extra")
    line = load_problem("gpt2_t:model", by_hand)
    assert line == (
        "--impl gpt2_t:model: gpt2_t needs the tokenizers extra (gpt2_t raised it while it was imported)"
    )


def test_a_target_named_by_its_file_is_checked(user_dir: Path):
    """`attnspec check toy.py:attention`, as a shell completes the name, is `toy:attention`."""
    done = attnspec_command(user_dir, "check", "toy.py:attention", "-k", "test_matches_the_oracle")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("PASS: --impl toy.py:attention passed")
    missing = attnspec_command(user_dir, "check", "nowhere.py:attention")
    assert missing.returncode == 2
    assert "no file nowhere.py (a target is package.module:object, or FILE.py:object)" in missing.stderr


def test_mutate_without_its_dashes_shows_the_command_with_them(capsys):
    with pytest.raises(SystemExit) as stopped:
        attnspec.cli.main(["mutate", "attention.py", "pytest", "-q", "tests/"])
    assert stopped.value.code == 2
    assert (
        "unrecognized arguments: -q tests/ (the test command goes after `--`: "
        "attnspec mutate attention.py -- pytest -q tests/)" in capsys.readouterr().err
    )


def test_a_kernel_that_refuses_inputs_it_does_not_declare_gets_one_line_and_no_verdict(user_dir: Path):
    selected = "test_matches_the_oracle or test_lengths_around_the_block_sizes"
    done = attnspec_command(user_dir, "check", "refusing:attention", "--profile", "quick", "-k", selected)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-2000:]
    refused = [line for line in done.stdout.splitlines() if line.startswith("refused (")]
    # one line for each thing to declare, however many properties it refused: the head sizes, and the
    # length or the batch, where a case with an even head size has more than 40 queries or 2 sequences
    assert 1 <= len(refused) <= 3, done.stdout
    head_sizes = [line for line in refused if "it raised ValueError: head size must be even, got " in line]
    advice = "declare the head sizes it takes (attention.head_dims = (...))"
    assert head_sizes and head_sizes[0].endswith(advice), refused
    for line in refused:  # each names what the call it describes raised on
        raised = re.search(r"it raised ValueError: (.*?) on B=(\d+), .*? head size (\d+), ", line)
        assert raised, line
        said, batch, head_size = raised.groups()
        assert (
            ("head size" in said and int(head_size) % 2)
            or ("sequences" in said and int(batch) > 2)
            or ("queries" in said)
        ), line
    assert not re.search(r"^[A-Z]+-\d+  ", done.stdout, re.M), done.stdout  # no requirement is blamed
    assert (
        done.stdout.strip()
        .splitlines()[-1]
        .startswith(
            "NOT CHECKED: --impl refusing:attention refused inputs it does not declare it cannot take"
        )
    )


def test_a_kernel_that_changes_global_state_fails_in_one_line_naming_it(user_dir: Path):
    selected = "test_matches_the_oracle or test_gradients_match_the_oracle or test_rows_sum_to_one"
    done = attnspec_command(user_dir, "check", "leaky:attention", "--profile", "quick", "-k", selected)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    said = [line for line in done.stdout.splitlines() if line.startswith("changed torch's global state (")]
    assert len(said) == 1 and "the target switched grad mode off (torch.set_grad_enabled)" in said[0], said
    assert not re.search(r"^[A-Z]+-\d+  ", done.stdout, re.M), done.stdout  # no requirement is blamed
    verdict = done.stdout.strip().splitlines()[-1]
    assert verdict.startswith("FAIL: --impl leaky:attention changes torch's global state ("), verdict


def test_a_kernel_that_declares_the_sizes_it_takes_passes(user_dir: Path):
    selected = "oracle or batch_elements"
    done = attnspec_command(user_dir, "check", "declares:attention", "--profile", "quick", "-k", selected)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("PASS: --impl declares:attention passed")
    assert not (user_dir / "attnspec-failures").exists()  # a pass leaves nothing behind


def test_a_slow_target_is_told_what_the_check_costs_and_a_budget_fits_it(user_dir: Path):
    selected = ("-k", "test_matches_the_oracle", "-j", "1")
    told = attnspec_command(user_dir, "check", "slow:attention", "--profile", "quick", *selected)
    assert told.returncode == 0, told.stdout[-3000:] + told.stderr[-2000:]
    first = told.stdout.splitlines()[0]
    assert re.fullmatch(
        r"the target takes 0\.\d\d s a call[^:]*: 4 properties at 5 examples each take about \d+ s "
        r"here; --profile quick \(5 examples\) or --budget SECONDS fits the check to a time",
        first,
    ), first
    fitted = attnspec_command(user_dir, "check", "slow:attention", "--budget", "1", *selected)
    assert fitted.returncode == 0, fitted.stdout[-3000:] + fitted.stderr[-2000:]
    assert fitted.stdout.splitlines()[0] == (
        "--budget 1 s: 1 example a property instead of 25: a weaker check, 4% of the drawn cases"
    ), fitted.stdout
    assert fitted.stdout.strip().splitlines()[-1] == (
        "PASS: --impl slow:attention passed every property it can run (4 passed, 0 skipped, "
        "1 of 25 examples a property (--budget 1))"
    ), fitted.stdout


def test_a_slow_target_gets_fewer_examples_by_default_and_says_so_first(user_dir: Path):
    # without --profile or --budget, a check whose 25 examples a property would run past the default
    # time (60 s; $ATTNSPEC_DEFAULT_BUDGET sets it, here below what even the fewest examples cost) draws
    # fewer, never fewer than 5, and says so before the properties run and in the verdict
    selected = ("-k", "test_matches_the_oracle", "-j", "1")
    env = {"ATTNSPEC_DEFAULT_BUDGET": "5"}
    fitted = attnspec_command(user_dir, "check", "slow:attention", *selected, env=env)
    assert fitted.returncode == 0, fitted.stdout[-3000:] + fitted.stderr[-2000:]
    first = fitted.stdout.splitlines()[0]
    assert re.fullmatch(
        r"a slow target \(0\.\d\d s a call[^)]*\): 5 examples a property instead of 25 to fit about 5 s, the "
        r"fewest it runs: about \d+ s; --budget SECONDS or --profile default/ci for more",
        first,
    ), first
    assert fitted.stdout.strip().splitlines()[-1] == (
        "PASS: --impl slow:attention passed every property it can run (4 passed, 0 skipped, "
        "5 of 25 examples a property (a slow target))"
    ), fitted.stdout
    # a profile asked for runs whole, --profile or $HYPOTHESIS_PROFILE: the estimate instead of the fit
    for asked, profile_env in ((("--profile", "quick"), {}), ((), {"HYPOTHESIS_PROFILE": "quick"})):
        whole = attnspec_command(
            user_dir, "check", "slow:attention", *asked, *selected, env={**env, **profile_env}
        )
        assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-2000:]
        assert whole.stdout.startswith("the target takes 0."), whole.stdout
        assert whole.stdout.strip().splitlines()[-1] == (
            "PASS: --impl slow:attention passed every property it can run (4 passed, 0 skipped)"
        ), whole.stdout


def test_a_fast_target_runs_the_whole_default_profile(user_dir: Path):
    done = attnspec_command(user_dir, "check", "toy:attention", "-k", "test_matches_the_oracle", "-j", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "a slow target" not in done.stdout and "the target takes" not in done.stdout, done.stdout
    verdict = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"PASS: --impl toy:attention passed every property it can run \(\d+ passed, \d+ skipped\)", verdict
    ), verdict


def test_watch_checks_again_on_every_save_from_a_warm_process(user_dir: Path):
    command = [sys.executable, "-m", "attnspec", "check", "toy:attention", "--watch", "--profile", "quick"]
    command += ["-k", "test_matches_the_oracle"]
    # Ctrl-C as a terminal delivers it: a run started in the background by a shell without job control
    # (CI's, a backgrounded tox) ignores SIGINT, and the watcher would inherit that and never stop
    watcher = subprocess.Popen(
        command,
        cwd=user_dir,
        env=users_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    stuck = threading.Timer(300, watcher.kill)  # a watcher that never says it checked fails, not hangs
    stuck.start()
    try:
        for save in range(2):
            for line in watcher.stdout:
                seen.append(line)
                if line.startswith("--watch: checked in"):
                    break
            if save == 0:
                time.sleep(0.05)
                os.utime(user_dir / "toy.py")
    finally:
        stuck.cancel()
        watcher.send_signal(signal.SIGINT)
        rest, _ = watcher.communicate(timeout=60)
    text = "".join(seen) + rest
    assert seen[0].startswith("--watch: checking toy:attention again on every save of "), text
    assert "--watch: toy.py changed" in text, text
    assert text.count("PASS: --impl toy:attention passed") == 2, text
    assert text.rstrip().endswith("--watch: stopped") and watcher.returncode == 0, text
