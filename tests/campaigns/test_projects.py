"""The project-suites page (docs/explanation/project-suites.md) shows campaigns/projects-table.json,
the rows add up, and campaigns/projects.py reads a campaign's reports as the engine writes them."""

from __future__ import annotations

import json
import re

from campaigns import projects
from campaigns.projects import PAGE, PROJECTS, TABLE_FILE, counts, graded, page_block, render

MEASURED = json.loads(TABLE_FILE.read_text())


def test_the_page_shows_the_measured_table():
    assert page_block(PAGE.read_text(encoding="utf-8")) == render(MEASURED), (
        "docs/explanation/project-suites.md differs from campaigns/projects-table.json: "
        "python -m campaigns.projects --table"
    )


def test_every_graded_row_adds_up():
    assert set(MEASURED["projects"]) <= {project.name for project in PROJECTS}
    for name, row in MEASURED["projects"].items():
        assert row["status"] in ("graded", "not reached", "not graded", "timed out"), name
        if row["status"] != "graded":
            assert row["reason"], name
            continue
        by = counts(row)
        assert len(by["present"]) == len(by["graded"]) + len(by["not recognised"]), name
        for fault, entry in row["faults"].items():
            reached = entry["killed"] + entry["survived"] + entry["not_exercised"]
            assert reached <= entry["mutants"], (name, fault)
            assert (entry["state"] == "survived") == (entry["survived"] > 0), (name, fault)
        assert {s["fault"] for s in row["survivors"]} == set(by["survived"]), name


def test_every_project_is_pinned_and_never_brings_another_torch():
    for project in PROJECTS:
        assert re.fullmatch(r"[0-9][0-9.]*", project.version), project.name
        assert not any(dep.lower().startswith("torch=") or dep.lower() == "torch" for dep in project.deps)
        assert project.why or project.unreachable, project.name
        assert "-p" not in project.tests and "-x" not in project.tests  # the script adds them
    assert projects.TORCH == "torch==2.13.0"


SOURCE = "def f(q, k, scale):\n    s = q @ k * scale\n    return s.softmax(dim=-1)\n"


def reports(tmp_path):
    """A campaign's reports as the engine writes them: one F3 survivor, one F14 kill, F12 not recognised."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "mutation-summary.txt").write_text(
        "catalogue faults:\n"
        "  F3   survived       missing 1/sqrt(d_k) scale  [1 mutant(s) at 1 site(s)]\n"
        "         SURVIVED (not triaged): attn.f__F3_1 at attn.py:2\n"
        "  F12  not recognised RoPE offset not applied in decode  [present at attn.py:9 (`pos = past + "
        "arange(n)`), no mutant placed]\n"
        "  F14  killed         softmax over the wrong axis  [1 mutant(s) at 1 site(s), 1 killed by t.py::t]\n"
        "  F20  no site        windowed cache trimmed  [0 mutant(s) at 0 site(s)]\n"
    )
    (out / "mutation-results.json").write_text(
        json.dumps(
            {
                "mutants": {
                    "attn.f__F3_1": {"fault": "F3", "status": "Survived"},
                    "attn.f__F14_1": {"fault": "F14", "status": "Killed"},
                },
                "phases": {"clean_s": 1.5, "mutants_s": 2.0, "mutants_run": 2},
            }
        )
    )
    scale = {"start": {"line": 2, "column": 14}, "end": {"line": 2, "column": 22}}
    (out / "mutation-report.json").write_text(
        json.dumps(
            {
                "files": {
                    str(tmp_path / "attn.py"): {
                        "source": SOURCE,
                        "mutants": [
                            {"id": "attn.f__F3_1", "mutatorName": "F3", "replacement": "", "location": scale,
                             "status": "Survived"},
                        ],
                    }
                }
            }
        )
    )
    return out


def test_a_campaigns_reports_become_a_row(tmp_path):
    row = graded(reports(tmp_path), tmp_path, [str(tmp_path / "attn.py")])
    assert row["faults"]["F3"]["state"] == "survived" and row["faults"]["F14"]["state"] == "killed"
    assert row["faults"]["F12"] == {
        "state": "not recognised",
        "mutants": 0,
        "killed": 0,
        "survived": 0,
        "not_exercised": 0,
        "present": "attn.py:9 (`pos = past + arange(n)`)",
    }
    assert row["faults"]["F20"]["state"] == "no site"
    assert row["survivors"] == [
        {
            "fault": "F3",
            "mutant": "attn.f__F3_1",
            "where": "attn.py:2",
            "diff": "-    s = q @ k * scale\n+    s = q @ k",
        }
    ]
    assert row["clean_s"] == 1.5 and row["test_runs"] is None  # a phase the engine did not report
    assert row["files"] == ["attn.py"]
    by = counts({**row, "status": "graded"})
    assert by["present"] == ["F3", "F12", "F14"] and by["graded"] == ["F3", "F14"]


def test_a_missing_phase_shows_as_a_dash(tmp_path):
    row = {
        "project": "p",
        "version": "1.0",
        "sources": ["attn.py"],
        "tests": ["tests/"],
        "why": "its tests",
        "catalogue": "x",
        "status": "graded",
        "exit": 1,
        "campaign_s": 9,
        **graded(reports(tmp_path), tmp_path, [str(tmp_path / "attn.py")]),
    }
    table = render({"projects": {"litgpt": {**row, "project": "litgpt"}}})
    numbers = next(line for line in table.splitlines() if line.startswith("| litgpt | 3 |"))
    assert numbers.endswith("| 2 s | 2 s | 9 s | - |")
