"""`pytest --attnspec TARGET` in a user's own project: the kit's properties run in the user's session,
beside the user's tests, with the user's conftest, selection and reports.

The project is made to be awkward for the kit: its pytest.ini collects only checks/check_*.py and
check_* functions (the kit's files and tests are named test_*), its conftest has a --device option and
a device fixture of its own (the kit's conftest has both), loads its own Hypothesis profile and empties
the environment of ATTNSPEC_ settings around every test (the kit reads its target from there).  Each
run is `python -m pytest` from the project's folder (forked from the warm kit server, which is a fresh
interpreter's run: test_kit_runs.py), with the plugin that the installed distribution registers (the
pytest11 entry point), as test_cli.py runs `attnspec check`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from xml.etree import ElementTree

import pytest
import torch

from tests.fixtures.kit_runs import PROPERTIES, kit_profile, run_module, users_env

REPO = Path(__file__).resolve().parents[2]
TOY = (REPO / "examples" / "toy_attention.py").read_text()

# The commonest scale slip: the scores are never multiplied by 1/sqrt(d) (a kernel that folds the
# scale into q and forgets it).
UNSCALED = """
import toy

def attention(q, k, v, **kwargs):
    return toy.attention(q * q.shape[-1] ** 0.5, k, v, **kwargs)

attention.capabilities = toy.attention.capabilities
"""

# A correct kernel without sliding windows: it refuses a window, as a kernel without that support may
# (the properties never pass one to a target that does not declare "window").
WINDOWLESS = """
import toy

def attention(q, k, v, *, window=None, **kwargs):
    if window is not None:
        raise TypeError("this kernel has no sliding windows")
    return toy.attention(q, k, v, **kwargs)

attention.capabilities = toy.attention.capabilities - {"window"}
"""

INI = """
[pytest]
testpaths = checks
python_files = check_*.py
python_functions = check_*
addopts = --strict-markers
"""

CONFTEST = """
import os

import pytest
from hypothesis import settings

settings.register_profile("user", max_examples=7)
settings.load_profile("user")


def pytest_addoption(parser):
    parser.addoption("--device", default="the user's device")


