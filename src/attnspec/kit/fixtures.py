"""The fixtures the properties take (the device, impl's attention paths) and the options they read:
the kit's conftest and the repository's own tests (tests/conftest.py) import them."""

from __future__ import annotations

import contextlib
import os
import sys

import pytest
import torch
from hypothesis import seed

from attnspec.kit import loading
from attnspec.kit.names import SESSION
from attnspec.kit.patching import recorded_calls
from attnspec.protocol import targets

DEFAULTS = {"--device": ("ATTNSPEC_DEVICE", "cpu"), "--impl": (targets.ENV, "impl")}


def kit_option(config: pytest.Config, name: str) -> str:
    """--impl or --device: the kit's own options or, in your own session (pytest --attnspec TARGET,
    attnspec/runner/pytest_plugin.py), the plugin's --attnspec and --attnspec-device, which cannot clash with
    a --device of your conftest's."""
    session = config.pluginmanager.get_plugin(SESSION)
    return session.options[name] if session is not None else config.getoption(name, default=_default(name))



def _default(name: str) -> str:
    """An option's value where no conftest of the kit added it (the repository's tests run alone)."""
    variable, default = DEFAULTS[name]
    return os.environ.get(variable, default) or default


def parametrize_paths(metafunc: pytest.Metafunc) -> None:
    """Tests that use the attention_path fixture run once per path of impl/; for another target they
    run once, unparametrized (test_x, not test_x[explicit]: the target has no paths of impl's)."""
    if "attention_path" in metafunc.fixturenames and loading.current().name == "impl":
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
