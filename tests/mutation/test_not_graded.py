"""What a campaign cannot grade: said first, and a failed gate with --strict; and the site annotations
that cannot help, refused before anything runs with what to do instead.

A fault whose feature the code visibly has, but for which no mutant was placed ("not recognised"),
is not graded: the summary's first line says how many and which, and `attnspec mutate --strict`
exits 1 for them.  An annotation `# attnspec: site F<n>` places the fault's generic edits; for a fault
that has none (F11, F20, ...: no entry in GENERIC), for a fault the catalogue lacks, or on a line none
of the edits changes, it would grade nothing where the user pointed: one NOT RUN line, exit 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from attnspec.mutation.faults import GENERIC
from attnspec.mutation.generators.evidence import evidence
from attnspec.mutation.generators.sites import mutants_in
from attnspec.mutation.reports.stryker import Mutant
from attnspec.mutation.reports.summary import fault_rows, summary_text
from tests.fixtures.kit_runs import run_module

REPO = Path(__file__).resolve().parents[2]

# one scale the check kills; a windowed cache (F11, F16, F20) and a complex RoPE (F7) in idioms no
# operator knows: present, not recognised
TINY = """import math


def scores(q, k, d):
    return q * k / math.sqrt(d)


def kept(store, window):
    cache = store.window_cache
    return cache


def rotated(x, freqs_cis):
    return x.rotated_with(freqs_cis)
"""
CACHE_LINE = 9  # cache = store.window_cache
CHECK = """import tiny

assert abs(tiny.scores(2.0, 3.0, 4) - 3.0) < 1e-12, "scores"
"""
PRESENT = ["F7", "F11", "F16", "F20"]


def rows_and_mutants() -> tuple[dict, list[Mutant]]:
    """The fault rows of TINY with its one mutant killed: F3 graded, the PRESENT ones not."""
    mutants = [
        Mutant(name=m.name, path=m.path, operator=m.fault, status="Killed", start=m.start, end=m.end)
        for m in mutants_in(TINY, "tiny", "tiny.py")
    ]
    assert {m.operator for m in mutants} == {"F3"}
    present = {f: f"tiny.py:{e.line}" for f, e in evidence(TINY).items() if f != "F3"}
    assert sorted(present, key=lambda f: int(f[1:])) == PRESENT
    assert "F11" not in GENERIC and "F20" not in GENERIC and {"F7", "F16"} <= set(GENERIC)
    return fault_rows(mutants, {}, strict=True, present=present), mutants


def test_present_faults_not_graded_lead_the_summary_and_fail_the_gate_only_when_required():
    rows, mutants = rows_and_mutants()
    title = "mutation campaign of `python check.py`"
    text, failures = summary_text(title, mutants, rows, {}, 1.0, Path("r"), strict=True)
    first = text.splitlines()[0]
    assert first == "NOT GRADED: 4 faults present in the code were not graded (F7, F11, F16, F20): see below"
    assert failures == [] and text.endswith("gate: passed")  # every graded fault was killed
    text, failures = summary_text(title, mutants, rows, {}, 1.0, Path("r"), strict=True, require_graded=True)
    assert text.splitlines()[0] == first
    assert failures == [f"{fault} present, not graded" for fault in PRESENT]
    assert text.endswith("gate: FAILED: " + "; ".join(failures))


def test_the_summary_advises_an_annotation_only_for_a_fault_it_can_place():
    rows, mutants = rows_and_mutants()
    text, _ = summary_text("campaign", mutants, rows, {}, 1.0, Path("r"), strict=True)
    for fault in ("F11", "F20"):  # no generic edit: no line that names them advises an annotation
        said = [line for line in text.splitlines() if fault in line]
        assert said and not [line for line in said if "attnspec: site" in line], said
    assert "guard F11 with a test of your own: the kit checks it as CACHE-2" in text
    assert "guard F20 with a test of your own: the kit checks it as CACHE-1, MOD-7" in text
    (f7,) = [line for line in text.splitlines() if line.startswith("  F7 ")]
    assert "end that line with `# attnspec: site F7` and the campaign grades it" in f7, f7


def campaign(tmp: Path, source: str, *args: str):
    (tmp / "tiny.py").write_text(source)
    (tmp / "check.py").write_text(CHECK)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSPEC_", "HYPOTHESIS_", "GITHUB_"))}
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "attnspec", "mutate", "-j", "2", *args, "--out", "out", "tiny.py"]
    return run_module([*command, "--", sys.executable, "check.py"], tmp, env, timeout=300)


def test_a_campaign_that_passes_with_present_faults_not_graded_says_so_first_and_strict_fails_it(tmp_path):
    done = campaign(tmp_path, TINY)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (tmp_path / "out" / "mutation-summary.txt").read_text()
    first = "NOT GRADED: 4 faults present in the code were not graded (F7, F11, F16, F20): see below"
    assert summary.splitlines()[0] == first and f"\n{first}\n" in done.stdout, summary
    assert "gate: passed" in summary
    strict = campaign(tmp_path, TINY, "--strict")
    assert strict.returncode == 1, strict.stdout[-3000:] + strict.stderr[-3000:]
    summary = (tmp_path / "out" / "mutation-summary.txt").read_text()
    assert summary.splitlines()[0] == first
    assert summary.rstrip().endswith(
        "gate: FAILED: F7 present, not graded; F11 present, not graded; F16 present, not graded; "
        "F20 present, not graded"
    ), summary[-500:]


def annotated(line: int, text: str, source: str = TINY) -> str:
    lines = source.splitlines()
    lines[line - 1] += f"  # attnspec: site {text}"
    return "\n".join(lines) + "\n"


def test_an_annotation_that_cannot_place_its_fault_stops_the_campaign_before_anything_runs(tmp_path):
    for text, said in (
        (
            "F11",
            "cannot place F11 (KV cache eviction off by one): it has no generic edit, so no annotation "
            "places it; remove the annotation, and guard F11 with a test of your own: the kit checks it as "
            "CACHE-2",
        ),
        (
            "F16",
            "places no mutant: none of F16's generic edits (a < b -> a <= b, and back) changes this "
            "line; move it to the line that computes the fault's feature, or remove it",
        ),
    ):
        done = campaign(tmp_path, annotated(CACHE_LINE, text))
        assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"NOT RUN: tiny.py:{CACHE_LINE}: `# attnspec: site {text}` {said}"), last
        assert "clean run" not in done.stdout and not (tmp_path / "out").exists(), done.stdout


MULTILINE = """import math


