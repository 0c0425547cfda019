"""Tests of the mutation machinery itself: `python -m pytest mutants/tests` (~1 min).

The last two tests run real (faults-only) campaigns on a toy copy of the project: impl/ and
specs/ as they are, properties/ replaced by two tests that kill F1 and F2 and nothing else.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import jsonschema
import libcst as cst
import pytest

from attnspec.mutation.faults import FAULTS
from attnspec.mutation.generators.mutmut_operators import only_run_inside_their_calls
from attnspec.mutation.history import reaching, site_lines
from attnspec.mutation.reports.matrix import write_matrix
from attnspec.mutation.reports.stryker import changed_span
from campaigns.campaign import GRADING, REPO_ROOT, SUBPROCESS_TESTS, pyproject_text
from tests.fixtures.kit_runs import PROPERTIES
from tests.fixtures.mutation import Apply, check_stryker_shape, mutate
from tests.fixtures.toys import mutants_command, toy_root


def test_every_fault_has_a_site_in_impl_and_makes_valid_python():
    made: dict[str, list[tuple[str, str]]] = {fault.id: [] for fault in FAULTS}
    for path in sorted((REPO_ROOT / "src" / "attnspec" / "impl").glob("*.py")):
        module = cst.parse_module(path.read_text())
        visitor = Apply(module, FAULTS)
        module.visit(visitor)
        for fault_id, codes in visitor.results.items():
            made[fault_id] += [(module.code, code) for code in codes]
    # a kernel-only fault (impl/ has no online softmax) has its sites in the tiled kernels: flash-ref
    # (graded by its conformance campaign) or the Triton zoo (whose broken twins the kit fails)
    kernels = [fault for fault in FAULTS if fault.kernel_only]
    tiled = [REPO_ROOT / "src" / "attnspec" / "adapters" / "flash_ref.py"]
    tiled += sorted((REPO_ROOT / "examples" / "zoo" / "triton_kernels").glob("[!_]*.py"))
    sited: set[str] = set()
    for path in tiled:
        module = cst.parse_module(path.read_text())
        visitor = Apply(module, kernels)
        module.visit(visitor)
        sited |= {fault_id for fault_id, codes in visitor.results.items() if codes}
    for fault in kernels:
        assert not made[fault.id], f"{fault.id} is a kernel-only fault, yet it finds a site in impl/"
        assert fault.id in sited, f"{fault.id} finds no site in flash-ref or the Triton zoo"
    kernels = {fault.id for fault in kernels}
    for fault_id, mutants in made.items():
        assert mutants or fault_id in kernels, f"{fault_id} finds no site in impl/"
        for original, code in mutants:
            compile(code, fault_id, "exec")
            assert code != original


def test_operators_make_the_documented_faults():
    assert mutate("def f(a, z):\n    return z.masked_fill(~a, -math.inf)\n", "F1") == [
        "def f(a, z):\n    return z\n",  # the mask never applied
        "def f(a, z):\n    return z.masked_fill(~a, 0.0)\n",
    ]
    assert mutate("def f(a):\n    return -a\n", "F1") == []
    assert mutate("def f(key_pos, query_pos):\n    return key_pos <= query_pos\n", "F2") == [
        "def f(key_pos, query_pos):\n    return key_pos >= query_pos\n"
    ]
    assert mutate("def f(a, b):\n    return a <= b\n", "F2") == []  # not a key/query comparison
    post_norm = mutate(
        """
        def forward(self, x):
            h = self.attn(self.norm(x))
            return x + h
        """,
        "F6",
    )
    assert post_norm == ["\ndef forward(self, x):\n    h = self.attn(x)\n    return self.norm(x + h)\n"]
    rope_v = mutate(
        """
        def forward(self, q, k, v):
            k = apply_rope(split(k), offset=3)
            v = split(v)
            return k, v
        """,
        "F7",
    )
    assert "v = apply_rope(split(v), offset=3)" in rope_v[0]
    assert mutate("def f(self):\n    if self.a % self.b != 0:\n        raise ValueError('x')\n", "F9") == [
        "def f(self):\n    if False:\n        raise ValueError('x')\n"
    ]
    assert mutate("def f(q, k, v, s):\n    return attn(q, k, v, window=3, sinks=s)\n", "F10") == [
        "def f(q, k, v, s):\n    return attn(q, k, v, window=3)\n"
    ]
    assert mutate("def f(self):\n    return min(self.length, self.window)\n", "F11") == [
        "def f(self):\n    return min(self.length, self.window + 1)\n",
        "def f(self):\n    return min(self.length, self.window - 1)\n",
    ]
    assert mutate("def f(self, new):\n    return min(new, self.window)\n", "F11") == []  # not a held count
    assert mutate("def f(q, k, t):\n    return rope(q, offset=t, base=2), rope(k, offset=t)\n", "F12") == [
        "def f(q, k, t):\n    return rope(q, base=2), rope(k)\n"
    ]
    assert mutate("def f(c, k, v, t):\n    return c.update(k, v, t)\n", "F13") == [
        "def f(c, k, v, t):\n    return c.update(v, k, t)\n"
    ]


def test_changed_span_reports_whole_tokens():
    for original, mutated, span, replacement in [
        ("a <= b", "a < b", "<=", "<"),
        ("x == 0", "x != 0", "==", "!="),
        ("f(1e-5)", "f(1.00001)", "1e-5", "1.00001"),
        ("s = m(a) * scale  # c", "s = m(a)  # c", "* scale", ""),
        ("return x + y", "return y", "x +", ""),
        ("amax(dim=-1)", "amax(dim=+1)", "-", "+"),
        ("if x in y:", "if x not in y:", "in", "not in"),
        ("if x < 1:", "if x <= 1:", "<", "<="),
        ("a if c else b", "a if (c) and False else b", "c", "(c) and False"),
    ]:
        start, end, got = changed_span(original, mutated)
        assert (original[start:end], got) == (span, replacement)
    for original, mutated, node, span, replacement in [
        ("if scale is None:", "if scale is not None:", (9, 11), "is", "is not"),
        ("if x in y:", "if x not in y:", (5, 7), "in", "not in"),
    ]:
        start, end, got = changed_span(original, mutated, node)
        assert (original[start:end], got) == (span, replacement)


def test_generated_pyproject_configures_mutmut_and_pytest():
    config = tomllib.loads(pyproject_text(REPO_ROOT))
    assert config["tool"]["mutmut"]["source_paths"] == ["attnspec/impl/"]
    assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["attnspec/kit/properties"]


TOY_TESTS = """
import torch
from attnspec.impl import additive_mask, attention_mask


