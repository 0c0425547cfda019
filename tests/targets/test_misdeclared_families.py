"""The built-in family adapters misdeclared (misdeclared_families.py): each fails the properties that must
see the lie, saying what they saw.

Where the kit can name the cause it does: a declared score_mod the layer ignores, or one too steep (SCORE-1),
interleaved pairs undeclared, a partial rotary left out of the report, a q/k norm reported in the other
form, 1/sqrt(d) reported where the layer does not scale (the layer's diagnosis), a schedule that
misplaces or mis-sizes a kind of layer in a causal model (MOD-5, layer by layer, naming the kinds it
expected), a schedule that declares RoPE on layers without it or leaves a kind of layer out (MOD-13: the
model's own layers, each against its declared kind).  The rest fail LAYER-1, LAYER-3 or MOD-9 by their
numbers alone (raw gains for Gemma's 1 + weight, a chunk or local window off by one, a base, a norm of
another kind, a relative bias read at the mirror-image distance): the diagnosis has no candidate for them
yet, so those failures say only which comparison missed.  MPT built with another alibi_bias_max than 8
fails the same way: transformers' MptModel computes 8 whatever the config says.
"""

from __future__ import annotations

import pytest

from tests.fixtures.kit_runs import assert_each_fails_saying

pytest.importorskip("transformers")

PLANTED = "tests.fixtures.misdeclared_families:"
LAYER_1 = "test_layer_matches_the_oracle_layer"
LAYER_3 = "test_cross_attention_layer_matches_the_oracle"
MOD_5 = "test_each_output_depends_on_exactly_its_declared_inputs"
MOD_13 = "test_each_of_the_modules_own_layers_is_the_oracle_layer_of_its_kind"
SCORE_1 = "test_a_layers_declared_score_mod_is_applied_where_it_bends_the_logits"
MISSES = ("layer vs oracle layer",)
# each planted adapter: the properties that must fail it, and what each of their failures says
EXPECTED = {
    "FALCON_ALIBI_AS_BLOOM": {
        LAYER_1: (*MISSES, "checked under its declaration: score_mod alibi(4 heads)"),
        SCORE_1: ("the output follows neither the oracle with the score_mod nor the one without it",),
    },
    "MPT_BIAS_MAX_16": {LAYER_1: MISSES},
    "T5_SCALED": {LAYER_1: ("the logits are not scaled (scale 1), though the layer reports none",)},
    "T5_MIRRORED": {LAYER_1: MISSES},
    "T5_CROSS_SCALED": {LAYER_3: ("cross layer vs oracle",)},
    "WHISPER_UNSCALED": {LAYER_3: ("cross layer vs oracle",)},
    "GEMMA2_CAP_5_AS_50": {LAYER_1: (*MISSES, "checked under its declaration: score_mod soft_cap(50)")},
    "GEMMA3_SOFT_CAPPED": {
        "test_a_layers_declared_score_mod_is_applied_where_it_bends_the_logits": (
            "the target ignores its declared score_mod",
            "soft_cap(50)",
        ),
    },
    "GEMMA3_RAW_GAINS": {LAYER_1: MISSES},
    "OLMO2_PER_HEAD": {
        LAYER_1: ("the q/k norm normalises all heads together, though the layer reports it per head",)
    },
    "STABLELM_FULL_ROTARY": {LAYER_1: ("partial rotary: the target rotates only the first",)},
    "PHI_NORM_BIASES_DROPPED": {LAYER_1: MISSES},
    "GPTJ_UNDECLARED": {
        LAYER_1: (
            "the target follows interleaved RoPE pairs",
            "declare it: conventions = {'rope-interleaved'}",
        ),
    },
    "GPTJ_WHOLE_HEAD": {LAYER_1: (*MISSES, "checked under its declaration: conventions rope-interleaved")},
    "GPTJ_ANY_BASE": {
        LAYER_1: MISSES,
        "test_rope_matches_the_oracle_at_drawn_positions": ("RoPE at positions",),
    },
    "LLAMA4_CHUNK_5": {MOD_5: ("through layers of kinds (chunk 5) layer 0's outputs",)},
    "LLAMA4_NOPE_FIRST": {MOD_5: ("through layers of kinds (causal, no RoPE) layer 0's outputs",)},
    "LLAMA4_NO_QK_NORM": {LAYER_1: MISSES},
    "COHERE2_UNDECLARED": {LAYER_1: ("interleaved RoPE pairs (x_2i, x_2i+1)",)},
    "COHERE2_WINDOW_4": {MOD_5: ("through layers of kinds (window 4) layer 0's outputs",)},
    "COHERE2_SLIDING_WITHOUT_ROPE": {LAYER_1: MISSES},
    "COHERE2_RMS_NORM": {LAYER_1: MISSES},
    "MODERNBERT_LOCAL_3": {LAYER_1: (*MISSES, "kind=LayerKind(mask='local', size=3")},
    "MODERNBERT_BASES_SWAPPED": {LAYER_1: MISSES},
    "ROBERTA_POSITIONS_FROM_0": {
        "test_a_padded_batch_gives_each_sequence_its_own_outputs": ("vs alone", "differ"),
    },
    "ROBERTA_PRE_NORM": {LAYER_1: MISSES},
    "COHERE2_GLOBAL_WITH_ROPE": {MOD_13: ("the module's layer 3 (causal) vs the oracle layer of its kind",)},
    "MODERNBERT_WITHOUT_LOCAL_LAYERS": {
        MOD_13: ("the module's layer 1 (bidirectional, RoPE base 160000) vs the oracle layer of its kind",),
    },
}


@pytest.mark.parametrize("planted", EXPECTED)
def test_each_misdeclared_family_fails_saying_what_it_saw(planted):
    assert_each_fails_saying(PLANTED + planted, EXPECTED[planted])
