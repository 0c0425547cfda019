"""`attnspec.check(target, *properties)`: some of the kit's properties against a target, from your
own tests.

    import attnspec

    def test_the_cache_decodes_as_the_full_pass():
        attnspec.check("mypkg.attention:ATTENTION", "test_attention_layer.py::test_cache_decode")

Each property is named as its file and function in the kit (`attnspec specs -v` lists them), without
the parametrisation: every parametrisation of it runs.  They run in this process, one after another,
under the kit's deterministic profile (the same examples every run, nothing written), against the
target as `attnspec check` takes it (``package.module:object`` importable from the current directory,
or a built-in adapter).  A failing property raises `PropertyFailed` (an AssertionError: your test
fails) with the kit's summary of each failure; a property that cannot run on the target (skipped for
a capability it lacks, not found, a target that cannot be loaded) raises `NotChecked`, so that a test
written with it never passes without having checked anything.

This is what the tests `attnspec mutate --impl` writes (test_attnspec_suggested_*.py) call.  It runs the
properties in your process, without the worker processes of `attnspec check`: a target that crashes
the interpreter takes the test run with it.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

PROFILE = "mutation"  # src/attnspec/kit/properties/conftest.py: derandomized, no database, no shrinking


class PropertyFailed(AssertionError):
    """A property the target was held to failed."""


class NotChecked(RuntimeError):
    """A named property did not run against the target (skipped, not found, target unusable)."""


class _Outcome:
    """pytest plugin of the nested run: the kit's run report and the tests that did not run."""

    def __init__(self) -> None:
        self.report = None
        self.ran: list[str] = []
        self.skipped: list[tuple[str, str]] = []  # (test, why)
        self.profile: str | None = None

    def pytest_configure(self, config) -> None:
        from hypothesis import settings

        from attnspec.kit.run_report import NAME

        self.report = config.pluginmanager.get_plugin(NAME)
        # before the kit's test modules are imported (the kit's conftest loads its profile once a process)
        self.profile = getattr(settings, "_current_profile", None)
        settings.load_profile(PROFILE)

    def pytest_unconfigure(self, config) -> None:
        from hypothesis import settings

        if self.profile is not None:
            settings.load_profile(self.profile)

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call" and not report.skipped:
            self.ran.append(report.nodeid)
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.skipped.append((report.nodeid, reason))


def _node_ids(folder: Path, properties: tuple[str, ...]) -> list[str]:
    ids = []
    for name in properties:
        file, _, function = name.partition("::")
        path = folder / file
        if not name or "/" in file or not path.is_file() or not file.startswith("test_"):
            raise NotChecked(
                f"{name!r}: no such property file in the kit (name it as test_FILE.py::test_NAME)"
            )
        if function and not re.search(rf"^def {re.escape(function)}\(", path.read_text(), re.M):
            raise NotChecked(f"{name!r}: {file} has no property {function} (`attnspec specs -v` lists them)")
        ids.append(f"{path}::{function}" if function else str(path))
    return ids


def _forget_test_modules(folder: Path) -> None:
    """The kit's test modules are imported afresh by each run: they read the target, and each
    property's Hypothesis settings take the profile's, when imported (an import outside a run, by a
    tool that imports what a test once imported, would leave them with another profile)."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if Path(file).parent == folder and Path(file).name.startswith("test_"):
            del sys.modules[name]


def check(target: str, *properties: str, device: str = "cpu") -> None:
    """Run the kit's ``properties`` ("test_FILE.py::test_NAME") against ``target``; raise
    PropertyFailed when one fails, NotChecked when one could not run."""
    import pytest
    import torch
    from hypothesis import configuration

    import attnspec.kit.properties as kit
    from attnspec.protocol import targets
    from attnspec.runner.pytest_plugin import DATABASE_ENV, HYPOTHESIS_HOME

    if not properties:
        raise NotChecked("name the properties to run, e.g. 'test_attention.py::test_rows_sum_to_one'")
    folder = Path(kit.__file__).resolve().parent
    ids = _node_ids(folder, properties)
    _forget_test_modules(folder)
    outcome = _Outcome()
    environment, path, threads = dict(os.environ), list(sys.path), torch.get_num_threads()
    # Hypothesis's own files of the kit's run (its cache of the constants in the code it imports) go to
    # the run's temporary folder, not .hypothesis/ in your project; yours where yours go
    yours = vars(configuration).get(HYPOTHESIS_HOME)
    try:
        with tempfile.TemporaryDirectory(prefix="attnspec-check-") as home:
            configuration.set_hypothesis_home_dir(Path(home) / "hypothesis")
            sys.path.insert(0, os.getcwd())
            os.environ.update({targets.ENV: target, DATABASE_ENV: ""})
            arguments = [*ids, f"--impl={target}", f"--device={device}", "-c", os.devnull]
            arguments += [f"--rootdir={folder.parent}", f"--basetemp={home}/tmp", "-q", "--no-header"]
            arguments += ["-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:randomly", "-rN"]
            code = pytest.main(arguments, plugins=[outcome])
    finally:
        configuration.set_hypothesis_home_dir(yours)
        os.environ.clear()
        os.environ.update(environment)
        sys.path[:] = path
        torch.set_num_threads(threads)
    if code == pytest.ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    report = outcome.report
    if code == pytest.ExitCode.TESTS_FAILED and report is not None and report.failures:
        rerun = f"attnspec check {target}"
        raise PropertyFailed("\n".join(report.blocks(rerun, None, None)))
    if code != pytest.ExitCode.OK:
        said = f"pytest exit code {int(code)}, its output above"
        raise NotChecked(f"the kit could not run {', '.join(properties)} against {target} ({said})")
    for name in properties:  # each named property ran at least once (a parametrisation may skip)
        if not any(_of(nodeid, name) for nodeid in outcome.ran):
            why = [f"{test}: {reason}" for test, reason in outcome.skipped if _of(test, name)]
            why = why or ["nothing was collected"]
            raise NotChecked(f"{name} did not run against {target}: " + "; ".join(why))


def _of(nodeid: str, name: str) -> bool:
    """Whether the test ``nodeid`` (properties/test_x.py::test_y[...]) is of the property ``name``."""
    file, _, function = name.partition("::")
    path, _, test = nodeid.partition("::")
    return path.endswith("/" + file) and (not function or test.split("[")[0] == function)
