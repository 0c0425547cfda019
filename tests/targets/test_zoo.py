"""The zoo (examples/zoo/): correct targets written in other styles pass the whole kit, each in a
subprocess as a user runs it (under the ci profile in CI: kit_runs.kit_profile); a declared
convention is what makes the complex-RoPE layer pass, and without it the run fails and names the
convention it follows.  The targets that declare what their attention computes (a score_mod, a
mask_mod, packed documents, tile-style GQA) each have a broken twin with a bug their users ship, which
the properties that must catch it fail, saying what they saw."""

from __future__ import annotations

import pytest
import torch

from attnspec.kit.diagnosis import target_diagnosis
from attnspec.kit.loading import load
from attnspec.protocol.targets import ENV
from examples.zoo import CROSS, DECLARING, FLEX, KERNELS, MODULES, ZOO  # noqa: F401
from tests.fixtures.kit_runs import (
    DEEP_PROFILES,
    assert_each_fails_saying,
    assert_passes,
    kit_profile,
    run_properties,
)

CANNOT_RUN_ON_META = (*ZOO[:2], FLEX, "examples.zoo.varlen_packed:attention")
META_SKIPPED = "--   device        cannot run on the meta device"


@pytest.mark.parametrize("target", ZOO)
def test_each_correct_target_of_the_zoo_passes_the_whole_kit(target):
    # (BLOOM's ALiBi adds slope * j, the declared slope * (j - i) shifted by a row's constant, which
    # float32 rounds at ~slope * i: the conditioning term allows for a row shift of a mod's bias)
    done = run_properties(target, as_user=True)
    assert_passes(done)
    if target in CANNOT_RUN_ON_META and not torch.cuda.is_available():  # skipped with its reason, counted
        assert META_SKIPPED in done.stdout, done.stdout[-3000:]


# Eager FlexAttention costs 5-300 ms a call (its mods evaluated under vmap, the block mask built on every
# call): its whole kit takes 400 s under ci, and even a selection of it under quick (the oracle, prefix,
# document and device properties, 12 s) and its twin (6 s) were a tenth of a day-to-day run's time on 2
# cores.  So its target and its twin run under the deep profiles only (ci, thorough: CI runs ci), and a
# day-to-day run skips them, saying so.
deep_only = pytest.mark.skipif(
    kit_profile() not in DEEP_PROFILES,
    reason="eager FlexAttention is slow: its zoo target and twin run under the ci and thorough profiles",
)


@deep_only
def test_the_flex_attention_target_passes_the_kit():
    """The soft-capped document attention on FlexAttention passes the whole kit."""
    done = run_properties(FLEX, as_user=True)
    assert_passes(done)
    if not torch.cuda.is_available():
        assert META_SKIPPED in done.stdout, done.stdout[-3000:]


