"""Conformance campaigns on code outside impl/: the site finder, the code swap, and a real campaign
on examples/toy_attention.py (``--source``), which needs nothing beyond the test environment."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from attnspec.mutation.generators.sites import install, live_function, mutants_in
from campaigns.campaign import REPO_ROOT
from tests.fixtures.kit_runs import left_in
from tests.fixtures.mutation import check_stryker_shape
from tests.fixtures.toys import mutants_command

MODULE = textwrap.dedent(
    """
    import functools
    import math


    def logged(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            return f(*args, **kwargs)

        return wrapper


    @logged
    def scaled(scores, d):
        return scores / math.sqrt(d)


    class Attention:
        def scores(self, q, k, scaling):
            return q * k * scaling

        def untouched(self, q):
            return q
    """
)


def test_sites_cover_decorated_functions_and_methods_and_name_mutants_per_function():
    made = mutants_in(MODULE, "pkg.mod", "pkg/mod.py")
    assert [(m.name, m.replacement) for m in made] == [
        ("pkg.mod.scaled__F3_1", ""),
        ("pkg.mod.Attention.scores__F3_1", ""),
    ]
    line = MODULE.splitlines().index("    return scores / math.sqrt(d)") + 1
    assert made[0].start == (line, 19) and made[0].lines == range(line, line + 1)
    assert [m.name for m in mutants_in(MODULE, "pkg.mod", "pkg/mod.py", only={"Attention.scores"})] == [
        "pkg.mod.Attention.scores__F3_1"
    ]
    assert mutants_in(MODULE, "pkg.mod", "pkg/mod.py", faults={"F1"}) == []


def test_install_swaps_the_code_of_the_live_function_under_its_decorator(tmp_path, monkeypatch):
    (tmp_path / "swapped_module.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("swapped_module")
    held = {"scaled": module.scaled}  # a reference taken before the swap, as an adapter holds one
    assert held["scaled"](8.0, 4) == 4.0
    mutant = mutants_in(MODULE, "swapped_module", "swapped_module.py")[0]
    file = tmp_path / "mutant.py"
    file.write_text(mutant.source)
    original = str(tmp_path / "swapped_module.py")
    install({"file": str(file), "original": original, "module": "swapped_module", "qualname": "scaled"})
    assert held["scaled"](8.0, 4) == 8.0  # the scale is gone, through the wrapper too
    assert live_function("swapped_module", "Attention.scores").__code__.co_qualname == "Attention.scores"
    assert (tmp_path / "swapped_module.py").read_text() == MODULE  # the module's file never changes


WRAPPED = """
def plain_wrapper(function):
    def replaced(*args):
        return function(*args)
    return replaced


def module_wrapper(function):
    class Func:
        def forward(self, *args):
            return function(*args)

        __call__ = forward

    return Func()


@module_wrapper
def rotate(x):
    return -x


class Layer:
    def __init__(self, n):
        self.n = n


Layer.__init__ = plain_wrapper(Layer.__init__)
"""


def test_a_function_is_found_under_wrappers_that_keep_it_in_a_closure(tmp_path, monkeypatch):
    """Decorators that do not set __wrapped__ (transformers 5.25 wraps attention __init__ methods
    so, and turns functions such as apply_rotary_pos_emb into callable modules) still let the
    engine swap the function's code."""
    (tmp_path / "wrapped_module.py").write_text(WRAPPED)
    monkeypatch.syspath_prepend(str(tmp_path))
    for qualname in ("rotate", "Layer.__init__"):
        assert live_function("wrapped_module", qualname).__code__.co_qualname == qualname


TOY = REPO_ROOT / "examples" / "toy_attention.py"


def campaign(
    root: Path, tmp: Path, *extra: str, source: str = "examples/toy_attention.py", impl: str = ""
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a conformance campaign of ``source`` whose workspace goes to ``tmp``."""
    command = [sys.executable, "-m", "campaigns", "run", "--source", source]
    command += [
        "--impl",
        impl or "examples.toy_attention:attention",
        "--root",
        str(root),
        "--max-children",
        "2",
        *extra,
    ]
    env = dict(os.environ, TMPDIR=str(tmp))
    env.pop("ATTNSPEC_TOY_CAPABILITIES", None)
    return command, env


def start(root: Path, tmp: Path, *extra: str) -> subprocess.Popen:
    """The campaign as a process of its own (to interrupt)."""
    command, env = campaign(root, tmp, *extra)
    return subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def run(root: Path, tmp: Path, *extra: str, **target: str) -> tuple[int, str]:
    """The campaign run to its end (forked from the warm server): its exit code and its output."""
    command, env = campaign(root, tmp, *extra, **target)
    done = mutants_command(command[3:], timeout=900, env=env)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def toy_conformance(tmp_path_factory) -> tuple[Path, Path, int, str, str]:
    root, tmp = tmp_path_factory.mktemp("root"), tmp_path_factory.mktemp("tmp")
    before = hashlib.sha256(TOY.read_bytes()).hexdigest()
    return root, tmp, *run(root, tmp, "-k", "matches_the_oracle"), before


def test_a_campaign_on_a_users_file_kills_every_fault_it_has(toy_conformance):
    root, tmp, code, output, before = toy_conformance
    assert code == 0, output
    assert hashlib.sha256(TOY.read_bytes()).hexdigest() == before  # the file under test never changes
    assert left_in(tmp) == []  # the workspace is gone
    reports = root / "reports" / "examples.toy_attention"
    table = json.loads((reports / "fault-table.json").read_text())
    statuses = {fault: row["status"] for fault, row in table["faults"].items()}
    with_sites = {f for f, s in statuses.items() if s != "no site"}
    assert with_sites == {"F1", "F2", "F3", "F10", "F14", "F15", "F16", "F24", "F25"}
    assert {s for s in statuses.values()} == {"killed", "no site"}
    assert "F9   no site" in output and "gate: passed" in output
    report = json.loads((reports / "mutation-report.json").read_text())
    check_stryker_shape(report)
    mutants = [m for entry in report["files"].values() for m in entry["mutants"]]
    assert all(m["killedBy"] and m["coveredBy"] for m in mutants)
    for name in ("index.html", "mutation-summary.txt", "kill-matrix.json"):
        assert (reports / name).exists()


def test_a_campaign_on_a_module_kills_what_only_its_white_box_sees(tmp_path):
    """nanoGPT's attention module as a module target with its layer: the missing scale (F3), which every
    black-box property passes, is killed by the layer oracle, and so is every other fault with a site."""
    source, impl = "examples/nanogpt_attention.py", "examples.nanogpt_attention:ATTENTION"
    code, output = run(tmp_path / "root", tmp_path, source=source, impl=impl)
    assert code == 0 and "gate: passed" in output, output
    table = json.loads(
        (tmp_path / "root" / "reports" / "examples.nanogpt_attention" / "fault-table.json").read_text()
    )
    statuses = {fault: row["status"] for fault, row in table["faults"].items() if row["status"] != "no site"}
    assert statuses == dict.fromkeys(["F1", "F2", "F3", "F4", "F14"], "killed"), statuses
    assert "F3   killed" in output and "LAYER-1" in output.split("F3   killed", 1)[1].splitlines()[0]


def test_interrupting_a_campaign_leaves_nothing_behind(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    process = start(tmp_path / "root", tmp, "-k", "matches_the_oracle")
    deadline = time.monotonic() + 120
    for line in process.stdout:
        if line.startswith("[testing mutants") or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert process.returncode == 130
    assert left_in(tmp) == []
    time.sleep(1)
    leftovers = subprocess.run(
        ["pgrep", "-f", f"attnspec.mutation.worker {tmp}"], capture_output=True, text=True
    )
    assert leftovers.stdout == ""


def test_a_campaign_refuses_unknown_targets_and_missing_files(tmp_path):
    for args, message in [
        (["--target", "no-such"], "is not a built-in adapter"),
        (["--source", "nowhere.py", "--impl", "nowhere:attention"], "no such file"),
        (["--source", "examples/toy_attention.py"], "needs --impl"),
    ]:
        done = mutants_command(["run", *args, "--root", str(tmp_path)])
        assert done.returncode == 2 and message in done.stderr, done.stderr


def test_a_fault_counts_as_equivalent_only_while_its_triage_entry_matches():
    from attnspec.mutation.reports.stryker import Mutant
    from attnspec.mutation.reports.summary import fault_rows

    survivor = Mutant(name="m.f__F8_1", path="m.py", operator="F8", status="Survived")
    survivor.replacement = "None"
    matching = {"m.f__F8_1": {"reason": "equivalent here", "replacement": "None"}}
    stale = {"m.f__F8_1": {"reason": "equivalent here", "replacement": "True"}}
    assert fault_rows([survivor], matching)["F8"]["status"] == "equivalent"
    assert fault_rows([survivor], stale)["F8"]["status"] == "survived"
    assert fault_rows([survivor], {})["F8"]["status"] == "survived"
    assert fault_rows([], {})["F8"]["status"] == "no site"
