"""Declared conventions (properties/declared.py): each translation turns a target that follows the
neighbour on purpose into one that follows attnspec's convention exactly, and only then; a declaration
that names nothing known, or contradicts a capability, is refused."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnspec.properties import declared
from attnspec.properties.meta_tests import broken_targets, declared_targets
from attnspec.properties.meta_tests.kit_runs import assert_passes, run_properties
from attnspec.properties.targets import LayerSpec, Target
from attnspec.properties.test_attention_layer import LayerCase, oracle_keywords
from attnspec.specs.oracle import attention_layer_oracle, attention_oracle, rope_oracle


def qkv(tq: int, tk: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, t, 4, generator=gen, dtype=torch.float64) for t in (tq, tk, tk))


def declaring(target: Target, *names: str) -> Target:
    return declared.translated(replace(target, conventions=frozenset(names)))


@pytest.mark.parametrize("window", [1, 2, 5])
def test_an_inclusive_window_declared_is_attnspecs_window(window):
    q, k, v = qkv(6, 6)
    inclusive = replace(broken_targets.TARGET, attention=broken_targets.inclusive_window)
    golden, _ = attention_oracle(q, k, v, window=window)
    undeclared = inclusive.attention(q, k, v, window=window)
    assert not torch.allclose(undeclared, golden)  # the neighbour, as it is
    translated = declaring(inclusive, "window-inclusive")
    torch.testing.assert_close(translated.attention(q, k, v, window=window), golden)


@pytest.mark.parametrize("tq, tk", [(2, 6), (1, 5), (4, 4)])
def test_top_left_declared_is_bottom_right(tq, tk):
    q, k, v = qkv(tq, tk, seed=1)
    top_left = replace(broken_targets.TARGET, attention=broken_targets.top_left)
    golden, _ = attention_oracle(q, k, v)
    torch.testing.assert_close(declaring(top_left, "top-left").attention(q, k, v), golden)
    if tq < tk:
        assert not torch.allclose(top_left.attention(q, k, v), golden)


def test_interleaved_rope_declared_is_the_half_split_rope():
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    positions = [0, 3, 7, 11, 40]
    target = replace(broken_targets.INTERLEAVED_ROPE, conventions=frozenset())
    at = torch.tensor(positions)
    assert not torch.allclose(target.rope(x, at, 10000.0), rope_oracle(x, positions))
    rope = declaring(target, "rope-interleaved").rope
    torch.testing.assert_close(rope(x, at, 10000.0), rope_oracle(x, positions))


def test_an_interleaved_layer_declared_reports_parameters_of_the_half_split_oracle():
    spec = LayerSpec(d_model=8, n_heads=2, n_kv_heads=1, head_dim=4, seed=3, dtype=torch.float64)
    layer = declaring(broken_targets.INTERLEAVED_ROPE, "rope-interleaved").layer(spec)
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    golden = attention_layer_oracle(x, **oracle_keywords(layer, LayerCase(spec, batch=1, seq=5, offset=0)))
    torch.testing.assert_close(layer.forward(x, 0), golden)


def declaration_problems(conventions=(), capabilities=(), **mods) -> list[str]:
    declaring = {"conventions": frozenset(conventions), "capabilities": frozenset(capabilities), **mods}
    return declared.problems(replace(broken_targets.TARGET, **declaring))


def test_unknown_or_contradictory_declarations_are_refused():
    assert "unknown convention 'alibi'" in declaration_problems({"alibi"})[0]
    assert "exclude each other" in declaration_problems({"top-left"}, {"blind"})[0]
    assert declaration_problems(set(declared.DECLARABLE) - {"top-left"}, {"blind", "gqa"}) == []
    assert "without the 'gqa' capability" in declaration_problems({"gqa-tile"})[0]
    everything = lambda b, h, q_idx, kv_idx: q_idx >= 0  # noqa: E731
    clash = declaration_problems({"top-left"}, {"window", "non_causal"}, mask_mod=everything)
    assert "a mask_mod is the whole mask: non_causal, top-left, window" in clash[0], clash
    short = torch.zeros(2)  # a bias table shorter than the keys
    broken = declaration_problems(score_mod=lambda score, b, h, q_idx, kv_idx: score + short[kv_idx])
    assert "its score_mod <lambda> cannot be evaluated on an index grid: IndexError" in broken[0], broken


@pytest.mark.parametrize("name", ["INCLUSIVE_WINDOW", "TOP_LEFT", "INTERLEAVED_ROPE"])
def test_a_neighbour_that_declares_its_convention_passes_the_whole_kit(name):
    assert getattr(declared_targets, name).conventions
    done = run_properties(f"attnspec.properties.meta_tests.declared_targets:{name}")
    assert_passes(done)