# Each broken twin: the properties that must fail it, and what each of their failures says.
TWINS = {
    "examples.zoo.flex_softcap_documents:cap_after_mask": {  # hidden keys keep the logit -cap
        "test_future_positions_do_not_change_the_prefix": ("outputs at positions <=", "after changing"),
    },
    "examples.zoo.varlen_packed:off_by_one": {  # a document starts on the previous one's last token
        "test_each_packed_document_is_attended_as_if_alone": ("rows of document", "vs that document alone"),
    },
    "examples.zoo.alibi_bloom:flipped_sign": {  # slope * (q - kv): distant keys rewarded
        "test_matches_the_oracle": ("output vs the oracle", "checked under its declaration: score_mod alibi"),
    },
    "examples.zoo.torch_multihead:NORMED_IN_FLOAT32": {  # a float32 norm in a module declaring float64
        "test_a_float64_module_sees_changes_below_float32s_resolution": (
            "the module declares float64 yet gives the same output",
        ),
    },
    "examples.zoo.neox_style:KWARGS_SWALLOW_THE_CACHE": {  # the cache under a name forward does not take
        "test_decoding_in_chunks_equals_the_full_pass": ("the cache was never read", "**kwargs"),
    },
    "examples.zoo.vit_encoder:CAUSAL_LEFT_ON": {  # a decoder's is_causal=True in an encoder
        "test_every_output_depends_on_every_token_of_an_encoder": ("a causal mask left on?",),
    },
    "examples.zoo.vit_encoder:PADS_ATTENDED": {  # the padding bias built, never added
        "test_a_padded_batch_gives_each_sequence_its_own_outputs": ("vs alone", "differ"),
    },
    "examples.zoo.cross_attention:CAUSAL_ON_CONTEXT": {  # a decoder's causal mask on the encoder's tokens
        "test_cross_attention_layer_matches_the_oracle": ("cross layer vs oracle",),
        "test_queries_do_not_see_each_other_and_the_context_has_no_order": (
            "outputs with the context tokens in the order",
        ),
    },
    "examples.zoo.cross_attention:CAUSAL_NO_KEY": {  # that mask bottom-right: the first queries see nothing
        "test_cross_attention_layer_matches_the_oracle": ("max |out - golden| = nan",),
    },
    "examples.zoo.cross_attention:KEYS_FROM_X": {  # a self-attention path left in: crashes on a wider context
        "test_cross_attention_layer_matches_the_oracle": ("cross layer vs oracle",),
    },
    "examples.zoo.logsumexp_exact:lse_before_the_mask": {  # hidden keys counted in every row's lse
        "test_every_output_lies_between_the_least_and_largest_value_it_may_see": (
            "outputs outside the range of the values their queries may see",
            "the visible values times 1 - p_sink span",
        ),
        "test_values_constant_over_the_keys_come_out_scaled_by_one_minus_the_sink": (
            "output for values constant over the keys",
            "times the value",
        ),
    },
    "examples.zoo.tiled_gqa_attend:interleaved_groups": {  # declared gqa-tile, grouped h // r
        "test_matches_the_oracle": (
            "the target follows interleaved GQA (query head h reads KV head h // r), though the target "
            "declares gqa-tile",
        ),
    },
    # OLMo 2's q/k norm moved after the head split: each head normalised alone.  Only the white box sees
    # it (the block stays causal)
    "examples.zoo.olmo2_style:QK_NORM_PER_HEAD": {
        "test_layer_matches_the_oracle_layer": (
            "QK_NORM_PER_HEAD layer vs oracle layer",
            "the q/k norm normalises each head alone, though the layer reports it over the whole width",
        ),
    },
    # GPT-J's quarter rotated in GPT-NeoX's half-split pairs, under its rope-interleaved declaration
    "examples.zoo.gptj_style:HALF_SPLIT_PAIRS": {
        "test_layer_matches_the_oracle_layer": (
            "half-split RoPE pairs (x_i, x_i+d/2), though the target declares rope-interleaved",
            "checked under its declaration: conventions rope-interleaved",
        ),
    },
    "examples.zoo.llama4_style:CHUNKS_OFF_BY_ONE": {  # chunks cut at positions counted from 1
        "test_each_output_depends_on_exactly_its_declared_inputs": (
            "through layers of kinds (chunk 4) layer 0's outputs",
        ),
        "test_layer_matches_the_oracle_layer": ("layer vs oracle layer", "kind=LayerKind(mask='chunk'"),
    },
    "examples.zoo.llama4_style:ROPE_ON_NOPE_LAYERS": {  # the NoPE layer rotates q and k too
        "test_layer_matches_the_oracle_layer": (
            "layer vs oracle layer",
            "mask='causal', size=None, rope=False",
        ),
    },
    # the one KV head repeated over the folded batch*heads axis with repeat, not repeat_interleave
    "examples.zoo.falcon_multiquery:KV_REPEATED": {
        "test_each_sequence_alone_gives_its_rows_of_the_batch": ("alone vs its rows of the batch", "differ"),
        "test_layer_matches_the_oracle_layer": ("KV_REPEATED layer vs oracle layer",),
    },
    # T5's distance taken as query - key: each key gets the bias learned for its mirror image
    "examples.zoo.t5_relative_bias:FLIPPED_BUCKETS": {
        "test_layer_matches_the_oracle_layer": ("FLIPPED_BUCKETS layer vs oracle layer",),
        "test_a_layers_declared_score_mod_is_applied_where_it_bends_the_logits": (
            "the output follows neither the oracle with the score_mod nor the one without it",
            "t5_bias(16 buckets up to 32)",
        ),
    },
    # T5 through SDPA: the dot products scaled by 1/sqrt(d) before the bias (T5 does not scale)
    "examples.zoo.t5_relative_bias:SCALED_BEFORE_THE_BIAS": {
        "test_layer_matches_the_oracle_layer": (
            "SCALED_BEFORE_THE_BIAS layer vs oracle layer",
            "the attention is scaled by 1/sqrt(d), though the layer reports its scale 1",
        ),
    },
    "examples.zoo.alibi_falcon:declared_as_bloom": {  # Falcon's ALiBi declared as BLOOM's: 4 times steeper
        "test_matches_the_oracle": (
            "output vs the oracle",
            "checked under its declaration: score_mod bloom_alibi",
        ),
    },
    "examples.zoo.modernbert_style:LOCAL_ON_WRONG_LAYERS": {  # global layers counted from 1
        "test_each_output_depends_on_exactly_its_declared_inputs": (
            "through layers of kinds (bidirectional, RoPE base 160000) layer 0's outputs",
        ),
        "test_layer_matches_the_oracle_layer": (
            "layer vs oracle layer",
            "kind=LayerKind(mask='bidirectional'",
        ),
    },
}


