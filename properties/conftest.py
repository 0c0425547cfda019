"""pytest wiring for the properties: Hypothesis profiles, the device, the req marker."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

from properties import targets
from properties.patching import recorded_calls
from properties.target_checks import target_problems
from specs import REQUIREMENTS

_common = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("default", max_examples=25, **_common)
settings.register_profile("ci", max_examples=150, **_common)
settings.register_profile("thorough", max_examples=1000, **_common)
# Under mutmut: the same examples every run, no database, no shrinking: otherwise a campaign is slow
# and a mutant can flip between killed and timeout.
settings.register_profile(
    "mutation",
    max_examples=20,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    **_common,
)
if os.environ.get("MUTANT_UNDER_TEST"):
    settings.load_profile("mutation")
else:
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
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


def pytest_configure(config: pytest.Config) -> None:
    # The properties run many tiny ops (Jacobians are T small backward passes): torch's intra-op
    # thread pool only adds overhead there, and on a loaded 2-core machine made them 10-100x slower.
    torch.set_num_threads(1)
    device = config.getoption("--device")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise pytest.UsageError(f"--device={device} was asked for, but torch sees no CUDA GPU")
    os.environ[targets.ENV] = config.getoption("--impl")  # test modules read it when imported
    try:
        target = targets.current()
    except (ImportError, AttributeError, TypeError, ValueError) as error:
        raise pytest.UsageError(f"--impl {config.getoption('--impl')}: {error}") from error
    # Under mutation (mutmut, the kill matrix) the properties grade impl's mutants: a usage error here
    # would turn a kill into pytest's exit code 4, which mutmut counts as "suspicious".
    problems = [] if os.environ.get("MUTANT_UNDER_TEST") else target_problems(target, device)
    if problems:
        raise pytest.UsageError("the target cannot be checked:\n" + "\n".join(problems))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every property names known requirement ids; helper self-tests (meta_tests/) and the
    mutation machinery's tests (mutants/tests/) check no requirement and are exempt."""
    problems = []
    for item in items:
        ids = [rid for mark in item.iter_markers("req") for rid in mark.args]
        unknown = [rid for rid in ids if rid not in REQUIREMENTS]
        if unknown:
            problems.append(f"{item.nodeid} names unknown requirement ids {unknown}")
        elif not ids and item.nodeid.startswith("properties/") and "/meta_tests/" not in item.nodeid:
            problems.append(f"{item.nodeid} names no requirement (add @pytest.mark.req('ID'))")
    if problems:
        raise pytest.UsageError("\n".join(problems))
    target = targets.current()
    for item in items:
        missing = sorted(
            {cap for mark in item.iter_markers("needs") for cap in mark.args} - target.capabilities
        )
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"--impl {target.name} lacks: {', '.join(missing)}"))
            for capability in missing:
                _skipped_for[capability] = _skipped_for.get(capability, 0) + 1


_skipped_for: dict[str, int] = {}  # capability -> tests skipped because the target lacks it


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The capability table of the target: what it supports and what its absence skipped."""
    target = targets.current()
    if target.name == "impl" and not _skipped_for:
        return
    terminalreporter.section(f"capabilities of --impl {target.name}")
    for name, meaning in targets.CAPABILITIES.items():
        mark = "yes" if name in target.capabilities else "no "
        skipped = f"  (skipped {_skipped_for[name]})" if name in _skipped_for else ""
        terminalreporter.write_line(f"  {mark}  {name:<11} {meaning}{skipped}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests that use the attention_path fixture run once per path of impl/ (once for other targets)."""
    if "attention_path" in metafunc.fixturenames:
        paths = list(ATTENTION_PATHS) if targets.current().name == "impl" else ["explicit"]
        metafunc.parametrize("attention_path", paths, indirect=True, scope="module")


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.config.getoption("--device"))


# The attention paths every attention-level property runs on: the explicit formula (tiling off)
# and the tiled path with tiles of 3 queries, so the small drawn sequences span several tiles,
# a ragged last tile included.
ATTENTION_PATHS = {"explicit": sys.maxsize, "tiled": 3}


@pytest.fixture(scope="module")
def attention_path(request: pytest.FixtureRequest):
    """Run the requesting tests once per attention path (impl.attention.QUERY_TILE)."""
    import impl.attention

    saved = impl.attention.QUERY_TILE
    impl.attention.QUERY_TILE = ATTENTION_PATHS[request.param]
    yield request.param
    impl.attention.QUERY_TILE = saved


@pytest.fixture(autouse=True)
def tiled_path_taken(request: pytest.FixtureRequest):
    """A test that claims the tiled path must take it: it fails when none of its examples reached
    impl.attention.tiled_attention (a property that only reads weights, runs non-causal attention
    or only has queries that see no key never does, and runs once instead)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or callspec.params.get("attention_path") != "tiled":
        yield
        return
    import impl.attention

    with recorded_calls(impl.attention, "tiled_attention", lambda *args, **kwargs: None) as calls:
        yield
    if not calls:
        pytest.fail(
            f"{request.node.nodeid} claims the tiled path (the attention_path fixture) but no example "
            f"took it: draw causal cases with Tq > {ATTENTION_PATHS['tiled']} and Tq <= Tk, or drop the "
            "claim",
            pytrace=False,
        )
