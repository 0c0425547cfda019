"""`pytest --attnspec TARGET`: the kit's properties inside your own pytest session.

A pytest plugin (the wheel registers it under the ``pytest11`` entry point ``attnspec``) that adds the
kit's properties (attnspec.kit.properties: its test_*.py files) to what
your session collects, run against TARGET (``package.module:object`` or a built-in adapter, as
`attnspec check` takes it): with your conftest fixtures and hooks, your -k / -m selection, your
--junitxml and your CI's reporting, alongside your own tests.

TARGET comes from ``--attnspec TARGET`` or, for every run, from the ini option ``attnspec = TARGET``
(``-o attnspec=`` turns that off for one run).  Without either the plugin does nothing: it only adds
its options, so `attnspec check` (pytest too) and the kit's own suite run as they did.

``--attnspec-profile`` (quick, default, ci, thorough: Hypothesis examples per property) and
``--attnspec-device`` are `attnspec check`'s --profile and --device; every property is marked
``attnspec`` (``-m attnspec`` runs the kit alone, ``-m "not attnspec"`` your tests alone).  Your tests
run first, in your process, as pytest runs them; the kit's then run in a worker process
(src/attnspec/runner/parallel.py), where a target that crashes, hangs (``--attnspec-timeout``, default 60 s a
call) or exhausts memory fails the property it did it in, not your run (under pytest-xdist they run
in xdist's workers, as yours do).

How: the kit's folder becomes one more collector of the session (``KitProperties``, appended to what
the session collected from your arguments or testpaths), which collects the kit's test files itself,
so your python_files, python_functions, norecursedirs or testpaths neither hide nor add any.  The
kit's conftest.py is loaded when that collector is collected, as any conftest of a folder is; under
the plugin it reads the target and the device from here, not from options of its own (--impl and
--device, which your conftest may have too).  The target is loaded and called once on a small
problem before collection: a target that cannot be checked stops the run with one line (exit code 4,
pytest's usage error).  The kit's tests run under the kit's Hypothesis profile, yours under yours;
the summary ends with the kit's capability table and its verdict on the kit's tests alone.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnspec.kit import loading
from attnspec.kit.names import DATABASE_ENV, FAILURES_ENV, SESSION  # noqa: F401 (the runner's, too)
from attnspec.runner import folders

PROFILES = ("quick", "default", "ci", "thorough")  # attnspec/kit/profiles.py registers them
PROFILES_HELP = "Hypothesis examples per property: quick 5, default 25, ci 150, thorough 1000"
MARKER = "attnspec"
HYPOTHESIS_HOME_PREFIX = "attnspec-hypothesis-"  # a run's temporary folder for Hypothesis's own files
HYPOTHESIS_HOME = "__hypothesis_home_directory"  # where hypothesis.configuration keeps the one it uses
INI = "attnspec"
TEST_FILES = "test_*.py"  # the kit's own naming: attnspec/kit/properties/test_*.py
# The node ids of the kit's tests: attnspec/kit/properties/test_attention.py::test_x, the same wherever
# the kit is installed (pytest would name a file outside the rootdir by its tests alone, ::test_x)
NODEID = "attnspec/kit/properties"


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    _no_rewriting_of_the_package(pluginmanager)
    group = parser.getgroup("attnspec", "attnspec: the kit's properties against your attention code")
    group.addoption(
        "--attnspec",
        metavar="TARGET",
        help="also run attnspec's properties against TARGET (package.module:object or a built-in "
        "adapter, as `attnspec check` takes it); default: the attnspec ini option, else none",
    )
    group.addoption(
        "--attnspec-profile",
        choices=PROFILES,
        help=f"{PROFILES_HELP} (default: $HYPOTHESIS_PROFILE when it names one of these, else default)",
    )
    group.addoption(
        "--attnspec-db",
        metavar="PATH",
        help="keep the failing examples Hypothesis finds in the kit's properties in PATH, and replay "
        "them first next time (default: none kept)",
    )
    group.addoption(
        "--attnspec-device",
        metavar="DEVICE",
        help="torch device the properties run on (default: $ATTNSPEC_DEVICE or cpu)",
    )
    group.addoption(
        "--attnspec-timeout",
        type=float,
        metavar="SECONDS",
        help="the longest one call of the target may run before the kit's property it is in fails as "
        "hung (default 60; the kit's properties run in a worker process, where a crash or a hang fails "
        "the property instead of your run)",
    )
    parser.addini(INI, "the target of --attnspec for every run (--attnspec overrides it)", default="")


def _no_rewriting_of_the_package(pluginmanager: pytest.PytestPluginManager) -> None:
    """pytest rewrites the assertions of every module of a plugin's distribution (here all of attnspec:
    impl, specs, the kit's helpers) imported once it has started, which they never were before attnspec
    was a plugin: unmark the package, as it was (the plugin marks the kit's test files when it collects
    them; pytest's own marking is private, hence the care)."""
    hook = getattr(pluginmanager, "rewrite_hook", None)
    marked = getattr(hook, "_must_rewrite", None)
    if isinstance(marked, set) and __package__ in marked:
        marked.discard(__package__)
        getattr(hook, "_marked_for_rewrite_cache", {}).clear()


def target_name(config: pytest.Config) -> str:
    """The run's target: --attnspec, else the ini option; "" for none (the plugin then does nothing)."""
    named = config.getoption("attnspec")
    if named is None:
        named = config.getini(INI)
    return str(named).strip()


def pytest_configure(config: pytest.Config) -> None:
    name = target_name(config)
    if name:
        config.pluginmanager.register(KitSession(config, name), SESSION)


def _environment(config: pytest.Config, values: dict[str, str]) -> None:
    """Set environment variables for this run, as they were again when it ends."""
    saved = {key: os.environ.get(key) for key in values}

    def restore() -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    config.add_cleanup(restore)
    os.environ.update(values)


class KitProperties(pytest.Directory):
    """The kit's properties folder: its test files, whatever the session's python_files says."""

    def collect(self) -> Iterator[pytest.Module]:
        for path in sorted(self.path.glob(TEST_FILES)):
            # their assertions rewritten, as pytest rewrites those of files its python_files names
            pytest.register_assert_rewrite(importable_name(path)[0])
            yield KitModule.from_parent(self, path=path, nodeid=f"{NODEID}/{path.name}")


def importable_name(path: Path) -> tuple[str, Path]:
    """The name a Python file is imported under, and the folder to put on the path for it: its
    dotted path from the outermost folder above it that is still a package
    (attnspec.kit.properties.test_attention), as pytest imports it."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


class KitModule(pytest.Module):
    """A test file of the kit: its tests are its test* functions, whatever python_functions and
    python_classes say (the kit's helper classes, LayerCase and the like, are never test classes)."""

    def funcnamefilter(self, name: str) -> bool:
        return name.startswith("test")

    def classnamefilter(self, name: str) -> bool:
        return name.startswith("Test")


class KitSession:
    """The plugin of a run with a target: it checks the target, adds the kit's collector to the session,
    marks the kit's tests and ends the run's summary with the kit's verdict."""

    def __init__(self, config: pytest.Config, name: str) -> None:
        import attnspec.kit.properties

        self.config = config
        self.name = name
        self.directory = Path(attnspec.kit.properties.__file__).resolve().parent
        if config.pluginmanager.has_plugin(str(self.directory / "conftest.py")):
            raise pytest.UsageError(
                f"--attnspec {name}: this run collects attnspec's own properties already (its arguments "
                "or testpaths hold them): there they take --impl TARGET"
            )
        self.device = config.getoption("attnspec_device") or os.environ.get("ATTNSPEC_DEVICE", "cpu")
        profile = os.environ.get("HYPOTHESIS_PROFILE", "default")
        self.profile = config.getoption("attnspec_profile") or (profile if profile in PROFILES else "default")
        self.database = config.getoption("attnspec_db") or ""
        self._hypothesis: _HypothesisProfile | None = None
        # Hypothesis's own files of the kit's tests (its cache of constants): there, not in your project
        self._files = contextlib.ExitStack()
        self.hypothesis_home = self._files.enter_context(folders.locked_temporary(HYPOTHESIS_HOME_PREFIX))
        config.addinivalue_line(
            "markers", f"{MARKER}: a property of attnspec's kit (pytest --attnspec TARGET)"
        )
        self.isolation = None
        if not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") == "no":
            # pytest-xdist runs tests in processes of its own: there the kit's run where yours do
            from attnspec.runner.parallel import NAME, TIMEOUT, Parallel, default_memory

            timeout = config.getoption("attnspec_timeout") or TIMEOUT
            self.isolation = Parallel(1, timeout, default_memory(1), lambda item: _of_the_kit(item.nodeid))
            config.pluginmanager.register(self.isolation, NAME)
        from attnspec.protocol import targets

        # the kit's test modules, its strategies and its conftest read the target from there
        self._variable = targets.ENV
        _environment(config, {targets.ENV: name, targets.DEVICE_ENV: self.device})
        self.target = self._checked_target()
        from attnspec.kit.run_report import RunReport

        self.report = RunReport()  # of the kit's tests alone (the kit's conftest's counts all of them)

    @property
    def options(self) -> dict[str, str]:
        """What the kit's conftest reads (kit/fixtures.py: kit_option) instead of its own options."""
        return {"--impl": self.name, "--device": self.device}

    def _checked_target(self):
        """The target, loaded and called once on a small problem (as the kit's conftest does, but before
        collection, so that a target that cannot be checked stops the run with one line)."""
        import torch

        from attnspec.kit.target_checks import load_problem, probed

        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise pytest.UsageError(
                f"--attnspec-device={self.device} was asked for, but torch sees no CUDA GPU"
            )
        # TARGET is imported as your tests import their modules, or from where pytest runs (as
        # `attnspec check` imports it; the `pytest` command, unlike `python -m pytest`, does not put
        # the current directory on sys.path)
        here = str(self.config.invocation_params.dir)
        added = here not in sys.path
        if added:
            sys.path.append(here)
        try:
            target = loading.current()
        except Exception as error:  # its module may raise anything at import: one line
            raise pytest.UsageError(load_problem(self.name, error)) from error
        finally:
            if added:
                sys.path.remove(here)
        problems = probed(target, self.device, self.isolation)[0]
        if problems:
            raise pytest.UsageError("the target cannot be checked:\n" + "\n".join(problems))
        return target

    def pytest_report_header(self) -> str:
        return (
            f"attnspec: properties against {self.name} (profile {self.profile}, device {self.device}) "
            f"from {self.directory}"
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        """The kit's folder comes from its own collector only (a session whose arguments reach it
        would otherwise collect it twice)."""
        return True if collection_path == self.directory else None

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        if isinstance(collector, KitProperties):
            return (yield from self._importing_the_kits_conftest())
        report = yield
        if isinstance(collector, pytest.Session) and report.passed:
            report.result.append(KitProperties.from_parent(collector, path=self.directory, nodeid=NODEID))
        return report

    def _importing_the_kits_conftest(self):
        """Collecting the kit's folder imports its conftest, which registers its Hypothesis profiles and
        loads the one $HYPOTHESIS_PROFILE names: the one asked for here (a conftest of yours may read
        that variable too: it is set for this import alone), and yours kept, to be restored once the
        kit's tests are collected.  $ATTNSPEC_DB likewise: where the kit keeps its failing examples
        (--attnspec-db; without it, nowhere)."""
        self._hypothesis = _HypothesisProfile()
        values = {"HYPOTHESIS_PROFILE": self.profile, DATABASE_ENV: self.database}
        saved = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        try:
            with self._kits_hypothesis_files():
                return (yield)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if _of_the_kit(item.nodeid):
            item.add_marker(MARKER)

    def pytest_collection_finish(self) -> None:
        if self._hypothesis is not None:  # the kit's tests hold the kit's profile; yours, yours
            self._hypothesis.restore()

    def _pin_target(self, item: pytest.Item) -> None:
        """The kit reads its target from the environment while a test runs (its strategies draw what the
        target supports): a fixture of yours that empties the environment must not make it impl."""
        if _of_the_kit(item.nodeid) and os.environ.get(self._variable) != self.name:
            os.environ[self._variable] = self.name

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        self._pin_target(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item):
        if not _of_the_kit(item.nodeid):
            return (yield)
        with self._kits_hypothesis_files():
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(self):
        """(Hypothesis's plugin caches the constants of every module imported here, once a test of
        Hypothesis's is collected: the kit's are.)"""
        with self._kits_hypothesis_files():
            return (yield)

    @contextlib.contextmanager
    def _kits_hypothesis_files(self) -> Iterator[None]:
        """Hypothesis's files of the kit's tests (its cache of the constants in the code they import,
        written as they are collected and run) go to the kit's temporary folder; yours where yours do."""
        from hypothesis import configuration

        yours = vars(configuration).get(HYPOTHESIS_HOME)
        configuration.set_hypothesis_home_dir(self.hypothesis_home)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(yours)

    def pytest_unconfigure(self) -> None:
        self._files.close()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> None:
        self._pin_target(item)  # the kit's conftest reads it to report a failure

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if _of_the_kit(report.nodeid):
            self.report.pytest_runtest_logreport(report)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        """The kit's capability table of the target (what it declares, what its absence skipped) and the
        verdict on the kit's tests alone, as `attnspec check` ends."""
        if self.config.option.collectonly:
            return
        terminalreporter.section(f"attnspec: capabilities of --impl {self.name}")
        for line in self.report.capability_lines(self.target):
            terminalreporter.write_line(line)
        terminalreporter.write_line(self.report.verdict(self.target))


def _of_the_kit(nodeid: str) -> bool:
    """A node id of the kit's tests (by its id, which is all a report sent by pytest-xdist's workers
    carries)."""
    return nodeid.startswith(NODEID + "/")


class _HypothesisProfile:
    """The Hypothesis profile of your session, restored once the kit's conftest, which registers and
    loads its own profiles (quick, default, ci, thorough, mutation) when it is imported, has been imported and
    the kit's tests collected: a Hypothesis test holds the profile it was decorated under."""

    def __init__(self) -> None:
        from hypothesis import settings
        from hypothesis.errors import InvalidArgument

        # Hypothesis 6.100, the oldest the kit takes, has no get_current_profile_name (what it reads)
        current = getattr(settings, "get_current_profile_name", None)
        self.name = current() if current else settings._current_profile
        self.profiles = {}
        for name in (*PROFILES, "mutation", self.name):
            try:
                self.profiles[name] = settings.get_profile(name)
            except InvalidArgument:
                pass

    def restore(self) -> None:
        from hypothesis import settings

        for name, profile in self.profiles.items():
            settings.register_profile(name, profile)
        settings.load_profile(self.name)
