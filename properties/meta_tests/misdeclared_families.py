"""The built-in family adapters (properties/adapters/families/, hf_eager.py), each misdeclared the way a
port of the family gets it wrong: a position bias, a cap or a scale (Falcon's ALiBi declared as BLOOM's,
Gemma 2 capped at 5 declared at 50, T5's unscaled logits reported as scaled), what the white box reports
(a q/k norm in another form, a rotary share left out, a norm of another kind), the convention it follows,
a fixed base left undeclared, or its schedule of layers (a chunk, a window or a local window off by one,
the NoPE layer in the wrong place, RoPE declared on layers without it, a kind of layer left out, the bases
of two kinds swapped), and one finding in transformers' MPT.  The models themselves are correct; only the
declaration lies, and the kit must fail each one (test_misdeclared_families.py says how).

Each is built when first asked for (PEP 562), from the family's own target: a layer's report changed after
it is built (``reports``), or a declaration of the target replaced.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from types import SimpleNamespace

from attnspec.properties.targets import Layer, LayerKind, LayerSpec, Target
from attnspec.specs.mods import alibi, alibi_slopes, soft_cap


def family(name: str, which: str = "LAYER") -> Target:
    return getattr(importlib.import_module(f"attnspec.properties.adapters.families.{name}"), which)


def reports(target: Target, change) -> Target:
    """``target`` whose layer reports ``change(layer, spec)`` (the fields to replace) instead of the
    truth."""

    def layer(spec: LayerSpec) -> Layer:
        built = target.layer(spec)
        return replace(built, **change(built, spec))

    return replace(target, layer=layer)


# --- biases and scales --------------------------------------------------------------------------------


def _falcon_alibi_as_bloom() -> Target:
    """Falcon's ALiBi declared as BLOOM's (the issue's planted misdeclaration): ``alibi`` of BLOOM's slopes
    for the model's 4 heads, where Falcon divides the bias by sqrt(head_dim); the layer reports no bias of
    its own, so the declared one applies."""
    target = reports(family("falcon", "ALIBI_LAYER"), lambda built, spec: {"score_mod": None})
    return replace(target, heads=(4,), score_mod=alibi(alibi_slopes(4)))


def _mpt_bias_max_16() -> Target:
    """A finding, not a lie: MPT built with ``alibi_bias_max=16`` in its config and declared so; transformers'
    MptModel builds the bias with 8 whatever the config says."""
    mpt = importlib.import_module("attnspec.properties.adapters.families.mpt")
    return replace(family("mpt"), layer=lambda spec: mpt.mpt_layer(spec, alibi_bias_max=16))


def _t5_scaled() -> Target:
    """T5's layer reported with the usual 1/sqrt(d) scale (scale None), where T5 never scales its logits."""
    return reports(family("t5"), lambda built, spec: {"scale": None})


def _t5_mirrored() -> Target:
    """T5's bias reported at the bucket of q - kv, not kv - q: each key's bias read for its mirror image."""

    def mirrored(built: Layer, spec: LayerSpec) -> dict:
        mod = built.score_mod

        def t5_bias_mirrored(score, b, h, q_idx, kv_idx):
            return mod(score, b, h, kv_idx, q_idx)

        return {"score_mod": t5_bias_mirrored}

    return reports(family("t5"), mirrored)


def _t5_cross_scaled() -> Target:
    """T5's cross-attention reported with the scale 1/sqrt(d) (scale None): T5 does not scale."""
    return reports(family("t5", "CROSS"), lambda built, spec: {"scale": None})


def _whisper_unscaled() -> Target:
    """Whisper's cross-attention reported with the scale 1.0 its attention call passes (``scaling=1.0``),
    missing that the queries were scaled by head_dim ** -0.5 as they were projected."""
    return reports(family("whisper", "CROSS"), lambda built, spec: {"scale": 1.0})


def _gemma2_cap_5_as_50() -> Target:
    """Gemma 2's layer built with its logits soft-capped at 5 (``attn_logit_softcapping``) and declared
    with the shipped soft_cap(50): a cap of another size, which SCORE-1's large logits tell apart."""
    from attnspec.properties.adapters import hf_eager

    shipped = hf_eager.PARTS["hf-gemma2"]

    def config(spec: LayerSpec):
        built = shipped.config(spec)
        built.attn_logit_softcapping = 5.0
        return built

    family = SimpleNamespace(**{**vars(shipped), "config": config})  # softcap (declared) stays 50
    return hf_eager.eager_target("hf-gemma2-capped-at-5", family, {"window"})


# --- what a layer reports, its convention, its base ---------------------------------------------------


def _gemma3_soft_capped() -> Target:
    """Gemma 3 declared with Gemma 2's soft_cap(50), which Gemma 3's attention never applies."""
    return replace(family("gemma3", "MODEL"), score_mod=soft_cap(50.0))


def _gemma3_raw_gains() -> Target:
    """Gemma 3's q/k norm gains reported as their weights, not 1 + weight (Llama's RMSNorm read into
    Gemma's)."""
    return reports(
        family("gemma3"), lambda built, spec: {"q_norm": built.q_norm - 1.0, "k_norm": built.k_norm - 1.0}
    )


def _olmo2_per_head() -> Target:
    """OLMo 2's q/k norm, which normalises all heads together, reported as a norm of each head (its gain
    over H * d features cut into (H, d))."""

    def per_head(built: Layer, spec: LayerSpec) -> dict:
        q_norm, k_norm = (gain.view(-1, spec.head_dim) for gain in (built.q_norm, built.k_norm))
        return {"qk_norm_over": "head", "q_norm": q_norm, "k_norm": k_norm}

    return reports(family("olmo2"), per_head)


def _stablelm_full_rotary() -> Target:
    """StableLM's partial rotary (a quarter of each head) left out of the report: rotary_dim None."""
    return reports(family("stablelm"), lambda built, spec: {"rotary_dim": None})


def _phi_norm_biases_dropped() -> Target:
    """Phi's q/k LayerNorms reported without their biases."""
    return reports(family("phi"), lambda built, spec: {"q_norm_bias": None, "k_norm_bias": None})


def _gptj_undeclared() -> Target:
    """GPT-J without its rope-interleaved declaration: held to half-split pairs."""
    return replace(family("gptj"), conventions=frozenset())


def _gptj_whole_head() -> Target:
    """GPT-J's rotary_dim left out of the report: the whole head taken as rotated, in interleaved pairs."""
    return reports(family("gptj"), lambda built, spec: {"rotary_dim": None})


def _gptj_any_base() -> Target:
    """GPT-J without rope_base: the kit draws bases GPT-J's hard-coded 10000 ignores."""
    return replace(family("gptj"), rope_base=None)


# --- schedules of layers ------------------------------------------------------------------------------


NOPE = LayerKind("causal", rope=False)


def _llama4_chunk_5() -> Target:
    """Llama 4's chunks declared one position longer than the model cuts them."""
    return replace(family("llama4", "MODEL"), schedule=(LayerKind("chunk", 5),) * 3 + (NOPE,))


def _llama4_nope_first() -> Target:
    """The NoPE layer declared first (layer_idx % 4 == 0), where Llama 4 puts it last ((i + 1) % 4)."""
    return replace(family("llama4", "MODEL"), schedule=(NOPE,) + (LayerKind("chunk", 4),) * 3)


def _llama4_no_qk_norm() -> Target:
    """Llama 4's gainless q/k norm left out of the white box's report."""
    return reports(family("llama4", "MODEL"), lambda built, spec: {"q_norm": None, "k_norm": None})


def _cohere2_undeclared() -> Target:
    """Cohere 2 without its rope-interleaved declaration."""
    return replace(family("cohere2", "MODEL"), conventions=frozenset())


def _cohere2_window_4() -> Target:
    """Cohere 2's window declared one key wider than its layers' (3)."""
    return replace(family("cohere2", "MODEL"), schedule=(LayerKind("window", 4),) * 3 + (NOPE,))


def _cohere2_sliding_without_rope() -> Target:
    """Cohere 2's sliding layers declared without RoPE (its global layers have none; its sliding ones do)."""
    schedule = (LayerKind("window", 3, rope=False),) * 3 + (NOPE,)
    return replace(family("cohere2", "MODEL"), schedule=schedule)


def _cohere2_rms_norm() -> Target:
    """Cohere 2's LayerNorm (without bias) reported as an RMSNorm."""
    return reports(family("cohere2", "MODEL"), lambda built, spec: {"norm": "rms"})


def _modernbert_local_3() -> Target:
    """ModernBERT's local window declared as 3 tokens on either side; local_attention 4 gives 2."""
    target = family("modernbert", "MODEL")
    local = LayerKind("local", 3, base=10000.0)
    return replace(target, schedule=(target.schedule[0], local, local))


def _modernbert_bases_swapped() -> Target:
    """ModernBERT's RoPE bases swapped: 10000 declared on the global layer, 160000 on the local ones."""
    local = LayerKind("local", 2, base=160000.0)
    schedule = (LayerKind("bidirectional", base=10000.0), local, local)
    return replace(family("modernbert", "MODEL"), schedule=schedule)


def _roberta_positions_from_0() -> Target:
    """RoBERTa wrapped as BERT is (hf_models.MaskedLM): a padded batch's positions counted from 0, where
    RoBERTa alone counts them from padding_idx + 1."""
    from attnspec.properties.adapters.hf_models import MaskedLM

    target = family("roberta", "MODEL")
    return replace(target, module=MaskedLM(target.module.model))


def _roberta_pre_norm() -> Target:
    """RoBERTa's post-norm sublayer reported as a pre-norm one."""
    return reports(family("roberta", "MODEL"), lambda built, spec: {"norm_at": "pre"})


def _cohere2_global_with_rope() -> Target:
    """Cohere 2's global layers declared with RoPE (they have none): only the model's own layers, each
    against its declared kind (MOD-13), can tell."""
    schedule = (LayerKind("window", 3, rope=True),) * 3 + (LayerKind("causal"),)
    return replace(family("cohere2", "MODEL"), schedule=schedule)


def _modernbert_without_local_layers() -> Target:
    """ModernBERT declared global on every layer: its first layer is global, so its receptive field is the
    whole sequence either way, and its white box is asked only for the kinds declared; its own layers
    (MOD-13) show the local windows."""
    return replace(family("modernbert", "MODEL"), schedule=(LayerKind("bidirectional", base=160000.0),) * 3)


BUILT_ON_USE = {
    "FALCON_ALIBI_AS_BLOOM": _falcon_alibi_as_bloom,
    "MPT_BIAS_MAX_16": _mpt_bias_max_16,
    "T5_SCALED": _t5_scaled,
    "T5_MIRRORED": _t5_mirrored,
    "T5_CROSS_SCALED": _t5_cross_scaled,
    "WHISPER_UNSCALED": _whisper_unscaled,
    "GEMMA2_CAP_5_AS_50": _gemma2_cap_5_as_50,
    "GEMMA3_SOFT_CAPPED": _gemma3_soft_capped,
    "GEMMA3_RAW_GAINS": _gemma3_raw_gains,
    "OLMO2_PER_HEAD": _olmo2_per_head,
    "STABLELM_FULL_ROTARY": _stablelm_full_rotary,
    "PHI_NORM_BIASES_DROPPED": _phi_norm_biases_dropped,
    "GPTJ_UNDECLARED": _gptj_undeclared,
    "GPTJ_WHOLE_HEAD": _gptj_whole_head,
    "GPTJ_ANY_BASE": _gptj_any_base,
    "LLAMA4_CHUNK_5": _llama4_chunk_5,
    "LLAMA4_NOPE_FIRST": _llama4_nope_first,
    "LLAMA4_NO_QK_NORM": _llama4_no_qk_norm,
    "COHERE2_UNDECLARED": _cohere2_undeclared,
    "COHERE2_WINDOW_4": _cohere2_window_4,
    "COHERE2_SLIDING_WITHOUT_ROPE": _cohere2_sliding_without_rope,
    "COHERE2_RMS_NORM": _cohere2_rms_norm,
    "MODERNBERT_LOCAL_3": _modernbert_local_3,
    "MODERNBERT_BASES_SWAPPED": _modernbert_bases_swapped,
    "ROBERTA_POSITIONS_FROM_0": _roberta_positions_from_0,
    "ROBERTA_PRE_NORM": _roberta_pre_norm,
    "COHERE2_GLOBAL_WITH_ROPE": _cohere2_global_with_rope,
    "MODERNBERT_WITHOUT_LOCAL_LAYERS": _modernbert_without_local_layers,
}


def __getattr__(name: str) -> Target:
    if name not in BUILT_ON_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = BUILT_ON_USE[name]()
    return globals()[name]
