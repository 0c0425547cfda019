"""Cohere 2 (transformers' Cohere2ForCausalLM): sliding-window layers with RoPE, global layers without.

Cohere 2 lays its layers out three sliding-window layers to one global layer (the config's default
``layer_types``); a sliding layer rotates q and k, a global one has no positions at all, so the model's
schedule declares ``LayerKind("window", W)`` and ``LayerKind("causal", rope=False)``.  Its rotary pairs
the interleaved features (x_2i, x_2i+1) (``repeat_interleave`` of the angles and its own
``rotate_half``), which both targets declare (``conventions = {"rope-interleaved"}``).  Its decoder
layer runs attention and MLP in parallel from one LayerNorm without a bias, and its final logits are
multiplied by ``logit_scale``; its heads are hidden_size / heads wide (the config overwrites head_dim),
so the white box ties its width (``tied_width``).

The white box is Cohere2DecoderLayer with its MLP silenced: a sliding layer (with RoPE) where the spec
has a window, a global layer (without) where it has none, reporting RoPE as its config lays it out.  The
layer target takes any window; the model's white box takes its own (it does not declare "window"), so
that the kit asks it for exactly the kinds of its schedule: a window drawn on the global kind would ask
for a windowed layer without RoPE, which Cohere 2 does not have.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from transformers import Cohere2Config, Cohere2ForCausalLM
from transformers.models.cohere2 import modeling_cohere2

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use
from attnspec.protocol.layouts import projections
from attnspec.protocol.targets import LayerKind, LayerSpec, Target

INTERLEAVED = frozenset({"rope-interleaved"})


def config(spec: LayerSpec) -> Cohere2Config:
    """One layer: a sliding one (RoPE) where the spec has a window, else a global one (no positions).  A
    global layer's config keeps a sliding window (the shipped 4096), as every Cohere 2 config does: the
    layer type alone must keep it global and without RoPE."""
    sliding = spec.window is not None
    return Cohere2Config(
        **hf_eager.sizes(spec),
        **({"sliding_window": spec.window} if sliding else {}),
        layer_types=["sliding_attention" if sliding else "full_attention"],
    )


def parts(decoder, module, config: Cohere2Config) -> dict:
    """Llama's four projections, the bias-free LayerNorm both branches read, and RoPE on sliding layers
    only (the config's layer type, not the module's computed sliding_window)."""
    norm = decoder.input_layernorm
    return projections(module.q_proj, module.k_proj, module.v_proj, module.o_proj) | {
        "norm_weight": norm.weight,
        "norm": "layer",
        "eps": config.layer_norm_eps,
        "rope": config.layer_types[0] == "sliding_attention",
    }


def schedule(model_config: Cohere2Config) -> tuple[LayerKind, ...]:
    """Sliding layers with RoPE, global layers causal without it, as layer_types lays them out."""
    return tuple(
        LayerKind("window", model_config.sliding_window)
        if kind == "sliding_attention"
        else LayerKind("causal", rope=False)
        for kind in model_config.layer_types
    )


FAMILY = hf_models.Family(
    "Cohere2",
    Cohere2Config,
    Cohere2ForCausalLM,
    "transformers.models.cohere2.modeling_cohere2",
    # four layers: three sliding, one global (the shipped pattern); logit_scale its default 0.0625;
    # the embeddings tied to the head, as Cohere ships them
    {
        "num_hidden_layers": 4,
        "sliding_window": hf_models.WINDOW,
        "tie_word_embeddings": True,
        **hf_models.NO_SPECIAL_TOKENS,
    },
    None,  # the white box: LAYER, set below
    schedule=schedule,
    sizes=hf_models.REALISTIC,
)


def _layer() -> Target:
    target = hf_eager.eager_target(
        "hf-cohere2",
        SimpleNamespace(
            eager_attention_forward=modeling_cohere2.eager_attention_forward,
            config=config,
            decoder=modeling_cohere2.Cohere2DecoderLayer,
            rotary=modeling_cohere2.Cohere2RotaryEmbedding,
            apply_rotary_pos_emb=modeling_cohere2.apply_rotary_pos_emb,
            reported=parts,
            tied_width=True,
        ),
        {"window"},
    )
    return replace(target, conventions=INTERLEAVED)


def _model() -> Target:
    """The whole model, LAYER its white box (without the window: the model's schedule says which layers
    slide)."""
    white_box = __getattr__("LAYER")
    family = replace(FAMILY, layer=replace(white_box, capabilities=white_box.capabilities - {"window"}))
    return hf_models.model_target(family, "hf-cohere2-model")


__getattr__ = built_on_use(__name__, {"LAYER": _layer, "MODEL": _model})
