"""Declared conventions (src/attnspec/protocol/declared.py): each translation turns a target that follows the
neighbour on purpose into one that follows attnspec's convention exactly, and only then; a declaration
that names nothing known, or contradicts a capability, is refused."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnspec.adapters import impl_target
from attnspec.kit.properties.test_attention_layer import LayerCase, oracle_keywords
from attnspec.protocol import declared
from attnspec.protocol.targets import LayerSpec, Target
from attnspec.specs.mods import soft_cap
from attnspec.specs.oracle import attention_layer_oracle, attention_oracle, rope_oracle
from tests.fixtures import broken_targets, declared_targets
from tests.fixtures.kit_runs import assert_passes, run_properties


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


def test_partial_interleaved_rope_declared_is_the_half_split_rope_of_the_rotated_share():
    # GPT-J: pairs (x_2i, x_2i+1) within the first rotary_dim features, the rest untouched
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    positions, at = [0, 3, 7, 11, 40], torch.tensor([0, 3, 7, 11, 40])

    def gptj_rope(x, positions, base=10000.0):
        rotated = broken_targets.interleaved_rope(x[..., :4], positions, base)
        return torch.cat([rotated, x[..., 4:]], dim=-1)

    target = replace(broken_targets.INTERLEAVED_ROPE, rope=gptj_rope, rotary_pct=0.5)
    golden = rope_oracle(x, positions, rotary_dim=4)
    assert not torch.allclose(gptj_rope(x, at), golden)
    torch.testing.assert_close(declaring(target, "rope-interleaved").rope(x, at, 10000.0), golden)
    assert declared.half_split_order(8, 4) == [0, 2, 1, 3, 4, 5, 6, 7]


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
    assert declaration_problems(set(declared.DECLARABLE) - {"top-left"}, {"blind", "gqa", "float16"}) == []
    assert "without the 'gqa' capability" in declaration_problems({"gqa-tile"})[0]
    assert "without the 'float16' capability" in declaration_problems({"weights-in-input-dtype"})[0]
    everything = lambda b, h, q_idx, kv_idx: q_idx >= 0  # noqa: E731
    clash = declaration_problems({"top-left"}, {"window", "non_causal"}, mask_mod=everything)
    assert "a mask_mod is the whole mask: non_causal, top-left, window" in clash[0], clash
    short = torch.zeros(2)  # a bias table shorter than the keys
    broken = declaration_problems(score_mod=lambda score, b, h, q_idx, kv_idx: score + short[kv_idx])
    assert "its score_mod <lambda> cannot be evaluated on an index grid: IndexError" in broken[0], broken


def module_problems(**declaring) -> list[str]:
    """declared.problems of a module target (impl's model, no layer of its own) declaring more."""
    module = replace(
        impl_target.TARGET,
        attention=None,
        layer=None,
        rope=None,
        layer_runs=None,
        capabilities=frozenset({"module", "padding", "chunks", "hidden_states"}),
    )
    return declared.problems(replace(module, **declaring))


@pytest.mark.parametrize(
    "declaring, says",
    [
        ({"conventions": frozenset({"window-inclusive"})}, "conventions of an attention function's call"),
        ({"needs_contiguous": True}, "needs_contiguous is an attention function's"),
        ({"heads": (2,), "rotary_pct": 0.5}, "it declares heads, rotary_pct, which only its layers use"),
        ({"score_mod": soft_cap(5.0)}, "it declares score_mod, which only its layers use"),
        ({"max_batch": 1}, "'padding' with max_batch = 1"),
    ],
    ids=["window-inclusive", "needs_contiguous", "heads", "score_mod", "max_batch"],
)
def test_a_module_refuses_in_one_line_each_declaration_it_cannot_use(declaring, says):
    assert module_problems() == []
    found = module_problems(**declaring)
    assert len(found) == 1 and says in found[0], found


@pytest.mark.parametrize("tq, tk, heads", [(5, 5, (4, 2)), (2, 6, (6, 2)), (3, 3, (6, 3))])
def test_tile_gqa_declared_is_interleaved_gqa(tq, tk, heads):
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(1, heads[0], tq, 4, generator=generator, dtype=torch.float64)
    k, v = (torch.randn(1, heads[1], tk, 4, generator=generator, dtype=torch.float64) for _ in range(2))
    sinks = torch.randn(heads[0], generator=generator, dtype=torch.float64)
    golden, _ = attention_oracle(q, k, v, sinks=sinks)
    tiled = replace(broken_targets.TARGET, attention=broken_targets.tiled_gqa)
    assert not torch.allclose(tiled.attention(q, k, v, sinks=sinks), golden)  # the neighbour, as it is
    torch.testing.assert_close(declaring(tiled, "gqa-tile").attention(q, k, v, sinks=sinks), golden)


def test_a_tile_declarations_mods_see_the_targets_own_heads():
    # the target's head h' of 4 (2 KV heads) is the kit's declared.tile_order(4, 2)[h']: a per-head mod
    # declared in the target's numbering reaches the kit's head through kit_mods
    table = torch.tensor([10.0, 20.0, 30.0, 40.0])
    target = declaring(
        replace(broken_targets.TILED_GQA, score_mod=lambda s, b, h, q, kv: s + table[h]), "gqa-tile"
    )
    score_mod, _ = declared.kit_mods(target, 4, 2)
    for kit_head, own in enumerate(declared.target_heads(4, 2)):
        got = score_mod(torch.zeros(()), 0, torch.tensor(kit_head), 0, 0)
        assert got.item() == table[own].item()
    assert declared.tile_order(4, 2) == [0, 2, 1, 3] == declared.target_heads(4, 2)


@pytest.mark.parametrize("name", ["INCLUSIVE_WINDOW", "TOP_LEFT", "INTERLEAVED_ROPE", "TILED_GQA"])
def test_a_neighbour_that_declares_its_convention_passes_the_whole_kit(name):
    assert getattr(declared_targets, name).conventions
    done = run_properties(f"tests.fixtures.declared_targets:{name}")
    assert_passes(done)


@pytest.mark.parametrize("name", ["encoder_attention", "chunked_attention"])
def test_a_target_that_declares_its_mask_passes_the_whole_kit(name):
    done = run_properties(f"tests.fixtures.declared_targets:{name}", as_user=True)
    assert_passes(done)


@pytest.mark.parametrize(
    "name, says",
    [
        ("encoder_attention_causal", "mask_mod ignored"),
        ("chunk_edge_one_key_late", "output vs the oracle"),
    ],
)
def test_a_target_that_breaks_its_declared_mask_fails(name, says):
    target = f"tests.fixtures.declared_targets:{name}"
    done = run_properties(
        target, "-k", "matches_the_oracle or masked_weights", profile="mutation", as_user=True
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert says in done.stdout, done.stdout[-3000:]


HALF_PRECISION = "half_precision_is_the_float32_result_rounded_once or lengths_around_the_block_sizes"


def test_a_kernel_that_rounds_its_weights_like_flash_attention_passes_when_it_declares_it():
    """fp16/bf16 weights rounded before the product with V (FlashAttention's precision): within the bound
    that "weights-in-input-dtype" widens by one rounding of each weight."""
    done = run_properties("tests.fixtures.declared_targets:weights_rounded", "-k", HALF_PRECISION)
    assert_passes(done)


def test_undeclared_its_half_precision_failure_says_what_to_declare():
    done = run_properties(
        "tests.fixtures.declared_targets:weights_rounded_undeclared", "-k", HALF_PRECISION, profile="mutation"
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "declare it: conventions = {'weights-in-input-dtype'}" in done.stdout, done.stdout[-3000:]