@pytest.fixture(autouse=True)
def no_settings_leak_in(monkeypatch):
    for name in [name for name in os.environ if name.startswith("ATTNSPEC_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def greeting():
    return "hello"


@pytest.fixture
def device(request):
    return request.config.getoption("--device")
"""

CHECKS = """
from hypothesis import settings


def check_greeting(greeting):
    assert greeting == "hello"


def check_the_users_device_option_and_fixture(device):
    assert device == "the user's device"


def check_the_users_hypothesis_profile():
    assert settings.get_current_profile_name() == "user"
    assert settings.default.max_examples == 7
"""
USERS_TESTS = (
    "checks/check_user.py::check_greeting",
    "checks/check_user.py::check_the_users_device_option_and_fixture",
    "checks/check_user.py::check_the_users_hypothesis_profile",
)
KIT = "attnspec/kit/properties/"  # the node ids of the kit's tests start so


PROJECT_FILES = {"toy.py": TOY, "pytest.ini": INI, "conftest.py": CONFTEST}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("project")
    (cwd / "toy.py").write_text(TOY)
    (cwd / "unscaled.py").write_text(UNSCALED)
    (cwd / "windowless.py").write_text(WINDOWLESS)
    (cwd / "pytest.ini").write_text(INI)
    (cwd / "conftest.py").write_text(CONFTEST)
    (cwd / "checks").mkdir()
    (cwd / "checks" / "check_user.py").write_text(CHECKS)
    return cwd


def pytest_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m pytest ARGS` in ``cwd``, with none of this run's settings for the kit."""
    env = users_env()
    env.pop("PYTEST_ADDOPTS", None)
    return run_module([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd, env)


def collected(done: subprocess.CompletedProcess) -> list[str]:
    """The node ids that `pytest --collect-only -q` printed."""
    return [line for line in done.stdout.splitlines() if "::" in line and " " not in line]


def verdict(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stdout.splitlines() if re.match(r"(PASS|FAIL|NOT CHECKED): --impl ", line)]
    assert len(lines) == 1, done.stdout[-3000:] + done.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def checked_tests(project: Path) -> set[str]:
    """The tests `attnspec check toy:attention` runs: pytest over the kit's folder with the kit's own
    settings (cli.py), from the project's folder."""
    done = run_module(
        [sys.executable, "-m", "pytest", str(PROPERTIES), "--impl", "toy:attention", "-c", os.devnull]
        + ["--rootdir", str(PROPERTIES.parent), "-p", "no:cacheprovider", "--collect-only", "-q"],
        project,
        users_env(),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return set(collected(done))


def test_the_distribution_registers_the_plugin_with_pytest():
    (plugin,) = entry_points(group="pytest11", name="attnspec")
    assert plugin.value == "attnspec.runner.pytest_plugin", "reinstall attnspec: pip install -e ."


@pytest.mark.parametrize("named", [["--attnspec", "toy:attention"], ["-o", "attnspec=toy:attention"]])
def test_the_kit_is_collected_whatever_the_users_ini_says(project: Path, checked_tests: set[str], named):
    """By --attnspec or the ini option: the tests `attnspec check` runs, none of the suite's meta tests,
    and the user's own checks (the user's python_files and python_functions would find none of the kit's)."""
    done = pytest_in(project, *named, "--collect-only", "-q")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    ids = collected(done)
    assert ids[: len(USERS_TESTS)] == list(USERS_TESTS), ids[:10]
    kit = {nodeid.removeprefix("attnspec/kit/") for nodeid in ids[len(USERS_TESTS) :]}
    assert len(kit) > 50 and all(nodeid.startswith(KIT) for nodeid in ids[len(USERS_TESTS) :]), ids
    assert kit == checked_tests, sorted(kit ^ checked_tests)[:10]
    assert not [nodeid for nodeid in ids if "meta_tests" in nodeid]
    # -k narrows the kit's tests as it does the user's
    narrowed = pytest_in(
        project, *named, "--collect-only", "-q", "-k", "test_masked_weights_are_exactly_zero"
    )
    assert {nodeid.partition("[")[0] for nodeid in collected(narrowed)} == {
        f"{KIT}test_attention.py::test_masked_weights_are_exactly_zero"
    }, narrowed.stdout[-2000:]


def test_a_correct_target_passes_beside_the_users_tests(project: Path):
    """The whole kit (kit_profile(): quick in a day-to-day run, ci in CI) and the user's checks, in one
    session and one JUnit report: for a kernel without windows, which the user's autouse fixture, by
    emptying the environment of ATTNSPEC_ settings, must not turn into impl (which has them) while the
    properties draw their cases."""
    kit = ["--attnspec", "windowless:attention", "--attnspec-profile", kit_profile()]
    done = pytest_in(project, *kit, "-v", "--junitxml", "report.xml")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for test in USERS_TESTS:
        assert f"{test} PASSED" in done.stdout, test
    passed = re.findall(rf"^{KIT}\S+ PASSED", done.stdout, re.M)
    skipped = re.findall(rf"^{KIT}\S+ SKIPPED", done.stdout, re.M)
    assert len(passed) > 50, done.stdout[-3000:]
    # the kit's verdict counts the kit's tests alone, after its capability table
    assert verdict(done) == (
        f"PASS: --impl windowless:attention passed every property it can run ({len(passed)} passed, "
        f"{len(skipped)} skipped)"
    )
    assert "attnspec: capabilities of --impl windowless:attention" in done.stdout
    assert re.search(r"^  no   window .*\(skipped [1-9]\d*\)$", done.stdout, re.M), done.stdout[-3000:]
    assert re.fullmatch(
        rf"=+ {len(passed) + len(USERS_TESTS)} passed, {len(skipped)} skipped, \d+ deselected in .*",
        done.stdout.splitlines()[-1],
    ), done.stdout[-500:]
    # the user's JUnit report holds the user's test cases and the kit's, each of these with its requirements
    cases = list(ElementTree.parse(project / "report.xml").getroot().iter("testcase"))
    users = [case for case in cases if case.get("classname") == "checks.check_user"]
    kit = [case for case in cases if case.get("classname", "").startswith("attnspec.kit.properties.test_")]
    assert len(users) == len(USERS_TESTS) and len(users) + len(kit) == len(cases)
    assert len(kit) == len(passed) + len(skipped)
    assert {case.get("classname") for case in kit} >= {
        "attnspec.kit.properties.test_attention",
        "attnspec.kit.properties.test_kernels",
    }
    requirements = [
        prop.get("value")
        for case in kit
        for prop in case.iter("property")
        if prop.get("name") == "requirements"
    ]
    assert len(requirements) == len(kit) and {"ATTN-2", "ATTN-4"} <= set(requirements), requirements


def test_a_broken_target_fails_naming_the_requirement(project: Path):
    # the oracle property (its explicit examples fail) and one whose failure Hypothesis finds and shrinks
    selected = "test_matches_the_oracle or test_extreme_keys_behind_the_diagonal or check_"
    done = pytest_in(project, "--attnspec", "unscaled:attention", "-k", selected)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    found = re.fullmatch(
        r"FAIL: --impl unscaled:attention breaks ([A-Z0-9, -]+) \((\d+) failed, 0 passed, 0 skipped\)",
        verdict(done),
    )
    assert found and "ATTN-4" in found.group(1).split(", "), verdict(done)
    assert re.search(
        rf"^FAILED {KIT}test_attention.py::test_matches_the_oracle\[torch.float32\]", done.stdout, re.M
    )
    # the user's checks still pass, beside the kit's failures
    assert re.search(rf" {found.group(2)} failed, 3 passed, \d+ deselected in ", done.stdout.splitlines()[-1])
    # Hypothesis offers no patch that adds the failing case to the kit's own (installed) test file
    assert "Failing test case: test_extreme_keys_behind_the_diagonal_do_not_leak" in done.stdout
    assert "git apply" not in done.stdout and not (project / ".hypothesis" / "patches").exists()


NO_GPU = pytest.mark.skipif(
    torch.cuda.is_available(), reason="a CUDA GPU is here: --attnspec-device cuda would run"
)


@pytest.mark.parametrize(
    "args, line",
    [
        (["--attnspec", "nosuch:attention"], "ERROR: --impl nosuch:attention: No module named 'nosuch'"),
        pytest.param(
            ["--attnspec", "toy:attention", "--attnspec-device", "cuda"],
            "ERROR: --attnspec-device=cuda was asked for, but torch sees no CUDA GPU",
            marks=NO_GPU,
        ),
    ],
    ids=["not importable", "no GPU"],
)
def test_a_target_that_cannot_be_checked_stops_the_run_with_one_line(project: Path, args, line):
    done = pytest_in(project, *args)
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[0].startswith(line), done.stderr


def test_the_profile_is_the_kits_for_its_tests_and_the_users_for_theirs(project: Path):
    done = pytest_in(
        project,
        "--attnspec",
        "toy:attention",
        "--attnspec-profile",
        "ci",
        "-k",
        "test_weights_and_sink_sum_to_one or check_",
        "--hypothesis-show-statistics",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    statistics = done.stdout.split(f"{KIT}test_attention.py::test_weights_and_sink_sum_to_one:", 1)[1]
    assert re.search(r"\b150 passing\b", statistics.split("::", 1)[0]), statistics[:500]  # ci: 150 examples
    assert re.search(r" 4 passed, \d+ deselected in ", done.stdout.splitlines()[-1]), done.stdout[-500:]


def test_without_a_target_only_the_users_tests_run(project: Path):
    done = pytest_in(project, "-v")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.findall(r"^(\S+) PASSED", done.stdout, re.M) == list(USERS_TESTS), done.stdout
    # no kit's test, no header, no capability table, no verdict
    assert KIT not in done.stdout and "capabilities of --impl" not in done.stdout, done.stdout
    assert not re.search(r"^(attnspec: |PASS: |NOT CHECKED: )", done.stdout, re.M), done.stdout
    assert re.fullmatch(r"=+ 3 passed in .*", done.stdout.splitlines()[-1]), done.stdout[-500:]


# A user's test that leaves torch's global state changed, as inference code does: the kit's properties
# that run after it start from a clean state (src/attnspec/kit/global_state.py) and pass a correct target.
LEAKS = """
import torch


def check_inference_code_leaks_grad_mode_and_the_default_dtype():
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
"""


def test_a_users_test_that_leaks_global_state_cannot_fail_a_correct_target(tmp_path: Path):
    for name in ("toy.py", "pytest.ini", "conftest.py"):
        (tmp_path / name).write_text(PROJECT_FILES[name])
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "check_leaks.py").write_text(LEAKS)
    selected = "leaks or gradients or matches_the_oracle or output_and_weight_shapes"
    kit = ["--attnspec", "toy:attention", "--attnspec-profile", "quick", "-k", selected, "-v"]
    done = pytest_in(tmp_path, *kit)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    ran = re.findall(r"^(\S+::\S+) PASSED", done.stdout, re.M)
    assert ran[0] == "checks/check_leaks.py::check_inference_code_leaks_grad_mode_and_the_default_dtype", ran
    assert any("test_gradients" in test for test in ran[1:]), ran  # after the leak, and passed
    assert verdict(done).startswith("PASS: --impl toy:attention passed every property it can run")


# a kernel that crashes the interpreter on calls of six queries or more (not on the kit's first call)
SEGFAULTS = """
import ctypes

import toy


def attention(q, k, v, **kwargs):
    if q.shape[2] >= 6:
        ctypes.string_at(0)
    return toy.attention(q, k, v, **kwargs)


attention.capabilities = toy.attention.capabilities
"""


def test_a_target_that_crashes_fails_the_kits_properties_not_the_users_run(project: Path):
    """The kit's properties run in a worker process: a segfault in the target fails the property it
    happened in, and the run goes on to the user's summary and the kit's verdict."""
    (project / "segfaults.py").write_text(SEGFAULTS)
    selected = "check_ or test_matches_the_oracle or test_masked_weights_are_exactly_zero"
    kit = ("--attnspec", "segfaults:attention", "--attnspec-profile", "quick", "-k", selected, "-v")
    done = pytest_in(project, *kit)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Fatal Python error" not in done.stderr, done.stderr[-2000:]
    crashed = r"the target crashed the process \(signal 11, SIGSEGV\) on B=\d+"
    assert re.search(crashed, done.stdout), done.stdout[-3000:]
    said = r"FAIL: --impl segfaults:attention crashes the process \(\d+ failed, \d+ passed, 0 skipped\)"
    assert re.fullmatch(said, verdict(done)), verdict(done)
    # the user's own checks ran, in the user's process, and passed
    passed = re.findall(r"^(\S+) PASSED", done.stdout, re.M)
    assert [test for test in passed if not test.startswith(KIT)] == list(USERS_TESTS), done.stdout[-3000:]
