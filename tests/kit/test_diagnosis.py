"""A failing output is explained honestly (src/attnspec/kit/conventions.py): a convention is named only when
it alone explains the output on its case and the output has the right shape; the run's diagnosis of a
target (src/attnspec/kit/diagnosis.py) names what each broken target does (broken_targets.py), and nothing
for a target that conforms, has a plain bug or returns another shape."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnspec.kit.conventions import (
    WINDOW_IGNORED,
    Candidate,
    convention_mismatch,
    explained_by,
    explanation,
)
from attnspec.kit.declared_mods import declared_mod_note
from attnspec.kit.diagnosis import case_finding, target_diagnosis
from attnspec.kit.loading import load
from attnspec.kit.run_report import Failure
from attnspec.specs.mods import alibi, alibi_slopes
from attnspec.specs.oracle import attention_oracle
from tests.fixtures.broken_targets import FINDINGS
from tests.fixtures.structural_targets import CAUSES

BROKEN = "tests.fixtures.broken_targets"


def qkv(n_heads: int, n_kv_heads: int, tq: int, tk: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(1, heads, t, 4, generator=gen, dtype=torch.float64)
        for heads, t in ((n_heads, tq), (n_kv_heads, tk), (n_kv_heads, tk))
    )


@pytest.mark.parametrize("broken", FINDINGS)
def test_the_diagnosis_names_what_a_broken_target_does_and_nothing_else(broken):
    diagnosis = target_diagnosis(load(f"{BROKEN}:{broken}"))
    assert diagnosis is not None, f"{broken}: no diagnosis"
    lines = diagnosis.splitlines()
    assert len(lines) == 1 and lines[0].startswith(FINDINGS[broken]), diagnosis


def test_the_diagnosis_finds_a_convention_of_the_layer_alone():
    # INTERLEAVED_ROPE without its "rope": only the layer's problems can show its RoPE pairs.
    rope_in_the_layer = load(f"{BROKEN}:INTERLEAVED_ROPE")
    rope_in_the_layer = replace(rope_in_the_layer, capabilities=rope_in_the_layer.capabilities - {"rope"})
    assert target_diagnosis(rope_in_the_layer).startswith(FINDINGS["INTERLEAVED_ROPE"])


@pytest.mark.parametrize("name", ["impl", "torch", f"{BROKEN}:FLOAT32_LAYER", f"{BROKEN}:TRANSPOSED"])
def test_the_diagnosis_names_nothing_for_a_conforming_target_a_plain_bug_or_another_shape(name):
    assert target_diagnosis(load(name)) is None


def test_a_target_that_computes_float64_inputs_in_float32_is_told_so():
    diagnosis = target_diagnosis(load(f"{BROKEN}:FLOAT32_INSIDE"))
    assert diagnosis is not None and diagnosis.startswith("precision: float64 inputs are computed in float32")
    assert "drop the capability 'float64'" in diagnosis and "convention" not in diagnosis, diagnosis


def test_a_window_ignored_is_never_diagnosed_as_a_window_of_w_plus_1():
    assert "W+1" not in target_diagnosis(load(f"{BROKEN}:WINDOW_IGNORED"))


def test_over_two_keys_a_window_ignored_and_a_window_of_w_plus_1_are_not_told_apart():
    # The user's case: Tq=1, Tk=2, W=1; ignoring the window sees both keys, as a window of 2 does.
    q, k, v = qkv(2, 2, 1, 2)
    golden = attention_oracle(q, k, v, window=1)[0]
    ignored = attention_oracle(q, k, v)[0]
    said = convention_mismatch(ignored, golden, q, k, v, window=1)
    assert said.startswith("no convention named: this case cannot tell apart"), said
    assert "W+1" in said and "window ignored" in said and "convention mismatch" not in said


@pytest.mark.parametrize("follows, named", [(None, WINDOW_IGNORED), (4, "a window of W+1"), (2, "W-1")])
def test_a_window_convention_is_named_where_the_case_tells_them_apart(follows, named):
    q, k, v = qkv(2, 2, 8, 8)
    golden = attention_oracle(q, k, v, window=3)[0]
    said = convention_mismatch(attention_oracle(q, k, v, window=follows)[0], golden, q, k, v, window=3)
    assert named in said and "cannot tell apart" not in said, said


def test_no_convention_is_named_for_an_output_of_another_shape():
    # (B, T, H, d) instead of (B, H, T, d): compared by broadcasting, it would match the candidate.
    golden = torch.zeros(1, 2, 1, 3, dtype=torch.float64)
    expected = torch.ones(1, 2, 1, 3, dtype=torch.float64)
    out = expected.transpose(1, 2)
    assert explained_by(out, golden, [Candidate("tile-style GQA", lambda: expected)]) == []
    q, k, v = qkv(4, 2, 3, 3)
    golden = attention_oracle(q, k, v)[0]
    tiled = attention_oracle(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1))[0]
    assert convention_mismatch(tiled, golden, q, k, v).startswith(
        "convention mismatch: the target follows tile"
    )
    assert convention_mismatch(tiled.transpose(1, 2), golden, q, k, v) is None


def test_an_output_that_matches_the_oracle_needs_no_explanation():
    golden = torch.linspace(-1, 1, 7, dtype=torch.float64)
    assert explanation(golden.clone(), golden, [Candidate("anything", lambda: golden + 1e-9)]) is None


def own_alibi(slopes: list[float]):
    table = torch.tensor(slopes, dtype=torch.float64)

    def bias(score, b, h, q_idx, kv_idx):  # a user's own mod, not attnspec's
        return score + table.to(score.dtype)[h] * (kv_idx - q_idx).to(score.dtype)

    return bias


@pytest.mark.parametrize(
    "slopes, says",
    [
        ([2 ** (-8 * (h + 1) / 12) for h in range(12)], "the power-of-two formula's"),
        ([2 ** (-8 * (h + 1) / 16) for h in range(12)], "those of 16 heads"),
        ([-s for s in alibi_slopes(12)], "their sign is flipped"),
        (alibi_slopes(12)[::-1], "in another head order"),
        ([s / 8 for s in alibi_slopes(12)], "ALiBi's times 0.125"),
    ],
)
def test_a_declared_mod_of_the_users_own_with_other_slopes_than_alibis_is_noted(slopes, says):
    target = replace(load("torch"), score_mod=own_alibi(slopes), heads=(12,))
    note = declared_mod_note(target)
    assert note is not None and says in note and "trusted as the specification" in note, note


def test_alibis_own_slopes_or_attnspecs_mod_get_no_note():
    assert (
        declared_mod_note(replace(load("torch"), score_mod=own_alibi(alibi_slopes(12)), heads=(12,))) is None
    )
    assert declared_mod_note(replace(load("torch"), score_mod=alibi(alibi_slopes(12)), heads=(12,))) is None


@pytest.mark.parametrize("broken", CAUSES)
def test_the_diagnosis_names_the_fault_no_single_output_of_attention_shows(broken):
    diagnosis = target_diagnosis(load(f"tests.fixtures.structural_targets:{broken}")) or ""
    assert f"({CAUSES[broken]}" in diagnosis, f"{broken}: {diagnosis!r}"


def test_a_failing_call_replayed_is_explained_by_what_its_output_follows():
    q, k, v = qkv(4, 2, 6, 6)
    tiled = load(f"{BROKEN}:TILED_GQA")
    assert case_finding(tiled, q, k, v, {"causal": True}).startswith(FINDINGS["TILED_GQA"])
    assert case_finding(load("torch"), q, k, v, {"causal": True}) is None


def test_a_failures_block_says_its_cause_unless_the_diagnosis_above_already_does():
    failure = Failure("test_x", "call", ("ATTN-4",), "output vs the oracle", (), cause="behaves as if: F22")
    assert "  cause   behaves as if: F22" in failure.block("ATTN-4", "...", "attnspec check t", None)
    assert not any(
        line.startswith("  cause")
        for line in failure.block("ATTN-4", "...", "c", None, said="behaves as if: F22")
    )
