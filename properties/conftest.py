"""pytest wiring for the properties: Hypothesis profiles, the device, the req marker."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from attnspec.parallel import NAME as ISOLATION
from attnspec.properties import global_state, reproducers, targets
from attnspec.properties.conventions import TERSE
from attnspec.properties.diagnosis import target_diagnosis
from attnspec.properties.laws import law_problem
from attnspec.properties.patching import recorded_calls
from attnspec.properties.run_report import NAME as RUN_REPORT
from attnspec.properties.run_report import RunReport, lacks, short_test_name
from attnspec.properties.target_checks import load_problem, probed
from attnspec.pytest_plugin import DATABASE_ENV, FAILURES_ENV, SESSION
from attnspec.specs import REQUIREMENTS

HYPOTHESIS_FAILING_EXAMPLES = "_hypothesis_failing_examples"  # what Hypothesis leaves on a failed item


def _database() -> dict:
    """Where Hypothesis keeps the failing examples it found.  `attnspec check --db PATH` and `pytest
    --attnspec-db PATH` set $ATTNSPEC_DB, to "" without the option: then none is kept, and a check
    writes no .hypothesis/ folder into the user's project.  Unset (this repository's own runs):
    Hypothesis's default, .hypothesis/ where pytest runs."""
    if DATABASE_ENV not in os.environ:
        return {}
    path = os.environ[DATABASE_ENV]
    return {"database": DirectoryBasedExampleDatabase(path) if path else None}


_common = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    **_database(),
}
# quick: for an editor or a pre-commit hook (explicit examples and a few drawn ones); default for a
# day's work; ci and thorough for the runs that are waited for
settings.register_profile("quick", max_examples=5, **_common)
settings.register_profile("default", max_examples=25, **_common)
settings.register_profile("ci", max_examples=150, **_common)
settings.register_profile("thorough", max_examples=1000, **_common)
# Under mutmut: the same examples every run, no database, no shrinking: otherwise a campaign is slow
# and a mutant can flip between killed and timeout.
settings.register_profile(
    "mutation",
    max_examples=20,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    **{**_common, "database": None},
)
if os.environ.get("MUTANT_UNDER_TEST"):
    settings.load_profile("mutation")
else:
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if pluginmanager.has_plugin(SESSION):  # in your own session (pytest --attnspec): kit_option
        return
    parser.addoption(
        "--device",
        default=os.environ.get("ATTNSPEC_DEVICE", "cpu"),
        help="torch device the properties run on (default: $ATTNSPEC_DEVICE or cpu)",
    )
    parser.addoption(
        "--impl",
        default=os.environ.get(targets.ENV, "impl"),
        help="the implementation under test: a built-in adapter "
        f"({', '.join(targets.ADAPTERS)}) or package.module:object (default: ${targets.ENV} or impl)",
    )


def kit_option(config: pytest.Config, name: str) -> str:
    """--impl or --device: the kit's own options or, in your own session (pytest --attnspec TARGET,
    attnspec/pytest_plugin.py), the plugin's --attnspec and --attnspec-device, which cannot clash with
    a --device of your conftest's."""
    session = config.pluginmanager.get_plugin(SESSION)
    return session.options[name] if session is not None else config.getoption(name)