def test_additive_mask_is_minus_inf_where_masked():
    allowed = torch.tensor([[True, False]])
    assert additive_mask(allowed).tolist() == [[0.0, float("-inf")]]


def test_causal_mask_is_lower_triangular():
    ones = torch.ones(4, 4, dtype=torch.bool)
    assert torch.equal(attention_mask(4, 4), ones.tril())
    assert torch.equal(attention_mask(4, 4, window=2), ones.tril() & ~ones.tril(-2))
"""


def start_campaign(root: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "campaigns", "run", "--faults-only", "--root", str(root)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def workspace_of(first_line: str) -> Path:
    assert first_line.startswith("workspace "), first_line
    return Path(first_line.split(maxsplit=1)[1].strip())


@pytest.fixture(scope="module")
def toy_campaign(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One faults-only campaign on the toy suite, shared by the tests that read its results."""
    root = toy_root(tmp_path_factory.mktemp("campaign"), {"test_toy.py": TOY_TESTS})
    done = mutants_command(["run", "--faults-only", "--root", str(root)], timeout=600)
    return root, subprocess.CompletedProcess(done.args, done.returncode, done.stdout + done.stderr)


def test_report_validates_against_the_published_schema(toy_campaign, stryker_schema):
    root, _ = toy_campaign
    report = json.loads((root / "reports" / "mutation-report.json").read_text())
    jsonschema.validators.validator_for(stryker_schema)(stryker_schema).validate(report)


