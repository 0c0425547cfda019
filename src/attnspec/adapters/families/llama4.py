"""Llama 4's text model (transformers' Llama4ForCausalLM on a Llama4TextConfig): chunked RoPE layers,
full-attention NoPE layers, a weightless q/k norm, mixture-of-experts layers.

Three layers in four attend within chunks of ``attention_chunk_size`` positions counted from 0 and
rotate q and k; every fourth (``no_rope_layer_interval``; ``no_rope_layers[i] == 0``) attends to the
whole past without positions.  The model's schedule declares both: ``LayerKind("chunk", C)`` and
``LayerKind("causal", rope=False)``, with a chunk of 4 so that the properties' sequences cross chunks.
Its rotary multiplies the interleaved pairs (x_2i, x_2i+1) by complex numbers (``torch.polar``,
``view_as_complex``), which both targets declare (``conventions = {"rope-interleaved"}``).  On RoPE
layers ``use_qk_norm`` normalises each rotated q and k head by its root mean square (an RMSNorm without
a gain, with rms_norm_eps): RoPE keeps each pair's length, so normalising after it, as Llama 4 does, is
normalising before it, and the white box reports it as a q/k RMSNorm of gain ones.  Every other layer's
feed-forward is a mixture of experts; unlike GptOss's, it sends every token through every expert
(weighted by its router score, 0 where not routed), so one token's route never moves another token's
rounding and the model does not declare ``rows_round_together``.

Not expressed: ``attn_temperature_tuning``, which multiplies a NoPE layer's queries by
1 + attn_scale * log1p(floor((p + 1) / floor_scale)) at absolute position p: a scale of the query's own
position, which no score_mod of a layer (distances only) and no per-target score_mod (the RoPE layers
have none) can state.  It is switched off here; at the shipped floor_scale of 8192 it is exactly 1
below position 8191, beyond every sequence the kit draws, so the kit could not see it either way.

The white box is Llama4TextDecoderLayer (an MoE layer, experts and shared expert silenced) built as the
kind the kit asks for: chunked or causal, RoPE (with the q/k norm) or none.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import torch
from transformers import Llama4ForCausalLM, Llama4TextConfig
from transformers.models.llama4 import modeling_llama4

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use
from attnspec.protocol.targets import LayerKind, LayerSpec, Target

CHUNK = 4  # small: the properties' sequences (up to 16 tokens) cross several chunks
INTERLEAVED = frozenset({"rope-interleaved"})


def config(spec: LayerSpec) -> Llama4TextConfig:
    """One decoder layer of the spec's kind (causal and RoPE by default): chunked or not, RoPE or none;
    an MoE feed-forward of two experts, the q/k norm on, temperature tuning off.  A full layer's config
    keeps a chunk size, as the model's does: its layer type alone must keep it unchunked."""
    kind = spec.kind or LayerKind("causal")
    chunk = kind.size if kind.mask == "chunk" else None
    return Llama4TextConfig(
        **hf_eager.sizes(spec),
        attention_chunk_size=chunk or CHUNK,
        # 1: the layer rotates (Llama 4's name says the opposite)
        no_rope_layers=[int(kind.rope is not False)],
        layer_types=["chunked_attention" if chunk else "full_attention"],
        use_qk_norm=True,
        attn_temperature_tuning=False,
        num_local_experts=2,
        num_experts_per_tok=1,
        moe_layers=[0],
        intermediate_size_mlp=1,
    )


def parts(decoder, module, config: Llama4TextConfig) -> dict:
    """Llama's projections and input RMSNorm; RoPE where no_rope_layers says 1, and there the weightless
    q/k norm as an RMSNorm of gain ones with rms_norm_eps (the input norm's eps too)."""
    found = hf_eager.llama_parts(decoder, module, config)
    rope = bool(config.no_rope_layers[module.layer_idx])  # the config's entry for this layer
    found["rope"] = rope
    if config.use_qk_norm and rope:
        gain = torch.ones(config.head_dim, dtype=found["wq"].dtype, device=found["wq"].device)
        found |= {"q_norm": gain, "k_norm": gain}
    return found


def rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Llama 4's rotary: the angle table as complex numbers (Llama4TextRotaryEmbedding) and
    apply_rotary_emb, every leading axis of x as a batch of one head."""
    seq, head_dim = x.shape[-2:]
    rotary = modeling_llama4.Llama4TextRotaryEmbedding(config(LayerSpec(head_dim, 1, 1, head_dim, base=base)))
    table = rotary.to(x.device)(x, positions[None])  # (1, T, d/2), complex
    rows = x.reshape(-1, seq, 1, head_dim)  # (N, T, 1, d): apply_rotary_emb takes (B, T, H, d)
    return modeling_llama4.apply_rotary_emb(rows, rows, table)[0].reshape(x.shape)


def schedule(model_config: Llama4TextConfig) -> tuple[LayerKind, ...]:
    """Chunked or full attention as layer_types says, RoPE where no_rope_layers says 1."""
    return tuple(
        LayerKind(
            "chunk" if kind == "chunked_attention" else "causal",
            model_config.attention_chunk_size if kind == "chunked_attention" else None,
            rope=bool(rotates),
        )
        for kind, rotates in zip(model_config.layer_types, model_config.no_rope_layers, strict=True)
    )


FAMILY = hf_models.Family(
    "Llama4",
    Llama4TextConfig,
    Llama4ForCausalLM,
    "transformers.models.llama4.modeling_llama4",
    # four layers (three chunked RoPE layers, then a NoPE one: the shipped interval), an MoE layer every
    # other layer (Maverick's interleave step of 2) with four experts, one routed per token
    {
        "num_hidden_layers": 4,
        "attention_chunk_size": CHUNK,
        "interleave_moe_layer_step": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "intermediate_size_mlp": 128,
        "use_qk_norm": True,
        "attn_temperature_tuning": False,
        **hf_models.NO_SPECIAL_TOKENS,
    },
    None,  # the white box: LAYER, set below
    schedule=schedule,
    sizes=hf_models.REALISTIC,
)


def _layer() -> Target:
    target = hf_eager.eager_target(
        "hf-llama4",
        SimpleNamespace(
            eager_attention_forward=modeling_llama4.eager_attention_forward,
            config=config,
            decoder=modeling_llama4.Llama4TextDecoderLayer,
            rotary=modeling_llama4.Llama4TextRotaryEmbedding,
            apply_rotary_pos_emb=None,  # rope() below: Llama 4 rotates through complex numbers
            reported=parts,
            mlp_name="feed_forward",
        ),
        set(),
    )
    return replace(target, rope=rope, conventions=INTERLEAVED)


# What a campaign mutates of the modeling file: the text model's attention path, from the model's forward
# to the attention core (not its vision tower, which the text model never runs, nor its mixture of
# experts' router, which is no attention: a router's -inf fill turned to 0 survives every property, as
# no attention property can see it)
TEXT_ATTENTION = "transformers.models.llama4.modeling_llama4:" + ",".join(
    (
        "eager_attention_forward",
        "repeat_kv",
        "apply_rotary_emb",
        "Llama4TextRotaryEmbedding.forward",
        "Llama4TextWeightlessRMSNorm.forward",
        "Llama4TextRMSNorm.forward",
        "Llama4TextAttention.__init__",
        "Llama4TextAttention.forward",
        "Llama4TextDecoderLayer.__init__",
        "Llama4TextDecoderLayer.forward",
        "Llama4TextModel.forward",
        "Llama4ForCausalLM.forward",
    )
)


def _model() -> Target:
    family = replace(FAMILY, layer=__getattr__("LAYER"))
    target = hf_models.model_target(family, "hf-llama4-model")
    # a chunked layer's cache is a DynamicSlidingWindowLayer (the last C - 1 keys)
    sources = (TEXT_ATTENTION, *target.sources[1:], hf_models.SLIDING_CACHE)
    return replace(target, sources=sources)


# LAYER (the decoder layer) and MODEL (the whole model, LAYER its white box), built when first used
__getattr__ = built_on_use(__name__, {"LAYER": _layer, "MODEL": _model})
