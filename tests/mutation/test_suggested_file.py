"""The suggested tests' file fits the user's project (src/attnspec/mutation/suggest.py).

Copied among the user's tests as it is, it must not collide with the copy left in the reports'
folder, nor with another campaign's: its name is the modules graded (the same every run), and the
reports' folder gets a conftest.py that keeps pytest out of it, unless one of the user's is there or
the folder holds the project.  Those files in the reports' folder are no support code of the tests
(--incremental would otherwise run everything again after the first campaign that wrote them).
The end-to-end case, the example project's README followed literally, is in test_mutate.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from attnspec.mutation import suggest
from attnspec.mutation.campaign import Settings, support_texts
from attnspec.mutation.sources import Source

REPO = Path(__file__).resolve().parents[2]
TEST = "import attnspec\n\n\ndef test_F3_missing_scale():\n    pass\n"


def settings(project: Path, out: str = "attnspec-mutation", *modules: str) -> Settings:
    sources = [Source(m, project / (m.replace(".", "/") + ".py")) for m in modules or ("attention",)]
    return Settings(
        name="pytest tests",
        sources=sources,
        suite="pytest",
        arguments=["tests"],
        out_dir=(project / out).resolve(),
        cwd=project,
    )


def test_the_file_is_named_after_the_modules_graded(tmp_path):
    assert suggest.file_name(settings(tmp_path)) == "test_attnspec_suggested_attention.py"
    named = suggest.file_name(settings(tmp_path, "out", "model.attn", "model.rope"))
    assert named == "test_attnspec_suggested_model_attn_model_rope.py"
    many = [f"package.module_number_{n}" for n in range(6)]
    long = suggest.file_name(settings(tmp_path, "out", *many))
    assert long.startswith("test_attnspec_suggested_package_module_number_0") and len(long) < 100
    assert long != suggest.file_name(settings(tmp_path, "out", *many[:5]))


def test_a_bare_pytest_collects_the_copy_among_the_tests_and_not_the_one_in_the_reports_folder(tmp_path):
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "attnspec-mutation").mkdir()
    files = suggest.out_files(settings(project), TEST)
    assert set(files) == {"test_attnspec_suggested_attention.py", "conftest.py"}
    for name, text in files.items():
        (project / "attnspec-mutation" / name).write_text(text)
    (project / "tests" / "test_attnspec_suggested_attention.py").write_text(TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSPEC_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = str(REPO)
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "tests/test_attnspec_suggested_attention.py::test_F3_missing_scale"
    assert "1 test collected" in done.stdout, done.stdout
    named = subprocess.run(  # named, the copy in the reports' folder still runs
        [*command, "attnspec-mutation/test_attnspec_suggested_attention.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "1 test collected" in named.stdout, named.stdout + named.stderr


def test_a_conftest_of_the_users_or_a_reports_folder_that_holds_the_project_is_left_alone(tmp_path):
    out = tmp_path / "attnspec-mutation"
    out.mkdir()
    (out / "conftest.py").write_text(suggest.CONFTEST_TEXT)  # ours, from a previous campaign: rewritten
    assert suggest.no_conftest(settings(tmp_path)) == ""
    (out / "conftest.py").write_text("import pytest\n")
    assert suggest.no_conftest(settings(tmp_path)) == "the reports' folder has a conftest.py of yours"
    assert list(suggest.out_files(settings(tmp_path), TEST)) == ["test_attnspec_suggested_attention.py"]
    assert suggest.no_conftest(settings(tmp_path, ".")) == "the reports' folder holds the project"
    file, why = "test_attnspec_suggested_attention.py", "the reports' folder holds the project"
    last = suggest.summary_lines([], [], file, why)[-1]
    assert f"move it among your tests, as it is (`mv {file} tests/`)" in last and why in last, last


def test_the_files_in_the_reports_folder_are_no_support_code_of_the_tests(tmp_path):
    (tmp_path / "attention.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "helpers.py").write_text("X = 1\n")
    before = support_texts(settings(tmp_path), set())
    (tmp_path / "attnspec-mutation").mkdir()
    for name, text in suggest.out_files(settings(tmp_path), TEST).items():
        (tmp_path / "attnspec-mutation" / name).write_text(text)
    assert support_texts(settings(tmp_path), set()) == before
    (tmp_path / "helpers.py").write_text("X = 2\n")  # the project's own code still counts
    assert support_texts(settings(tmp_path), set()) != before
