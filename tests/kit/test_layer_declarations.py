"""What a target declares of its layer (tests/fixtures/layer_declarations.py): sizes it cannot be
built with are refused, not failed, and the rest is checked; a declaration or report the kit cannot take
is said in one line, never blamed on the target; a declared score_mod the target ignores fails SCORE-1.
And the declarations' mechanics: Target.fitted, the schedule of a module's layers."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from attnspec.protocol.targets import LayerKind, LayerSpec, Target, schedule_of_windows
from tests.fixtures.kit_runs import ROOT, assert_passes, run_module, run_properties, users_env

TARGETS = "tests.fixtures.layer_declarations"
LAYER_PROPERTIES = "test_layer_matches or test_decoding_through or test_future_tokens"


@pytest.mark.parametrize("name", ["MQA_CANNOT_BUILD", "MQA_DECLARED"])
def test_a_layer_built_with_one_kv_head_only_is_checked_on_the_sizes_it_takes(name):
    assert_passes(run_properties(f"{TARGETS}:{name}", "-k", LAYER_PROPERTIES, as_user=True))


def checked(name: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`attnspec check` of the layer alone, as a user runs it: its verdict and its refused lines."""
    command = [sys.executable, "-m", "attnspec", "check", f"{TARGETS}:{name}", "-k", "test_layer_matches"]
    # the fixture's module is imported from the repository, as a user's from their project
    return run_module([*command, "--profile", "quick"], tmp_path, {**users_env(), "PYTHONPATH": str(ROOT)})


def test_a_layer_that_raises_on_a_size_it_did_not_declare_is_refused_with_what_to_declare(tmp_path):
    done = checked("MQA_UNDECLARED", tmp_path)
    assert done.returncode == 2, done.stdout[-3000:]
    assert "num_kv_heads must be 1" in done.stdout and "OBJ.kv_heads" in done.stdout, done.stdout[-3000:]
    assert "attnspec.CannotBuild" in done.stdout and "NOT CHECKED" in done.stdout, done.stdout[-3000:]


def test_a_report_the_oracle_cannot_take_is_refused_saying_what(tmp_path):
    done = checked("QK_NORM_OF_ANOTHER_SHAPE", tmp_path)
    assert done.returncode == 2, done.stdout[-3000:]
    assert "the layer reports q_norm of shape (" in done.stdout, done.stdout[-3000:]


def test_a_declared_score_mod_the_target_ignores_fails_saying_so():
    done = run_properties(f"{TARGETS}:CAP_IGNORED", "-k", "score_mod", profile="mutation", as_user=True)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "the target ignores its declared score_mod" in done.stdout, done.stdout[-3000:]


def target(**declared) -> Target:
    return Target("t", None, frozenset({"layer", "gqa"}), layer=lambda spec: None, **declared)


def test_a_spec_is_fitted_to_the_sizes_a_target_takes():
    spec = LayerSpec(d_model=24, n_heads=6, n_kv_heads=3, head_dim=4, base=10.0, context_dim=5)
    assert target().fitted(spec) == spec
    multi_query = target(kv_heads=(1,)).fitted(spec)
    assert (multi_query.n_heads, multi_query.n_kv_heads) == (6, 1)
    assert target(rope_base=10000.0).fitted(spec).base == 10000.0
    assert target(tied_context=True).fitted(spec).context_dim is None
    four = target(heads=(4,), tied_width=True, head_dims=(16,)).fitted(spec)
    assert (four.n_heads, four.head_dim, four.d_model) == (4, 16, 64) and 4 % four.n_kv_heads == 0
    mha = replace(spec, n_kv_heads=6)
    assert target(heads=(4,)).fitted(mha).n_kv_heads == 4  # multi-head attention stays so


def test_windows_are_the_short_form_of_a_schedule_and_a_schedule_says_what_windows_cannot():
    short = (LayerKind("window", 3, rope=None), LayerKind("causal", rope=None))
    assert schedule_of_windows((3, None)) == short
    identity = torch.nn.Identity()
    module = Target("m", None, frozenset({"module"}), module=identity, d_model=4, windows=(3, None))
    assert module.schedule == schedule_of_windows((3, None))
    nope = (LayerKind("window", 3), LayerKind("causal", rope=False))
    assert replace(module, schedule=nope).schedule == nope  # the same masks: consistent with the windows
    with pytest.raises(ValueError, match="differ"):
        replace(module, schedule=(LayerKind("chunk", 3), LayerKind("causal")))
    with pytest.raises(ValueError, match="a chunk layer has a positive size"):
        LayerKind("chunk")
    with pytest.raises(ValueError, match="one of"):
        LayerKind("sliding")
    assert str(LayerKind("local", 2, base=1e4)) == "local 2, RoPE base 10000"