def test_faults_only_campaign_on_a_toy_suite(toy_campaign):
    root, process = toy_campaign
    output = process.stdout
    assert process.returncode == 1, output  # F3..F10 are not killed by the toy suite
    assert not workspace_of(output.splitlines()[0]).exists()
    assert sorted(p.name for p in root.iterdir()) == ["reports", "src"]

    report = json.loads((root / "reports" / "mutation-report.json").read_text())
    check_stryker_shape(report)
    by_fault: dict[str, set[str]] = {}  # the statuses of each fault's mutants in masks.py
    for path, entry in report["files"].items():
        lines = entry["source"].splitlines()
        for mutant in entry["mutants"]:
            if path != "attnspec/impl/masks.py":  # the toy suite reaches masks.py alone
                assert mutant["status"] in ("NoCoverage", "Survived"), mutant
                continue
            by_fault.setdefault(mutant["mutatorName"], set()).add(mutant["status"])
            start, end = mutant["location"]["start"], mutant["location"]["end"]
            if mutant["mutatorName"] == "F1" and mutant["replacement"] == "0.0":
                assert start["line"] == end["line"]
                assert lines[start["line"] - 1][start["column"] - 1 : end["column"] - 1] == "-math.inf"
                assert mutant["killedBy"] == [
                    "attnspec/kit/properties/test_toy.py::test_additive_mask_is_minus_inf_where_masked"
                ]
    assert by_fault["F1"] == by_fault["F2"] == {"Killed"}
    assert "F3   survived" in output and "F2   killed" in output


def test_sigterm_stops_the_campaign_and_removes_the_workspace(tmp_path):
    process = start_campaign(toy_root(tmp_path, {"test_toy.py": TOY_TESTS}))
    workspace = workspace_of(process.stdout.readline())
    deadline = time.monotonic() + 60
    while not (workspace / "driver.log").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # mutmut is generating mutants or running the clean suite by now
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert process.returncode == 130
    assert not workspace.exists()
    assert processes_in(workspace) == []