MARKERS = (
    "req(*ids): the requirement ids (specs/requirements.toml) that a test checks",
    "needs(*capabilities): what the implementation under test must support (properties/targets.py)",
    "law(*names): laws that hold only under some declarations (properties/laws.py)",
)
HERE = Path(__file__).parent
META_TESTS = HERE / "meta_tests"  # the suite's tests of its own helpers: run for impl only


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    config.pluginmanager.register(RunReport(), RUN_REPORT)
    # The properties run many tiny ops (Jacobians are T small backward passes): torch's intra-op
    # thread pool only adds overhead there, and on a loaded 2-core machine made them 10-100x slower.
    torch.set_num_threads(1)
    device = kit_option(config, "--device")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise pytest.UsageError(f"--device={device} was asked for, but torch sees no CUDA GPU")
    os.environ[targets.ENV] = kit_option(config, "--impl")  # test modules read it when imported
    try:
        target = targets.current()
    except Exception as error:  # its module may raise anything at import (a SyntaxError...): one line
        raise pytest.UsageError(load_problem(kit_option(config, "--impl"), error)) from error
    # Under mutation (mutmut, the kill matrix) the properties grade impl's mutants: a usage error here
    # would turn a kill into pytest's exit code 4, which mutmut counts as "suspicious".
    report = config.pluginmanager.get_plugin(RUN_REPORT)
    problems: list[str] = []
    if not os.environ.get("MUTANT_UNDER_TEST"):
        isolation = config.pluginmanager.get_plugin(ISOLATION)
        problems, report.first_call, report.call, report.new_sizes_call = probed(target, device, isolation)
    if problems:
        raise pytest.UsageError("the target cannot be checked:\n" + "\n".join(problems))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The suite's meta tests check its own helpers: they run with impl/, not for other targets."""
    if collection_path == META_TESTS and not targets.current().supports("impl"):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every property names known requirement ids (helper self-tests in meta_tests/ and the mutation
    machinery's tests check none and are exempt).  A test of impl/'s own API is deselected for
    another target; one that needs another capability the target lacks is skipped."""
    problems = []
    for item in items:
        ids = [rid for mark in item.iter_markers("req") for rid in mark.args]
        unknown = [rid for rid in ids if rid not in REQUIREMENTS]
        if unknown:
            problems.append(f"{item.nodeid} names unknown requirement ids {unknown}")
        elif not ids and item.path.is_relative_to(HERE) and not item.path.is_relative_to(META_TESTS):
            problems.append(f"{item.nodeid} names no requirement (add @pytest.mark.req('ID'))")
        if ids:
            item.user_properties.append(("requirements", ",".join(ids)))
    if problems:
        raise pytest.UsageError("\n".join(problems))
    target = targets.current()
    kept, impl_only = [], []
    for item in items:
        needed = {cap for mark in item.iter_markers("needs") for cap in mark.args}
        if ("impl" in needed and not target.supports("impl")) or _of_another_kind(item, target):
            impl_only.append(item)
            continue
        kept.append(item)
        missing = sorted(needed - target.capabilities)
        laws = [law_problem(target, law) for mark in item.iter_markers("law") for law in mark.args]
        broken = [problem for problem in laws if problem is not None]
        if missing:
            item.add_marker(pytest.mark.skip(reason=lacks(target, *missing)))
        elif broken:
            item.add_marker(pytest.mark.skip(reason=broken[0]))
    if impl_only:
        config.hook.pytest_deselected(items=impl_only)
        items[:] = kept


MODULE_PROPERTIES = HERE / "test_modules.py"
LAYER_PROPERTIES = HERE / "test_attention_layer.py"  # for any target: a module's white box too
CROSS_PROPERTIES = HERE / "test_cross_attention.py"  # for any target with a cross-attention layer


def _of_another_kind(item: pytest.Item, target: targets.Target) -> bool:
    """A property for another kind of target: an attention property for a module target (it has no
    attention function), a module property for a target that is no module.  The layer properties
    are of every kind (a module without a layer() is told that they need one)."""
    if item.path == MODULE_PROPERTIES:
        return not target.supports("module")
    if item.path in (LAYER_PROPERTIES, CROSS_PROPERTIES):
        return False
    return target.attention is None and _is_property(item)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The capability table of the target: what it supports and what its absence skipped (the
    `attnspec check` command prints it itself, last, and so does pytest --attnspec, with its verdict)."""
    target = targets.current()
    report = config.pluginmanager.get_plugin(RUN_REPORT)
    if config.pluginmanager.has_plugin("attnspec-check") or config.pluginmanager.has_plugin(SESSION):
        return
    if target.name == "impl" and not report.skipped_for:
        return
    terminalreporter.section(f"capabilities of --impl {target.name}")
    for line in report.capability_lines(target):
        terminalreporter.write_line(line)


def pytest_runtest_setup(item: pytest.Item) -> None:
    reproducers.forget()  # the calls a failure looks among are its own test's


RNG_AT_START = torch.random.get_rng_state()  # the generator as the run found it


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Each property runs from the same global state (global_state.py), whatever ran before it (the
    user's own tests under pytest --attnspec); a target that changes that state during a property
    fails it, told what it changed, and the state is put back for the next."""
    if not _is_property(item):
        return (yield)
    global_state.restore(global_state.CLEAN)
    torch.random.set_rng_state(RNG_AT_START)
    try:
        return (yield)
    finally:
        changed = global_state.changes(global_state.CLEAN, global_state.snapshot())
        if changed:
            global_state.restore(global_state.CLEAN)
            raise global_state.ChangedGlobalState(
                f"the target {'; '.join(changed)} and left it so: a target must leave torch's global "
                "state as it found it (attnspec put it back for the next property)"
            )


def _is_property(item: pytest.Item) -> bool:
    return item.path.is_relative_to(HERE) and not item.path.is_relative_to(META_TESTS)


def _handed_back(item: pytest.Item, report: pytest.TestReport, target: targets.Target, call) -> None:
    """What the user gets back from a failure (reproducers.py): an error the target raised on an input,
    or building a layer for a spec it declares it takes, is a refusal, one line saying what to declare
    (``attnspec_refused``), and so is a declaration the kit cannot take; otherwise, where `attnspec
    check` asks for reproducers ($ATTNSPEC_FAILURES), the failing call of this test against the oracle,
    saved as a script that replays it: the report carries the script's path, the call in words, its
    wrong rows and its size (``attnspec_reproducer``: they travel between processes).  A change of
    torch's global state is said in one line too (``attnspec_state``), and so is memory the target
    exhausted (``attnspec_process``)."""
    if call.excinfo is not None and isinstance(call.excinfo.value, global_state.ChangedGlobalState):
        report.attnspec_state = str(call.excinfo.value)
        return
    exhausted = reproducers.out_of_memory(call.excinfo.value) if call.excinfo is not None else None
    if exhausted:
        report.attnspec_process = exhausted
        return
    refused = reproducers.layer_refusal(call.excinfo.value) if call.excinfo is not None else None
    if refused:
        report.attnspec_refused = refused
        return
    if target.attention is None:
        return
    refused = reproducers.refusal(target, call.excinfo.value) if call.excinfo is not None else None
    if refused:
        report.attnspec_refused = refused
        return
    folder = os.environ.get(FAILURES_ENV)
    if not folder:
        return
    call = reproducers.failing_call(target)
    if call is None:
        return
    ids = [rid for key, value in item.user_properties if key == "requirements" for rid in value.split(",")]
    test = short_test_name(item.nodeid)
    name = test.split("::", 1)[-1]
    script = reproducers.write(Path(folder), name, call, target.name, ", ".join(ids), test)
    size = call["q"].numel() + call["k"].numel()
    report.attnspec_reproducer = (str(script), reproducers.described(call), call["rows"], size)


@functools.cache
def _diagnosis(target: targets.Target, device: str) -> str | None:
    return target_diagnosis(target, device)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A property that fails a target other than impl ends with the run's diagnosis of the target
    (diagnosis.py: the other convention it follows, if any), computed once, at the first failure.
    Inside Hypothesis's own wrapper (trylast), the failing examples it left on the item are dropped:
    its pytest plugin would write a patch that adds them to the kit's test file (`git apply
    .hypothesis/patches/...` in the summary), the installed kit's, not the user's to edit."""
    report = yield
    item.__dict__.pop(HYPOTHESIS_FAILING_EXAMPLES, None)
    target = targets.current()
    terse = os.environ.get(TERSE) == "1"  # a campaign's mutant run: the failure alone counts
    if report.when == "call" and report.failed and not target.supports("impl") and not terse:
        try:  # first: the diagnosis calls the target too
            _handed_back(item, report, target, call)
        except Exception as error:  # what is handed back is extra: the failure is reported whatever it does
            report.sections.append(
                ("attnspec could not build a reproducer", f"{type(error).__name__}: {error}")
            )
        diagnosis = _diagnosis(target, kit_option(item.config, "--device"))
        if diagnosis:
            report.sections.append(("attnspec's diagnosis of the target", diagnosis))
    return report


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests that use the attention_path fixture run once per path of impl/; for another target they
    run once, unparametrized (test_x, not test_x[explicit]: the target has no paths of impl's)."""
    if "attention_path" in metafunc.fixturenames and targets.current().name == "impl":
        metafunc.parametrize("attention_path", list(ATTENTION_PATHS), indirect=True, scope="module")


@contextlib.contextmanager
def _seeded_by_name(item: pytest.Item):
    """Run the Hypothesis test of ``item`` with hypothesis.seed(its module and name), then give the test
    function (shared by every parametrization of it) its own seed and settings back."""
    test = getattr(item, "obj", None)
    if not hasattr(getattr(test, "hypothesis", None), "inner_test"):
        yield  # explicit examples only: the same every run already
        return
    saved = test._hypothesis_internal_use_seed, test._hypothesis_internal_use_settings
    seed(f"{item.module.__name__}.{item.name}")(test)
    try:
        yield
    finally:
        test._hypothesis_internal_use_seed, test._hypothesis_internal_use_settings = saved


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(kit_option(request.config, "--device"))


# The attention paths every attention-level property runs on: the explicit formula (tiling off)
# and the tiled path with tiles of 3 queries, so the small drawn sequences span several tiles,
# a ragged last tile included.
ATTENTION_PATHS = {"explicit": sys.maxsize, "tiled": 3}


@pytest.fixture(scope="module")
def attention_path(request: pytest.FixtureRequest):
    """Run the requesting tests once per attention path (attnspec.impl.attention.QUERY_TILE); not
    parametrized (another target than impl), the explicit path."""
    from attnspec.impl import attention as impl_attention

    path = getattr(request, "param", "explicit")
    saved = impl_attention.QUERY_TILE
    impl_attention.QUERY_TILE = ATTENTION_PATHS[path]
    yield path
    impl_attention.QUERY_TILE = saved


@pytest.fixture(autouse=True)
def tiled_path_taken(request: pytest.FixtureRequest):
    """A test that claims the tiled path must take it: it fails when none of its examples reached
    attnspec.impl.attention.tiled_attention (a property that only reads weights, runs non-causal attention
    or only has queries that see no key never does, and runs once instead).

    Whether random draws reach the path would be luck (no causal case with Tq > 3 among 25 draws
    happens now and then), so a claiming test draws its examples from a seed of its own name: the same
    examples every run and every --hypothesis-seed, checked here once for all.  Its [explicit] twin keeps
    drawing at random, and the path's code is the same for both."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or callspec.params.get("attention_path") != "tiled":
        yield
        return
    from attnspec.impl import attention as impl_attention

    with (
        _seeded_by_name(request.node),
        recorded_calls(impl_attention, "tiled_attention", lambda *args, **kwargs: None) as calls,
    ):
        yield
    if not calls:
        pytest.fail(
            f"{request.node.nodeid} claims the tiled path (the attention_path fixture) but no example "
            f"took it: draw causal cases with Tq > {ATTENTION_PATHS['tiled']} and Tq <= Tk, or drop the "
            "claim",
            pytrace=False,
        )
