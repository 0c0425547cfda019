"""Gemma 3 (transformers' Gemma3ForCausalLM, the text model): Gemma 2's layer with q/k norm, its cap gone.

What the layer computes beside Llama's: each query and key head RMS-normalised over its features before
RoPE (``q_norm``, ``k_norm``, one gain (d,) shared by the heads), every RMSNorm multiplying by ``1 +
weight`` (the gain is 1 + weight), a sandwich norm on the attention's output before the residual, and the
scale ``query_pre_attn_scalar ** -0.5`` whatever the head size.  Sliding-window and full layers
alternate (the config's ``layer_types``), and the two kinds have RoPE bases of their own
(``rope_parameters``: local 10000, global 1e6): the model's schedule declares each layer's mask and
base, and its white box is Gemma 3's decoder layer built as the kind the kit asks for (``spec.kind``,
``spec.window``, ``spec.base``).

Gemma 3's attention never applies ``attn_logit_softcapping`` (its attention module passes no softcap to
the attention function, whatever the config says): neither target declares a score_mod.  Declaring
Gemma 2's ``soft_cap(50)`` on it is a misdeclaration that SCORE-1 fails ("the target ignores its
declared score_mod": tests/fixtures/misdeclared_families.py plants it).

What the white box cannot tell, the model's own layers do: the white box is built at the base the kit
asks for (``spec.base``), so a schedule whose bases were swapped would be checked at the swapped bases, and
a model that rotated its global layers at the local base too would pass the module properties, which see
no base.  MOD-13 holds each of the model's own layers, as its forward runs them, to the oracle layer of
the kind its schedule declares (the model's layer_runs): the campaign's mutants of
Gemma3TextModel.forward that hand a layer the other kind's cos and sin fail it.  The base of each kind is
read from the model's config here, not written down twice.
"""

from __future__ import annotations

from types import SimpleNamespace

from transformers import Gemma3ForCausalLM, Gemma3TextConfig
from transformers.models.gemma3 import modeling_gemma3

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use, with_white_box
from attnspec.protocol.targets import LayerKind, LayerSpec, Target

KINDS = {"window": "sliding_attention", "causal": "full_attention"}
# the base the white box gives the kind it is not built as, unlike any base the kit draws: a rotary
# embedding that read the other kind's parameters would rotate by it
OTHER_BASE = 3.0e5


def config(spec: LayerSpec) -> Gemma3TextConfig:
    """One decoder layer of the spec's kind: a sliding window where the spec has one, full attention
    otherwise, RoPE at ``spec.base`` for that kind (the other kind's base set apart)."""
    layer_type = KINDS["causal" if spec.window is None else "window"]
    other = next(kind for kind in KINDS.values() if kind != layer_type)
    rope = {
        layer_type: {"rope_type": "default", "rope_theta": spec.base},
        other: {"rope_type": "default", "rope_theta": OTHER_BASE},
    }
    return Gemma3TextConfig(
        **hf_eager.sizes(spec) | {"rope_parameters": rope, "pad_token_id": None},
        sliding_window=spec.window or 1,
        layer_types=[layer_type],
    )


def schedule(model_config: Gemma3TextConfig) -> tuple[LayerKind, ...]:
    """Each layer's kind as ``layer_types`` lays them out: a window of ``sliding_window`` or full causal
    attention, with the RoPE base ``rope_parameters`` gives that kind."""
    kinds = []
    for layer_type in model_config.layer_types:
        base = float(model_config.rope_parameters[layer_type]["rope_theta"])
        if layer_type == KINDS["window"]:
            kinds.append(LayerKind("window", model_config.sliding_window, base=base))
        else:
            kinds.append(LayerKind("causal", base=base))
    return tuple(kinds)


class Rotary(modeling_gemma3.Gemma3RotaryEmbedding):
    """Gemma 3's rotary embedding for the one kind of layer the white box is built as: its forward takes
    the layer type, which the decoder layer's caller (Gemma3TextModel) passes, the kit's plumbing not."""

    def forward(self, x, position_ids):  # type: ignore[override]
        return super().forward(x, position_ids, self.config.layer_types[0])


def reported(decoder, module, config: Gemma3TextConfig) -> dict:
    """Gemma 2's layer (gains 1 + weight, the sandwich norm, the config's scale), and the per-head
    q/k RMSNorms, gains 1 + weight too."""
    parts = hf_eager.gemma2_parts(decoder, module, config)
    return parts | {"q_norm": 1.0 + module.q_norm.weight, "k_norm": 1.0 + module.k_norm.weight}


FAMILY = hf_models.Family(
    "Gemma3",
    Gemma3TextConfig,
    Gemma3ForCausalLM,
    "transformers.models.gemma3.modeling_gemma3",
    # windowed and full layers alternating, from a windowed one (Gemma 3 ships five windowed layers to a
    # full one: its config's sliding_window_pattern 6), whatever the number of layers; each kind with its
    # own base (the config's defaults, local 10000 and global 1e6)
    {"sliding_window": hf_models.WINDOW, "sliding_window_pattern": 2, **hf_models.NO_SPECIAL_TOKENS},
    None,  # the white box: LAYER, set below
    schedule=schedule,
    sizes=hf_models.REALISTIC,
)


def _layer() -> Target:
    return hf_eager.eager_target(
        "hf-gemma3",
        SimpleNamespace(
            eager_attention_forward=modeling_gemma3.eager_attention_forward,
            config=config,
            decoder=modeling_gemma3.Gemma3DecoderLayer,
            rotary=Rotary,
            apply_rotary_pos_emb=modeling_gemma3.apply_rotary_pos_emb,
            reported=reported,
        ),
        {"window"},
    )


# LAYER (the decoder layer) and MODEL (the whole model, LAYER its white box), built when first used
__getattr__ = built_on_use(
    __name__, {"LAYER": _layer, "MODEL": with_white_box(FAMILY, __name__, "hf-gemma3-model")}
)
