"""SmolLM3 (transformers' SmolLM3ForCausalLM): Llama's layer, with no RoPE on every fourth layer.

The model's schedule declares which layers have RoPE (its config's ``no_rope_layers``, made from
``no_rope_layer_interval``: four layers, the last without) and which slide: with SmolLM3's
``use_sliding_window`` on (off in the shipped checkpoints, on here so that the variant is checked), its
config makes exactly the layers without RoPE sliding-window layers (``layer_types``).  The white box is
SmolLM3's decoder layer built as either kind (``spec.kind.rope``), with a sliding window where the spec
asks for one.
"""

from __future__ import annotations

from types import SimpleNamespace

from transformers import SmolLM3Config, SmolLM3ForCausalLM
from transformers.models.smollm3 import modeling_smollm3

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use, with_white_box
from attnspec.protocol.targets import LayerKind, LayerSpec, Target


def config(spec: LayerSpec) -> SmolLM3Config:
    """One layer of the spec's kind: RoPE, or none, and a sliding window where the spec has one."""
    rope = spec.kind is None or spec.kind.rope is not False
    return SmolLM3Config(
        **hf_eager.sizes(spec),
        no_rope_layers=[int(rope)],
        use_sliding_window=spec.window is not None,
        sliding_window=spec.window,
        layer_types=["full_attention" if spec.window is None else "sliding_attention"],
    )


def schedule(model_config: SmolLM3Config) -> tuple[LayerKind, ...]:
    """Each layer with RoPE where ``no_rope_layers`` says 1, a sliding window where ``layer_types`` says
    so, else causal."""
    return tuple(
        LayerKind("window", model_config.sliding_window, rope=bool(rope))
        if kind == "sliding_attention"
        else LayerKind("causal", rope=bool(rope))
        for rope, kind in zip(model_config.no_rope_layers, model_config.layer_types, strict=True)
    )


FAMILY = hf_models.Family(
    "SmolLM3",
    SmolLM3Config,
    SmolLM3ForCausalLM,
    "transformers.models.smollm3.modeling_smollm3",
    # four layers, the last without RoPE and (use_sliding_window) a sliding window
    {
        "num_hidden_layers": 4,
        "use_sliding_window": True,
        "sliding_window": hf_models.WINDOW,
        **hf_models.NO_SPECIAL_TOKENS,
    },
    None,  # the white box: LAYER, set below
    schedule=schedule,
    sizes=hf_models.REALISTIC,
)


def _layer() -> Target:
    return hf_eager.eager_target(
        "hf-smollm3",
        SimpleNamespace(
            eager_attention_forward=modeling_smollm3.eager_attention_forward,
            config=config,
            decoder=modeling_smollm3.SmolLM3DecoderLayer,
            rotary=modeling_smollm3.SmolLM3RotaryEmbedding,
            apply_rotary_pos_emb=modeling_smollm3.apply_rotary_pos_emb,
        ),
        {"window"},
    )


# LAYER (the decoder layer) and MODEL (the whole model, LAYER its white box), built when first used
__getattr__ = built_on_use(
    __name__, {"LAYER": _layer, "MODEL": with_white_box(FAMILY, __name__, "hf-smollm3-model")}
)
