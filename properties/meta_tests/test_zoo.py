"""The zoo (examples/zoo/): correct targets written in other styles pass the whole kit, each in a
subprocess as a user runs it (under the ci profile in CI: kit_runs.kit_profile); a declared
convention is what makes the complex-RoPE layer pass, and without it the run fails and names the
convention it follows.  The targets that declare what their attention computes (a score_mod, a
mask_mod, packed documents, tile-style GQA) each have a broken twin with a bug their users ship, which
the properties that must catch it fail, saying what they saw."""

from __future__ import annotations

import pytest
import torch

from attnspec.properties.meta_tests.kit_runs import (
    DEEP_PROFILES,
    assert_passes,
    kit_profile,
    run_properties,
)
from attnspec.properties.meta_tests.test_conformance import failure_reports

KERNELS = (  # attention functions (the peers' recipes grade them too: peers.py)
    "examples.zoo.triton_style:attention",
    "examples.zoo.host_numpy:attention",
    "examples.zoo.prescaled_dense:attention",
    "examples.zoo.complex_rope_llama:attention",
)
MODULES = (  # the first two with a white box
    "examples.zoo.torch_multihead:ATTENTION",
    "examples.zoo.gpt2_style:MODEL",
    "examples.zoo.neox_style:ATTENTION",
    "examples.zoo.vit_encoder:ENCODER",  # bidirectional: declares its mask_mod
)
# Attention functions checked under a declaration of what they compute (properties/declared.py); not in
# KERNELS, since the peers' recipes know neither mods nor documents.
FLEX = "examples.zoo.flex_softcap_documents:attention"
DECLARING = (
    "examples.zoo.varlen_packed:attention",
    "examples.zoo.alibi_bloom:attention",
    "examples.zoo.tiled_gqa_attend:attention",
)
CROSS = (  # cross-attention layers, checked by their white box alone
    "examples.zoo.cross_attention:WHISPER",
    "examples.zoo.cross_attention:TORCH_MHA",
)
ZOO = KERNELS + MODULES + DECLARING + CROSS

# They read values out of tensors (.tolist(), .numpy()) or refuse the meta device (FlexAttention): the
# device property needs a real second device.
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
    "examples.zoo.tiled_gqa_attend:interleaved_groups": {  # declared gqa-tile, grouped h // r
        "test_matches_the_oracle": (
            "the target follows interleaved GQA (query head h reads KV head h // r), though the target "
            "declares gqa-tile",
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
    expected = TWINS[twin]
    done = run_properties(twin, "-k", " or ".join(expected), profile="mutation", as_user=True)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    reports = failure_reports(done.stdout)
    for test, says in expected.items():
        failed = {name: report for name, report in reports.items() if name.partition("[")[0] == test}
        assert failed, f"{test} did not fail {twin}: {list(reports)}"
        for name, report in failed.items():
            for words in says:
                assert words in report, f"{name} does not say {words!r} for {twin}:\n{report[-3000:]}"


def test_the_complex_rope_layer_without_its_declaration_fails_naming_interleaved_pairs():
    done = run_properties(
        "examples.zoo.complex_rope_llama:UNDECLARED", "-k", "rope or layer", profile="mutation", as_user=True
    )
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "interleaved RoPE pairs" in done.stdout, done.stdout[-4000:]