def processes_in(directory: Path) -> list[str]:
    """Ids of the processes whose working directory is in `directory` (deleted or not)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "cwd").startswith(str(directory)):
                pids.append(proc.name)
        except OSError:
            continue
    return pids


def test_a_mutant_runs_the_covering_tests_that_execute_its_statement():
    # The clean run records the lines of each function a test executes (0 = the def line).  A test that
    # never executes the mutated statement runs the function exactly as the original: it passes as in
    # the clean run, so only the others run.  A change in the signature acts on every call.
    original = textwrap.dedent(
        """\
        def attend(q, k, sinks=None, scale=1.0):
            s = q @ k.mT * scale
            if sinks is not None:
                s = torch.cat([s,
                               sinks], -1)
            return s.softmax(-1)
        """
    )
    tests = {
        "t::plain": {"lines": {"m.x_attend": [1, 2, 5]}},
        "t::sinks": {"lines": {"m.x_attend": [1, 2, 3, 5]}},
        "t::other": {"lines": {}},
    }
    covering = ["t::plain", "t::sinks"]

    def reached(mutated: str) -> list[str]:
        mutant = {"function": "m.x_attend", "site": site_lines(original, mutated)}
        return reaching(mutant, covering, tests)

    assert reached(original.replace("sinks], -1)", "sinks], -2)")) == ["t::sinks"]  # 2nd line of a call
    assert reached(original.replace("is not None", "is None")) == covering  # the if's condition
    assert reached(original.replace("scale=1.0", "scale=2.0")) == covering  # the signature
    assert reached(original.replace("s.softmax(-1)", "s.softmax(-2)")) == covering


def test_an_inserted_statement_is_reached_by_the_tests_that_run_the_code_around_it():
    # A catalogue fault that inserts a statement (F7: RoPE applied to the values too) is glued, in the
    # reports, to the token after it, here a comment that no test "executes": it was reported not
    # exercised while every test ran it.  Its site is the code around the insertion.
    original = textwrap.dedent(
        """\
        def forward(q, k, v, rope):
            q, k = rope(q), rope(k)
            # the scores
            s = q @ k.mT
            if v is None:
                return s
            return s.softmax(-1) @ v
        """
    )
    mutated = original.replace("    # the scores\n", "    v = rope(v)\n    # the scores\n")
    assert site_lines(original, mutated) == [1, 3]  # the statements before and after it
    first = original.replace("def forward(q, k, v, rope):\n", "def forward(q, k, v, rope):\n    v = -v\n")
    assert site_lines(original, first) == [1]  # at the top of the body: the statement after it
    tests = {"t::any": {"lines": {"m.forward": [1, 3, 4, 6]}}}
    mutant = {"function": "m.forward", "site": site_lines(original, mutated)}
    assert reaching(mutant, ["t::any"], tests) == ["t::any"]


def test_a_mutants_tests_run_in_an_order_that_does_not_change_between_runs():
    # The test named as a mutant's killer is its first failing test, in an order that no finishing
    # child changes: the tests meant for its fault first, then the previous run's killer, then the
    # cheapest by cost class (durations vary from run to run by less than 2x), then the suite's order.
    from attnspec.mutation.engine import Job, in_fixed_order

    order = [
        "t.py::test_slow",
        "t.py::test_fast",
        "t.py::test_tiny",
        "t.py::test_F15_gqa",
        "t.py::test_F1_mask",
    ]
    order.append("t.py::test_req")
    tests = {name: {"duration": 0.1, "requirements": []} for name in order}
    tests["t.py::test_req"]["requirements"] = [next(f for f in FAULTS if f.id == "F1").kills[0]]
    position = {name: index for index, name in enumerate(order)}
    expected = [
        "t.py::test_F1_mask",  # named after F1 (F15 is not F1)
        "t.py::test_req",  # checks a requirement F1 breaks
        "t.py::test_tiny",  # under 20 ms: one class, the suite's order
        "t.py::test_F15_gqa",
        "t.py::test_fast",
        "t.py::test_slow",
    ]
    for durations in ([2.0, 0.3, 0.011, 0.002, 5, 5], [2.5, 0.26, 0.004, 0.017, 1, 1]):
        for name, seconds in zip(order, durations, strict=True):
            tests[name]["duration"] = seconds
        job = Job("m.f__F1_1", list(reversed(order)), False, 1.0, catalogue="F1")
        assert in_fixed_order(job, tests, position, []) == expected
        assert in_fixed_order(job, tests, position, ["t.py::test_slow"])[2] == "t.py::test_slow"


PATCH_PROBE = """
import sys

import pytest
from hypothesis import given, strategies as st

from attnspec.mutation.suites.pytest_suite import PytestSuite


class Recorder:
    def pytest_runtest_logreport(self, report):
        if report.when == "teardown":
            with open(sys.argv[2], "a") as out:
                out.write(f"{'_hypothesis_failing_examples' in report.__dict__}\\n")


class EngineWrapperOnly:
    pytest_runtest_makereport = PytestSuite.pytest_runtest_makereport


@given(st.integers())
def test_fails(x):
    assert x < 0


if __name__ == "__main__":
    plugins = [Recorder()] + ([EngineWrapperOnly()] if sys.argv[1] == "engine" else [])
    pytest.main([__file__, "-q", "-p", "no:cacheprovider", "-p", "no:randomly"], plugins=plugins)
