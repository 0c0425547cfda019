"""The kit as an outsider gets it: the wheel, installed in a fresh venv, checks a module from an
empty directory with `attnspec check`, and prints the catalogue and the conventions it ships.

The venv gets attnspec from the wheel alone, then torch, pytest and Hypothesis from this
environment (a .pth line to its site-packages, so nothing is downloaded).  The installed `attnspec`
command runs a correct check and the mutation campaigns; the other runs are `python -m attnspec` of the
venv, forked from a warm server of the venv's python (kit_runs.run_module).
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.kit_runs import kit_profile, run_module, users_env

REPO = Path(__file__).resolve().parents[2]
TOY = (REPO / "examples" / "toy_attention.py").read_text()

BROKEN = """
import toy

def attention(q, k, v, **kwargs):
    return toy.attention(q * 1.5, k, v, **kwargs)  # the scores of a scale 1.5 times too large

attention.capabilities = toy.attention.capabilities
"""

# A user's training kernel: the wheel's flash-style reference with a backward that forgets dK's scale.
BACKWARD = """
from attnspec.adapters.flash_ref import FlashReference
from attnspec.protocol.targets import Target


class KeysUnscaled(FlashReference):
    def key_gradient(self, ds, scaled_queries, scale):
        return ds.transpose(-2, -1) @ (scaled_queries / scale)


kernel = KeysUnscaled()
TARGET = Target("keys-unscaled", kernel.attention, kernel.capabilities, blocks=kernel.blocks)
"""
MISTAKES = """
import toy

class Kernel:
    capabilities = {"weights"}

    def attention(self, q, k, v, **kwargs):
        return toy.attention(q, k, v, **kwargs)

def positional(q, k, v, causal, window, sinks, scale, /):
    return toy.attention(q, k, v)

def output_only(q, k, v, return_weights=False, **kwargs):
    return toy.attention(q, k, v, **kwargs)

output_only.capabilities = {"weights"}

def no_return_weights(q, k, v, *, causal=True, window=None, sinks=None, scale=None):
    return toy.attention(q, k, v, causal=causal)

no_return_weights.capabilities = {"weights"}
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*command, "-w", str(out), str(REPO)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("attnspec-*.whl")
    return built