@pytest.mark.parametrize(
    "twin",
    [
        pytest.param(twin, marks=[deep_only] if twin.startswith(FLEX.partition(":")[0]) else [])
        for twin in TWINS
    ],
)
def test_each_broken_twin_fails_saying_what_it_does(twin):
    """The properties that must catch the twin's bug fail it, under the derandomized mutation profile
    (the same examples every run, none shrunk), each saying what it saw; the twin is checked under the
    same declaration as its correct target."""
    assert_each_fails_saying(twin, TWINS[twin])


def test_the_complex_rope_layer_without_its_declaration_fails_naming_interleaved_pairs():
    done = run_properties(
        "examples.zoo.complex_rope_llama:UNDECLARED", "-k", "rope or layer", profile="mutation", as_user=True
    )
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "interleaved RoPE pairs" in done.stdout, done.stdout[-4000:]


# Each broken twin of the zoo (TWINS) and the words of the cause the run's
# diagnosis names for it: the fault it behaves as if it had, or where no catalogue fault is the cause,
# what it does.
CAUSES = {
    "examples.zoo.flex_softcap_documents:cap_after_mask": "(soft-cap) is applied after the mask",
    "examples.zoo.varlen_packed:off_by_one": "each document starts one token early",
    "examples.zoo.alibi_bloom:flipped_sign": "ALiBi's sign flipped",
    "examples.zoo.torch_multihead:NORMED_IN_FLOAT32": "the float64 module computes in float32",
    "examples.zoo.neox_style:KWARGS_SWALLOW_THE_CACHE": "the cache was never read",
    "examples.zoo.vit_encoder:CAUSAL_LEFT_ON": "a causal mask is left on an encoder",
    "examples.zoo.vit_encoder:PADS_ATTENDED": "the padding mask is ignored",
    "examples.zoo.cross_attention:CAUSAL_ON_CONTEXT": "a causal mask is applied to the context",
    "examples.zoo.cross_attention:CAUSAL_NO_KEY": "they see no context token",
    "examples.zoo.cross_attention:KEYS_FROM_X": "keys and values are projected from the layer's own input x",
    "examples.zoo.logsumexp_exact:lse_before_the_mask": "applied to the weights after the softmax",
    "examples.zoo.tiled_gqa_attend:interleaved_groups": "the target follows interleaved GQA",
    "examples.zoo.olmo2_style:QK_NORM_PER_HEAD": "the q/k norm normalises each head alone",
    "examples.zoo.gptj_style:HALF_SPLIT_PAIRS": "half-split RoPE pairs",
    "examples.zoo.llama4_style:CHUNKS_OFF_BY_ONE": "the mask's positions are counted from 1",
    "examples.zoo.llama4_style:ROPE_ON_NOPE_LAYERS": "RoPE is applied on a layer that has none",
    "examples.zoo.modernbert_style:LOCAL_ON_WRONG_LAYERS": "layer 0 runs as local 2, declared bidirectional",
    "examples.zoo.falcon_multiquery:KV_REPEATED": "sequences of a batch see each other",
    "examples.zoo.t5_relative_bias:FLIPPED_BUCKETS": "relative buckets mirrored",
    "examples.zoo.t5_relative_bias:SCALED_BEFORE_THE_BIAS": "the attention is scaled by 1/sqrt(d)",
    "examples.zoo.alibi_falcon:declared_as_bloom": "applied before the 1/sqrt(d) scale (F22)",
}


