"""Incremental and sharded campaigns give the results of a full campaign on the same code.

Real campaigns (all operators, not only the catalogue) on a toy copy of the project: specs/ as it
is, impl/ cut down to masks.py, properties/ replaced by three test modules that reach three
functions of src/attnspec/impl/masks.py, so that each campaign takes seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.toys import mutants_command, toy_root

TESTS = {
    "test_fill.py": """
import torch
from attnspec.impl import additive_mask


def test_additive_mask_is_minus_inf_where_masked():
    allowed = torch.tensor([[True, False]])
    assert additive_mask(allowed).tolist() == [[0.0, float("-inf")]]
""",
    "test_triangle.py": """
import torch
from attnspec.impl import attention_mask


def test_causal_mask_is_lower_triangular():
    ones = torch.ones(4, 4, dtype=torch.bool)
    assert torch.equal(attention_mask(4, 4), ones.tril())
""",
    "test_schedule.py": """
from attnspec.impl.masks import layer_window


def test_even_layers_get_the_window():
    import tabnanny  # imported on first use, as torch imports torch._dynamo: see test_lazy_imports...

    assert tabnanny.check
    assert [layer_window(i, 3) for i in range(3)] == [3, None, 3]
    assert layer_window(1, 3, "all") == 3
""",
}


def campaign(root: Path, *options: str, keep_as: str = "") -> dict:
    """Run a campaign on ``root``; its results (and, with keep_as, a copy of its reports/)."""
    done = mutants_command(["run", "--root", str(root), *options], timeout=600)
    assert done.returncode in (0, 1) and "\ngate: " in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    if keep_as:
        shutil.copytree(root / "reports", root.parent / keep_as)
    return json.loads((root / "reports" / "mutation-results.json").read_text())


def statuses(results: dict) -> dict[str, str]:
    return {name: entry["status"] for name, entry in results["mutants"].items()}


def first_kills(results: dict) -> dict[str, str]:
    return {name: entry["failures"][0][0] for name, entry in results["mutants"].items() if entry["failures"]}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return toy_root(tmp_path_factory.mktemp("incremental"), TESTS, masks_only=True)


@pytest.fixture(scope="module")
def full(toy) -> dict:
    return campaign(toy, keep_as="full")


def test_a_campaign_grades_every_mutant_once(full):
    counts = statuses(full)
    assert set(counts.values()) <= {"Killed", "Survived", "NoCoverage"}
    killed = [name for name, status in counts.items() if status == "Killed"]
    functions = {full["mutants"][name]["function"].rpartition(".")[2] for name in killed}
    assert functions == {"x_additive_mask", "x_attention_mask", "x_check_window", "x_layer_window"}
    assert not any(entry.get("reused") for entry in full["mutants"].values())


def test_lazy_imports_of_the_clean_run_are_imported_once_for_every_mutant(full):
    # The clean run's workers report the modules their tests imported on first use; the engine imports
    # them before it forks the mutants' children (and the clean run's workers, next time), so that no
    # child imports them again (torch._dynamo: 2 s in every child that calls a compiled function).
    assert "tabnanny" in full["lazy_modules"]
    assert "attnspec.impl" not in full["lazy_modules"]  # collected before the clean run


def test_two_shards_merged_equal_one_campaign(toy, full):
    shards = [campaign(toy, "--shard", f"{i}/2", keep_as=f"shard{i}") for i in (1, 2)]
    ran = [set(shard["mutants"]) for shard in shards]
    assert ran[0] and ran[1] and not ran[0] & ran[1] and ran[0] | ran[1] == set(full["mutants"])

    out = toy.parent / "merged"
    shards = [str(toy.parent / "shard1"), str(toy.parent / "shard2")]
    merged = mutants_command(["merge", *shards, "--out", str(out)])
    single = toy.parent / "full"
    # the toy suite leaves F3.. alive: the merged gate fails, as the single campaign's did
    assert merged.returncode == 1 and "\ngate: FAILED" in merged.stdout, merged.stdout + merged.stderr
    one, both = (json.loads((d / "mutation-report.json").read_text()) for d in (single, out))
    assert one["files"].keys() == both["files"].keys()
    for path, entry in one["files"].items():
        fields = ("status", "location", "replacement", "mutatorName", "coveredBy", "killedBy")
        expected = {m["id"]: {f: m.get(f) for f in fields} for m in entry["mutants"]}
        got = {m["id"]: {f: m.get(f) for f in fields} for m in both["files"][path]["mutants"]}
        assert got == expected, path
    one_matrix, both_matrix = (json.loads((d / "kill-matrix.json").read_text()) for d in (single, out))
    assert {f: sorted(row) for f, row in both_matrix["requirements"].items()} == {
        f: sorted(row) for f, row in one_matrix["requirements"].items()
    }
    summary = (out / "mutation-summary.txt").read_text()
    assert summary.split("catalogue faults:")[1].split("kill matrix")[0] == (
        (single / "mutation-summary.txt").read_text().split("catalogue faults:")[1].split("kill matrix")[0]
    ).replace("reports/mutation-report.json", str(out / "mutation-report.json"))


def test_a_merge_refuses_what_is_not_one_campaign(toy, full):
    lone = mutants_command(["merge", str(toy.parent / "full")])
    assert lone.returncode == 2 and "need the shards 1..n" in lone.stderr, lone.stderr


def test_incremental_reruns_exactly_the_changed_function_and_the_changed_tests(toy, full):
    # one impl function changes (additive_mask: same behaviour, other code) and one test module
    # changes (test_triangle.py: one more assertion); test_schedule.py and layer_window do not.
    masks = toy / "src" / "attnspec" / "impl" / "masks.py"
    source = masks.read_text()
    fill = "torch.zeros_like(allowed, dtype=torch.float32).masked_fill(~allowed, -math.inf)"
    changed = source.replace(f"return {fill}", f"filled = {fill}\n    return filled")
    assert changed != source
    masks.write_text(changed)
    triangle = toy / "src" / "attnspec" / "kit" / "properties" / "test_triangle.py"
    triangle.write_text(triangle.read_text() + "    assert attention_mask(1, 1).all()\n")

    shutil.rmtree(toy / "reports")  # the full campaign's reports (a shard's test may have run since)
    shutil.copytree(toy.parent / "full", toy / "reports")
    incremental = campaign(toy, "--incremental")
    again = campaign(toy)  # the full campaign on the same code

    assert statuses(incremental) == statuses(again)
    assert first_kills(incremental) == first_kills(again)
    rerun = {name for name, entry in incremental["mutants"].items() if not entry.get("reused")}
    triangle_calls = {f for t, e in again["tests"].items() if "test_triangle.py" in t for f in e["functions"]}
    changed_or_tested = {
        name
        for name, entry in again["mutants"].items()
        if entry["function"].endswith(".x_additive_mask") or entry["function"] in triangle_calls
    }
    # a fault's kill-matrix mutants share their row: those that run tests run again together
    faults = {again["mutants"][n]["fault"] for n in changed_or_tested} - {None}
    siblings = {
        n for n, e in again["mutants"].items() if e.get("matrix") and e["fault"] in faults and e["tests_run"]
    }
    assert rerun == changed_or_tested | siblings
    assert {again["mutants"][n]["function"].rpartition(".")[2] for n in rerun} == {
        "x_additive_mask",
        "x_attention_mask",
        "x_check_mask_options",
        "x_check_window",
    }
    reused_killed = [
        n for n, e in incremental["mutants"].items() if e.get("reused") and e["status"] == "Killed"
    ]
    assert reused_killed and all(".x_layer_window__" in n for n in reused_killed)
    # the clean run re-ran the changed test and the tests that call the changed function, no other
    assert set(incremental["tests"]) == set(again["tests"])
    assert incremental["phases"]["tests_traced"] == 2


def test_a_killed_mutant_is_reused_when_other_tests_start_covering_its_function_and_a_survivor_is_not():
    # Re-tracing some of a module's tests moves its fixture's calls (say, to a constructor) to another
    # of its tests: the function's covering tests change with no test changed.  A mutant killed by an
    # unchanged test that still covers it is killed again; a survivor may meet a test that kills it.
    from attnspec.mutation.history import unchanged

    tests = {"t::a": {"fingerprint": "1"}, "t::b": {"fingerprint": "2"}, "t::c": {"fingerprint": "3"}}
    state = {"functions": {"m.f": "f0"}, "tests": {t: e["fingerprint"] for t, e in tests.items()}}
    previous = {"functions": {"m.f": "f0"}, "tests": tests}
    same = {"function": "m.f", "code": "c", "operator": "o", "operator_version": "v"}
    entry = dict(same, matrix=False, covering=["t::a", "t::b", "t::c"])  # t::c covers it now
    old_coverage = {"m.f": ["t::a", "t::b"]}
    killed = dict(same, status="Killed", failures=[["t::a", [], 0.1, ""]])
    survived = dict(same, status="Survived", failures=[])
    assert unchanged(entry, killed, state, previous, old_coverage)
    assert not unchanged(entry, survived, state, previous, old_coverage)
    assert not unchanged(entry, dict(killed, matrix=True), state, previous, old_coverage)  # a row
    changed = dict(state, tests=dict(state["tests"], **{"t::a": "9"}))
    assert not unchanged(entry, killed, changed, previous, old_coverage)  # its killer changed
    assert unchanged(dict(entry, covering=["t::a", "t::b"]), survived, state, previous, old_coverage)


def test_a_docstring_comment_or_layout_change_is_no_change_of_the_functions_code():
    # An incremental campaign re-runs a function's mutants when its code changed: a changed docstring
    # re-ran all 217 of explicit_attention's mutants (three survivors among them running every test).
    from attnspec.mutation.history import code_digest

    function = 'def f(x):\n    """Doc."""\n    # a comment\n    return x + 1\n'
    assert code_digest(function) == code_digest(
        'def f(x):\n    """Doc,\n    changed."""\n    return (x + 1)\n'
    )
    assert code_digest(function) != code_digest(function.replace("x + 1", "x + 2"))
    assert code_digest(function) != code_digest(function.replace("def f(x)", "def f(x, y=1)"))
    only = 'def f(x):\n    """Only a docstring."""\n'
    assert code_digest(only) != code_digest(only.replace("Only", "Just"))  # then it is the body
