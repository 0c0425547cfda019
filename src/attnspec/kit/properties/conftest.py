"""pytest wiring for the properties: Hypothesis profiles, the device, the req marker."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from attnspec.kit import breaches, fixtures, global_state, loading, profiles, recording, reproducers
from attnspec.kit.conventions import TERSE
from attnspec.kit.diagnosis import case_finding, target_diagnosis
from attnspec.kit.fixtures import kit_option, parametrize_paths
from attnspec.kit.laws import law_problem
from attnspec.kit.names import FAILURES_ENV, ISOLATION, SESSION
from attnspec.kit.recording import first_error
from attnspec.kit.run_report import NAME as RUN_REPORT
from attnspec.kit.run_report import RunReport, lacks, short_test_name
from attnspec.kit.target_checks import load_problem, probed
from attnspec.protocol import targets
from attnspec.specs import REQUIREMENTS

HYPOTHESIS_FAILING_EXAMPLES = "_hypothesis_failing_examples"  # what Hypothesis leaves on a failed item
profiles.load()
# the fixtures the properties take (attnspec/kit/fixtures.py)
attention_path, device, tiled_path_taken = fixtures.attention_path, fixtures.device, fixtures.tiled_path_taken


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


MARKERS = (
    "req(*ids): the requirement ids (src/attnspec/specs/requirements.toml) that a test checks",
    "needs(*capabilities): what the implementation under test must support (attnspec/protocol/targets.py)",
    "law(*names): laws that hold only under some declarations (src/attnspec/kit/laws.py)",
)
HERE = Path(__file__).parent


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
    os.environ[targets.DEVICE_ENV] = device  # the target is imported for it (a Triton kernel interpreted)
    try:
        target = loading.current()
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every property names known requirement ids (the repository's tests of the kit's helpers and of
    the mutation machinery check none and are exempt).  A property of another kind of target is
    deselected; one that needs a capability the target lacks is skipped."""
    problems = []
    for item in items:
        ids = [rid for mark in item.iter_markers("req") for rid in mark.args]
        unknown = [rid for rid in ids if rid not in REQUIREMENTS]
        if unknown:
            problems.append(f"{item.nodeid} names unknown requirement ids {unknown}")
        elif not ids and item.path.is_relative_to(HERE):
            problems.append(f"{item.nodeid} names no requirement (add @pytest.mark.req('ID'))")
        if ids:
            item.user_properties.append(("requirements", ",".join(ids)))
    if problems:
        raise pytest.UsageError("\n".join(problems))
    target = loading.current()
    kept, other_kind = [], []
    for item in items:
        needed = {cap for mark in item.iter_markers("needs") for cap in mark.args}
        if _of_another_kind(item, target):
            other_kind.append(item)
            continue
        kept.append(item)
        missing = sorted(needed - target.capabilities)
        laws = [law_problem(target, law) for mark in item.iter_markers("law") for law in mark.args]
        broken = [problem for problem in laws if problem is not None]
        if missing:
            item.add_marker(pytest.mark.skip(reason=lacks(target, *missing)))
        elif broken:
            item.add_marker(pytest.mark.skip(reason=broken[0]))
    if other_kind:
        config.hook.pytest_deselected(items=other_kind)
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
    target = loading.current()
    report = config.pluginmanager.get_plugin(RUN_REPORT)
    if config.pluginmanager.has_plugin("attnspec-check") or config.pluginmanager.has_plugin(SESSION):
        return
    if target.name == "impl" and not report.skipped_for:
        return
    terminalreporter.section(f"capabilities of --impl {target.name}")
    for line in report.capability_lines(target):
        terminalreporter.write_line(line)


def pytest_runtest_setup(item: pytest.Item) -> None:
    recording.forget()  # the calls a failure looks among are its own test's


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
    breaches.listen()  # a real Ctrl-C from here on is told from a KeyboardInterrupt the target raises
    try:
        return (yield)
    except BaseException as error:  # a module target's SystemExit (an attention call's: recording.py)
        breach = breaches.escaped(error, "a call of its module")
        if breach is None:
            raise
        raise breach from None
    finally:
        changed = global_state.changes(global_state.CLEAN, global_state.snapshot())
        if changed:
            global_state.restore(global_state.CLEAN)
            raise global_state.ChangedGlobalState(
                f"the target {'; '.join(changed)} and left it so: a target must leave torch's global "
                "state as it found it (attnspec put it back for the next property)"
            )


def _is_property(item: pytest.Item) -> bool:
    """A property names the requirements it checks (the kit's, and impl's own tests in the
    repository); a test of a helper names none."""
    return any(True for _ in item.iter_markers("req"))


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
    if call.excinfo is not None and isinstance(breach := first_error(call.excinfo.value), breaches.Breach):
        report.attnspec_process = str(breach)  # said once, as a crash is
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
    report.attnspec_reproducer = (str(script), recording.described(call), call["rows"], size)
    device = kit_option(item.config, "--device")
    report.attnspec_cause = (
        case_finding(target, call["q"], call["k"], call["v"], call["keywords"], device) or ""
    )


@contextlib.contextmanager
def unheard() -> Iterator[None]:
    """What is printed through sys.stdout and sys.stderr inside, dropped."""
    with (
        open(os.devnull, "w") as nowhere,
        contextlib.redirect_stdout(nowhere),
        contextlib.redirect_stderr(nowhere),
    ):
        yield


@functools.cache
def _diagnosis(target: targets.Target, device: str) -> str | None:
    return target_diagnosis(target, device)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A property that fails a target other than impl ends with the run's diagnosis of the target
    (diagnosis.py: the convention it follows or the fault it behaves as if it had, if any), computed
    once, at the first failure (in a run of pytest; `attnspec check` prints it itself).
    Inside Hypothesis's own wrapper (trylast), the failing examples it left on the item are dropped:
    its pytest plugin would write a patch that adds them to the kit's test file (`git apply
    .hypothesis/patches/...` in the summary), the installed kit's, not the user's to edit."""
    report = yield
    item.__dict__.pop(HYPOTHESIS_FAILING_EXAMPLES, None)
    target = loading.current()
    terse = os.environ.get(TERSE) == "1"  # a campaign's mutant run: the failure alone counts
    if report.when == "call" and report.failed and target.name != "impl" and not terse:
        try:  # first: the diagnosis calls the target too
            with unheard():  # the target's prints as the kit calls it again: not the test's output
                _handed_back(item, report, target, call)
        except Exception as error:  # what is handed back is extra: the failure is reported whatever it does
            report.sections.append(
                ("attnspec could not build a reproducer", f"{type(error).__name__}: {error}")
            )
        # (`attnspec check` diagnoses the target once, after the run, outside its time budget)
        if not item.config.pluginmanager.has_plugin(ISOLATION):
            with unheard():
                diagnosis = _diagnosis(target, kit_option(item.config, "--device"))
            if diagnosis:
                report.sections.append(("attnspec's diagnosis of the target", diagnosis))
    return report


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_paths(metafunc)