def diagnosed(name: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    monkeypatch.setenv(ENV, name)  # the run's target, as --impl sets it
    return target_diagnosis(load(name))


@pytest.mark.parametrize("twin", CAUSES)
def test_the_diagnosis_names_the_cause_of_each_broken_twin_of_the_zoo(twin, monkeypatch):
    said = diagnosed(twin, monkeypatch)
    assert said is not None and CAUSES[twin] in said, said


def test_every_broken_twin_of_the_zoo_has_its_cause_listed():
    assert set(TWINS) == set(CAUSES)


@pytest.mark.parametrize("target", ZOO)
def test_the_diagnosis_names_nothing_for_a_correct_target_of_the_zoo(target, monkeypatch):
    assert diagnosed(target, monkeypatch) is None


# What `attnspec check` prints for a failing seed, as the seeds sweep (seeds.py, `tox -e seeds`) reads it.
FAILING_CHECK = """\
F.                                                                       [100%]
1 failed, 1 passed, 447 deselected in 3.58s

KERN-4  Logits far beyond exp's range ...
  failed  test_kernels.py::test_logits_far_beyond_exps_range_match_the_oracle[torch.float32]: output with ...
  case    B=1, 1 query head over 1 KV head, Tq=15 queries over Tk=15 keys, head size 4, causal, float32
  rerun   python attnspec-failures/test_logits_far_beyond_exps_range_match_the_oracle_torch.float32.py

every failure in full: attnspec-failures/report.txt

capabilities of --impl examples.zoo.logsumexp_exact:attention: blind, decode, float16, float64, gqa, grad
FAIL: --impl examples.zoo.logsumexp_exact:attention breaks KERN-4 (1 failed, 1 passed, 0 skipped)
"""


def test_the_seeds_sweep_checks_every_correct_target_and_reads_a_failing_check():
    from campaigns import seeds

    assert sorted(seeds.TARGETS) == sorted({*ZOO, FLEX}), "the sweep's targets are the zoo's lists"
    verdict, failures = seeds.read_check(FAILING_CHECK)
    assert verdict.startswith("FAIL: --impl examples.zoo.logsumexp_exact:attention breaks KERN-4 ")
    assert failures == [
        ("KERN-4", FAILING_CHECK.splitlines()[4].removeprefix(seeds.FAILED)),
    ]
    assert seeds.seeds_of(FLEX, 20, every=False) == seeds.FEWER_SEEDS[FLEX] < 20  # eager FlexAttention
    assert all(seeds.seeds_of(target, 20, every=False) == 20 for target in ZOO)
    assert seeds.seeds_of(FLEX, 20, every=True) == 20