"""


def test_a_failing_property_leaves_hypothesis_no_examples_to_write_a_patch_for(tmp_path):
    # Hypothesis' pytest plugin turns the failing examples a property found into a patch of explicit
    # examples once the item's report is made: an import of libcst's codemods, then a parse of the
    # test's module, ~0.9 s in every child whose mutant a property killed.  The engine's wrapper runs
    # inside Hypothesis' own and takes the examples away first.
    probe = tmp_path / "patch_probe.py"
    probe.write_text(PATCH_PROBE)

    def patched(plugins: str) -> list[str]:
        seen = tmp_path / f"{plugins}.txt"
        subprocess.run(
            [sys.executable, str(probe), plugins, str(seen)],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
            capture_output=True,
        )
        return seen.read_text().split() if seen.exists() else []

    assert patched("plain") == ["True"]  # the probe's property fails and Hypothesis would write its patch
    assert patched("engine") == ["False"]


def test_the_clean_run_traces_only_inside_calls_when_no_line_can_run_outside_one(tmp_path):
    # The clean run's tracer is on only from an outermost trampolined call to its return: right when
    # every line of the mutated functions runs inside a call of its own function.
    module = tmp_path / "m.py"
    module.write_text(
        textwrap.dedent(
            """\
            def plain(x):
                f = lambda y: y + 1
                return [f(v) for v in x]

            def closure(x):
                def inner():
                    return x
                return inner

            def generator(x):
                yield x
            """
        )
    )
    spans = {"plain": [str(module), 1, 3], "closure": [str(module), 5, 8], "generator": [str(module), 10, 11]}
    assert only_run_inside_their_calls({"plain": spans["plain"]})
    assert not only_run_inside_their_calls({"plain": spans["plain"], "closure": spans["closure"]})
    assert not only_run_inside_their_calls({"generator": spans["generator"]})


def test_the_heatmap_is_drawn_again_only_when_what_it_shows_changed(tmp_path):
    png = tmp_path / "kill-matrix.png"
    write_matrix({"F1": {"MASK-1": 0.1}}, {"F1": {"explicit"}}, tmp_path, tmp_path)
    first = png.read_bytes()
    png.write_bytes(b"drawn before")  # a redrawn heatmap would replace this
    write_matrix({"F1": {"MASK-1": 0.1}}, {"F1": {"explicit"}}, tmp_path, tmp_path)
    assert png.read_bytes() == b"drawn before"
    write_matrix({"F1": {"MASK-1": 0.1, "ATTN-2": 0.3}}, {"F1": {"explicit"}}, tmp_path, tmp_path)
    assert png.read_bytes().startswith(first[:8])  # a PNG again


def test_every_test_that_runs_the_kit_in_a_subprocess_is_left_out_of_campaigns():
    # mutmut never runs them against a mutant (their subprocesses import the unmutated code), so in a
    # campaign they would only cost minutes of its coverage and clean runs, twice.
    graded = [REPO_ROOT / "tests" / name for name in GRADING]
    runs_the_kit = {
        path.relative_to(REPO_ROOT).as_posix()
        for folder in graded
        for path in folder.glob("test_*.py")
        if "kit_runs" in path.read_text()
    }
    assert runs_the_kit and runs_the_kit <= set(SUBPROCESS_TESTS)


def test_a_property_computes_a_failures_wording_only_once_it_has_failed():
    # While a mutant runs a property, the runner sets ATTNSPEC_TERSE_FAILURES and conventions.explanation
    # returns None: sound only if the wording is computed after a check has failed (so it changes the
    # message, never the verdict).  Every call of the conventions' explainers (or of a `mismatch`
    # partial of one) in properties/ sits in an `except AssertionError` handler; diagnosis.py words a
    # non-impl target's failures and is checked by the meta tests, which run as written.
    explainers = {"convention_mismatch", "layer_convention_mismatch", "rope_convention_mismatch", "mismatch"}
    explainers |= {"explanation", "explained_by"}
    kit = REPO_ROOT / "src" / "attnspec"
    modules = [*(kit / "protocol").glob("*.py"), *(kit / "kit").glob("*.py"), *PROPERTIES.glob("*.py")]
    for path in sorted(modules):
        if path.name in ("conventions.py", "diagnosis.py"):
            continue
        tree = ast.parse(path.read_text())
        handled: set[int] = set()
        for handler in ast.walk(tree):
            if (
                isinstance(handler, ast.ExceptHandler)
                and ast.unparse(handler.type or ast.Name()) == "AssertionError"
            ):
                handled |= {id(node) for node in ast.walk(handler)}
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in explainers:
                assert id(call) in handled, (
                    f"{path.name}:{call.lineno} words a failure before any check failed"
                )


def test_the_eta_weighs_the_kill_matrix_by_its_budget_and_the_rest_by_their_pace():
    from attnspec.mutation.engine import Job, Remaining
    from attnspec.mutation.watch import Watch

    # the matrix first (each runs all its covering tests), then many mutants killed in a blink
    matrix = [Job(f"m{i}", [], True, budget_s=10.0) for i in range(4)]
    ordinary = [Job(f"o{i}", [], False, budget_s=10.0) for i in range(100)]
    remaining = Remaining(matrix + ordinary, workers=2)
    first = remaining.estimate()
    assert first["seconds"] is None  # the ordinary mutants' pace is unknown yet
    assert (first["matrix_left"], first["matrix_seconds"]) == (4, 20.0)  # 4 x 10 s on 2 workers
    for job in matrix[:2]:
        remaining.done(job, 20.0)  # twice its budget: the two left should take 2 x 20 s / 2
    assert remaining.estimate()["matrix_seconds"] == pytest.approx(20.0)
    for job in matrix[2:] + ordinary[:10]:
        remaining.done(job, 20.0 if job.matrix else 0.1)
    # 90 ordinary mutants at 0.1 s each on 2 workers: 4.5 s, nowhere near the overall rate's
    # (14 jobs took 81 s: 5.8 s a job, 260 s for the 90 left on 2 workers)
    assert remaining.estimate()["seconds"] == pytest.approx(4.5)

    watch = Watch(Path("."), started=time.monotonic() - 75)
    watch.tests_started = time.monotonic() - 70
    progress = {"phase": "testing mutants", "total": 104, "counts": {"Killed": 2}, "eta": first}
    assert watch.line(progress).endswith("kill matrix: 4 left, ~0m20s")
    progress["eta"] = remaining.estimate()
    assert watch.line(progress).startswith("[testing mutants 1m15s] 2/104  killed 2")
    assert watch.line(progress).endswith("ETA 0m04s")


def test_the_eta_of_the_kill_matrix_is_at_least_its_longest_fault_whose_jobs_run_one_at_a_time():
    from attnspec.mutation.engine import Job, Remaining

    # F1's three siblings run one after another; F2's one beside them: 2 workers cannot halve F1's 30 s
    jobs = [Job(f"a{i}", [], True, budget_s=10.0, fault="F1") for i in range(3)]
    jobs.append(Job("b", [], True, budget_s=10.0, fault="F2"))
    remaining = Remaining(jobs, workers=2)
    assert remaining.estimate()["matrix_seconds"] == pytest.approx(30.0)  # not 40 s / 2 workers
    remaining.done(jobs[0], 20.0)  # twice its budget: the two left of F1 take about 2 x 20 s
    assert remaining.estimate()["matrix_seconds"] == pytest.approx(40.0)
    assert remaining.estimate()["seconds"] == pytest.approx(40.0)  # no ordinary mutant: known


# A kill matrix in a table: each test's requirements and attention path, and per mutant the tests that
# reach it (the engine runs them by name: their clean times are equal) and those of them that fail.
# F1's three mutants fail overlapping requirements, some on one path only; s1 is a catalogue mutant that
# survives, o1 an ordinary mutant (up to its first failure).
TABLE_TESTS = {"t1": (["R1"], "x"), "t2": (["R2"], "x"), "t3": (["R3"], "y"), "t4": (["R1"], "y")}
TABLE_TESTS.update(t5=(["R4", "R1"], ""), u=([], ""))
SIBLING_TABLE = {  # mutant -> (fault, tests that reach it, those that fail)
    "a": ("F1", "t1 t2 t3 t4", "t1 t3 t4"),
    "b": ("F1", "t1 t2 t3 t4", "t2 t3"),
    "c": ("F1", "t1 t3 t5 u", "t1 t3 t5 u"),
    "s1": ("F2", "t1 u", ""),
    "o1": (None, "t1 t2 t3", "t2 t3"),
}


def table_run(mutant, tests, matrix, known):
    from attnspec.mutation.engine import run_in_order

    failing = SIBLING_TABLE[mutant][2].split()
    return run_in_order(
        tests,
        matrix,
        known,
        lambda t: TABLE_TESTS[t][0],
        lambda t: TABLE_TESTS[t][1],
        lambda t, _following: (t in failing, 0.01),
    )


class TableSuite:
    """A test source whose outcomes are SIBLING_TABLE's, logging each child's start and end."""

    in_process = True

    def __init__(self, log: Path) -> None:
        self.log, self.mutant = log, ""

    def run(self, tests, matrix, known=None):
        with self.log.open("a") as log:
            log.write(f"{self.mutant} start {time.monotonic()}\n")
        time.sleep(0.2)  # long enough for a sibling to overlap, were it allowed to
        outcome = table_run(self.mutant, tests, matrix, known)
        with self.log.open("a") as log:
            log.write(f"{self.mutant} end {time.monotonic()}\n")
        return outcome


def test_siblings_share_their_row_of_the_kill_matrix_without_changing_it(tmp_path):
    from attnspec.mutation.engine import Engine, Job, Known

    suite = TableSuite(tmp_path / "children.log")

    class Switch:
        def activate(self, name):
            suite.mutant = name

    engine = Engine({"workspace": str(tmp_path), "workers": 2}, Switch(), suite)
    mutants = {m: {"function": f"f_{m}", "fault": fault} for m, (fault, _, _) in SIBLING_TABLE.items()}
    jobs = [Job(m, reach.split(), f is not None, 1.0, f) for m, (f, reach, _) in SIBLING_TABLE.items()]
    engine.run_jobs(jobs, mutants, {t: {"duration": 0.0} for t in TABLE_TESTS})

    def alone(m):  # every test of the mutant's matrix, with nothing known of its siblings
        fault, reach, _ = SIBLING_TABLE[m]
        return table_run(m, sorted(reach.split()), fault is not None, None)

    for fault in ("F1", "F2"):
        shared, full = Known(), Known()
        for m in (m for m, (f, _, _) in SIBLING_TABLE.items() if f == fault):
            for failure in mutants[m]["failures"]:
                shared.add(failure)
            for failure in alone(m)["failures"]:
                full.add(failure)
        assert (shared.requirements, shared.paths) == (full.requirements, full.paths), fault
    for m in SIBLING_TABLE:
        assert mutants[m]["status"] == ("Survived" if m == "s1" else "Killed"), m
        assert mutants[m]["failures"][:1] == alone(m)["failures"][:1], m  # the same first failing test
    assert sum(mutants[m]["tests_run"] for m in "abc") < sum(alone(m)["tests_run"] for m in "abc")
    # F1's mutants ran one after another (the others alongside them)
    spans: dict[str, dict[str, float]] = {}
    for line in (tmp_path / "children.log").read_text().splitlines():
        m, what, at = line.split()
        spans.setdefault(m, {})[what] = float(at)
    f1 = sorted((spans[m]["start"], spans[m]["end"]) for m in "abc")
    assert all(end <= start for (_, end), (start, _) in zip(f1, f1[1:], strict=False)), f1
    assert any(spans["o1"]["start"] < end and start < spans["o1"]["end"] for start, end in f1)


@pytest.mark.parametrize("missing", ["mutmut", "libcst"])
def test_without_the_mutation_extra_the_main_job_says_so_in_one_line(missing):
    # the package hidden from this interpreter, as in a venv installed without '.[mutation]'
    hide = f"import sys, runpy; sys.modules[{missing!r}] = None; sys.argv[1:] = ['run']; "
    hide += "runpy.run_module('campaigns', run_name='__main__')"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", hide], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"NOT RUN: python -m campaigns needs {missing}"), lines