@pytest.fixture(scope="module")
def attnspec_command(wheel: Path, tmp_path_factory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q"]
    subprocess.run([*install, str(wheel)], check=True, capture_output=True, timeout=300)
    # then torch, pytest and Hypothesis from here (after the install: pip would take this
    # environment's own attnspec, an editable install under tox, for the wheel's)
    (purelib,) = env_dir.glob("lib/python*/site-packages")
    (purelib / "from-the-test-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    assert (env_dir / "bin" / "attnspec").exists(), "the wheel installed no attnspec command"
    return env_dir / "bin" / "attnspec"


def run(command: Path, cwd: Path, *args: str, served: bool = True) -> subprocess.CompletedProcess:
    """`attnspec ARGS` of the venv in ``cwd``: as ``python -m attnspec`` forked from a warm server of the
    venv's python (kit_runs.run_module), or, not ``served``, the installed command itself."""
    env = users_env()
    if served:
        return run_module([str(command.parent / "python"), "-m", "attnspec", *args], cwd, env)
    return subprocess.run(
        [str(command), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def check(command: Path, cwd: Path, *args: str, served: bool = True) -> subprocess.CompletedProcess:
    return run(command, cwd, "check", *args, served=served)


def check_passes(command: Path, cwd: Path, *args: str, served: bool = True) -> subprocess.CompletedProcess:
    """A check that a correct target must pass, under kit_profile(): quick in a day-to-day run, the
    run's own (ci) in CI."""
    return check(command, cwd, *args, "--profile", kit_profile(), served=served)


# The module examples, each with its white box (attnspec.protocol.layouts must come with the wheel).
MODULE_EXAMPLES = ("learner_block:MODEL", "nanogpt_attention:ATTENTION")


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    """An empty directory with the user's modules: a correct kernel, a broken one, mistakes."""
    cwd = tmp_path_factory.mktemp("user")
    (cwd / "toy.py").write_text(TOY)
    (cwd / "broken.py").write_text(BROKEN)
    (cwd / "backward.py").write_text(BACKWARD)
    (cwd / "mistakes.py").write_text(MISTAKES)
    (cwd / "typo.py").write_text("def attention(q, k, v\n    return q\n")
    for example in MODULE_EXAMPLES:
        name = example.partition(":")[0]
        (cwd / f"{name}.py").write_text((REPO / "examples" / f"{name}.py").read_text())
    return cwd


def test_the_wheel_holds_one_import_name_and_none_of_the_repositorys_own_code(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"attnspec", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    assert "attnspec/specs/requirements.toml" in names
    # the conventions the messages point to come with it, the same text as the repository's
    conventions = zipfile.ZipFile(wheel).read("attnspec/CONVENTIONS.md").decode()
    assert conventions == (REPO / "src/attnspec/CONVENTIONS.md").read_text(encoding="utf-8")
    # no test module of the tool's own (the kit's properties are the product: attnspec/kit/properties/)
    tests = [name for name in names if name.rpartition("/")[2].startswith("test_")]
    assert tests and all(name.startswith("attnspec/kit/properties/test_") for name in tests), tests
    conftests = [name for name in names if name.endswith("conftest.py")]
    assert conftests == ["attnspec/kit/properties/conftest.py"], conftests
    assert not [name for name in names if "/tests/" in name or "/fixtures/" in name]
    # nor the repository's own code: its campaigns, benches, examples and docs
    assert not [name for name in names if name.split("/")[1:2] in (["campaigns"], ["benches"], ["examples"])]
    # what `attnspec check` runs on comes with it (this test's venv borrows them instead)
    (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
    requires = re.findall(
        r"^Requires-Dist: ([A-Za-z0-9_-]+)[^;\n]*$", zipfile.ZipFile(wheel).read(metadata).decode(), re.M
    )
    assert {"torch", "pytest", "hypothesis"} <= set(requires), requires


def test_a_correct_kernel_passes(attnspec_command: Path, user_dir: Path):
    done = check_passes(attnspec_command, user_dir, "toy:attention", served=False)  # the command itself
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("PASS: --impl toy:attention passed every property it can run"), last
    assert re.search(r"^capabilities of --impl toy:attention: blind, .*window", done.stdout, re.M)
    assert not list(user_dir.glob(".pytest_cache"))


@pytest.mark.parametrize("example", MODULE_EXAMPLES)
def test_a_module_example_passes_with_its_white_box(attnspec_command: Path, user_dir: Path, example: str):
    done = check_passes(attnspec_command, user_dir, example, "-v")  # -v: the capability table
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith(f"PASS: --impl {example}"), done.stdout[-2000:]
    (layer,) = [line for line in done.stdout.splitlines() if line.startswith("  yes  layer ")]
    assert "skipped" not in layer, layer  # the layer properties ran


def test_a_broken_kernel_fails_naming_the_requirement(attnspec_command: Path, user_dir: Path):
    done = check(attnspec_command, user_dir, "broken:attention", "-x", "--junitxml", "report.xml")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    found = re.match(r"FAIL: --impl broken:attention breaks ([A-Z]+-\d+)", last)
    assert found, last
    # the block of the requirement: its statement, its failed test and message, no traceback
    block = rf"^{found.group(1)}  \S.*\n  failed  test_\w+\.py::test_\w+(\[[^\]]*\])?: \S"
    assert re.search(block, done.stdout, re.M), done.stdout[-3000:]
    assert "site-packages" not in done.stdout and "Traceback" not in done.stdout, done.stdout[-3000:]
    # its reproducer runs on its own, with the wheel's kit, and fails as the property did
    # (-x stops the run at the first failure; a property another worker was running may fail too)
    named = done.stdout.split(f"\n{found.group(1)}  ", 1)[-1]  # from the block of the verdict's requirement
    reruns = re.findall(r"^  rerun   python (attnspec-failures/\S+\.py)$", named, re.M)
    assert reruns, done.stdout[-3000:]
    rerun = reruns[0]
    replayed = subprocess.run(
        [str(attnspec_command.parent / "python"), rerun],
        cwd=user_dir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replayed.returncode == 1 and "AssertionError: max |out - oracle| = " in replayed.stderr, (
        replayed.stdout + replayed.stderr
    )
    # the JUnit report names the failing test's requirements too
    junit = (user_dir / "report.xml").read_text()
    assert re.search(f'name="requirements" value="[^"]*{found.group(1)}', junit), junit[:2000]


def test_a_broken_backward_fails_naming_the_gradient(attnspec_command: Path, user_dir: Path):
    """The gradient properties come with the wheel: the reference's backward passes them, and a backward
    that forgets dK's scale fails GRAD-2 saying which gradient is wrong."""
    passed = check_passes(attnspec_command, user_dir, "flash-ref", "-k", "test_gradients")
    assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-2000:]
    done = check(attnspec_command, user_dir, "backward:TARGET", "-k", "test_gradients_match", "--tb", "short")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "breaks GRAD-2" in done.stdout.strip().splitlines()[-1], done.stdout[-2000:]
    assert "wrong gradients: dK" in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize(
    "target, line",
    [
        ("mistakes:Kernel", "Kernel is a class: name an instance"),
        ("mistakes:positional", r"attention\(q, k, v, causal=True, .*\) raised TypeError"),
        ("mistakes:output_only", r"returned a tensor, not \(output, weights\)"),
        ("mistakes:no_return_weights", r"return_weights=True\) raised TypeError: .*'return_weights'"),
        ("mykern:attention", r"No module named 'mykern' \(mykern is imported from the current directory"),
        ("typo:attention", r"typo cannot be imported: SyntaxError at \S*typo\.py, line 1: '\(' was never"),
    ],
    ids=["a class", "positional-only", "weights not returned", "no return_weights", "not importable", "typo"],
)
def test_a_target_that_cannot_be_checked_gets_one_line(attnspec_command, user_dir, target, line):
    done = check(attnspec_command, user_dir, target)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-2000:]
    errors = [text for text in done.stderr.splitlines() if text.strip()]
    assert len(errors) <= 2 and re.search(line, done.stderr), done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("NOT CHECKED")


def test_the_conventions_and_the_catalogue_come_with_it(attnspec_command: Path, tmp_path: Path):
    conventions = run(attnspec_command, tmp_path, "conventions")
    assert conventions.returncode == 0, conventions.stderr
    assert conventions.stdout == (REPO / "src/attnspec/CONVENTIONS.md").read_text(encoding="utf-8")
    catalogue = run(attnspec_command, tmp_path, "specs", "-v")
    assert catalogue.returncode == 0, catalogue.stdout[-3000:] + catalogue.stderr[-3000:]
    assert re.search(r"^ATTN-2 +\d+ tests", catalogue.stdout, re.M), catalogue.stdout[:2000]
    assert "test_attention.py::test_masked_weights_are_exactly_zero" in catalogue.stdout


def test_nothing_selected_is_not_a_pass(attnspec_command: Path, user_dir: Path):
    done = check(attnspec_command, user_dir, "toy:attention", "-k", "no_such_property")
    assert done.returncode == 2, done.stdout[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("NOT CHECKED: no property ran")


def test_no_generic_name_is_importable_from_the_install(attnspec_command: Path, tmp_path: Path):
    python = attnspec_command.parent / "python"
    names = "'impl', 'specs', 'properties', 'mutants', 'campaigns', 'tests', 'benches', 'examples'"
    probe = f"import importlib.util as u; print([n for n in ({names}) if u.find_spec(n)])"
    done = subprocess.run([str(python), "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_users_own_tests_are_graded_from_the_wheel(attnspec_command: Path, tmp_path: Path):
    # the example project, copied into an empty directory: its shapes-only tests let faults survive
    # (exit 1, each named), its strong tests kill them all (exit 0); its files stay byte-identical
    project = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "user_project", project, ignore=shutil.ignore_patterns("__pycache__"))
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    outcomes = {}
    for suite in ("shapes", "strong"):
        outcomes[suite] = subprocess.run(
            [str(attnspec_command), "mutate", "attention.py", "--out", f"../{suite}", "--"]
            + ["pytest", "-q", f"tests/test_{suite}.py"],
            cwd=project,
            env=dict(
                {
                    k: v
                    for k, v in os.environ.items()
                    if not k.startswith(("ATTNSPEC_", "PYTHON", "HYPOTHESIS"))
                },
                TMPDIR=str(scratch),
            ),
            capture_output=True,
            text=True,
            timeout=600,
        )
    shapes, strong = outcomes["shapes"], outcomes["strong"]
    assert shapes.returncode == 1 and "SURVIVED (not triaged): attention." in shapes.stdout, shapes.stderr
    assert re.search(r"^  F3\s+survived", shapes.stdout, re.M), shapes.stdout
    assert strong.returncode == 0 and "gate: passed" in strong.stdout, strong.stdout + strong.stderr
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before
    assert list(scratch.iterdir()) == []
    assert (tmp_path / "strong" / "mutation-report.json").exists() and (
        tmp_path / "strong" / "junit.xml"
    ).exists()