def shifted(x, lag):
    return x.shift(  # attnspec: site F12
        x,
        by=lag,
    )


def offset_scores(q, k, offset):
    return q * k + offset  # attnspec: site F12


def placed(q, k, d):
    return q * k / math.sqrt(d)  # attnspec: site F3
"""


def test_what_an_annotation_can_place_is_accepted_and_what_it_cannot_is_named_with_its_line():
    from attnspec.mutation.generators.annotated import refusals

    # the generic edit of a statement that goes on past the annotated line (by=lag -> by=None, on the
    # line below), the line the generic edits place a mutant on, and one the catalogue's operators
    # already placed the fault on
    (below,) = [m for m in mutants_in(MULTILINE, "m", "m.py") if m.qualname == "shifted"]
    assert below.fault == "F12" and list(below.lines) == [7]
    assert refusals(MULTILINE, "m", "m.py") == []
    unknown = annotated(5, "F99")
    assert refusals(unknown, "tiny", "tiny.py") == [
        "tiny.py:5: `# attnspec: site F99`: the catalogue has no fault F99 (`attnspec mutate --list-faults` "
        "lists them): correct the id, or remove the annotation"
    ]
    outside = refusals(annotated(1, "F3"), "tiny", "tiny.py")  # `import math`: in no function
    assert len(outside) == 1 and outside[0].startswith("tiny.py:1: `# attnspec: site F3` places no mutant: ")
    two = refusals(annotated(CACHE_LINE, "F16, F20"), "tiny", "tiny.py")
    assert [line.split("` ", 1)[0] for line in two] == [
        "tiny.py:9: `# attnspec: site F16",
        "tiny.py:9: `# attnspec: site F20",
    ]
    # a fault without generic edits is refused wherever it is; a line in a function the campaign does not
    # mutate (--since) is not judged by what the edits make there
    assert refusals(annotated(CACHE_LINE, "F16"), "tiny", "tiny.py", only={"scores"}) == []
    assert len(refusals(annotated(CACHE_LINE, "F11"), "tiny", "tiny.py", only={"scores"})) == 1
