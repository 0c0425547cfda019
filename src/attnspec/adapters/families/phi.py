"""Phi (transformers' PhiForCausalLM, Phi-1 and Phi-2's layer): parallel attention and MLP, half rotary.

The layer: a LayerNorm pre-norm (with bias) whose output feeds the attention and the MLP in parallel
(x + attn(ln(x)) + mlp(ln(x))), biases on every projection (q, k, v and the ``dense`` output), RoPE on
the first half of each head (``partial_rotary_factor`` 0.5, Phi-1.5's), and q and k normalised by one
LayerNorm each, with bias, shared by every head (``qk_layernorm``: ``nn.LayerNorm(d)`` over each head's
features, gains and biases (d,): the layer reports ``qk_norm="layer"`` with ``q_norm_bias`` and
``k_norm_bias``).  The MLP (fc1, gelu, fc2) is silenced by zeroing fc2's weight and bias.

The q/k LayerNorms are built over hidden_size / heads features whatever ``head_dim`` says, so the width is
the heads times their size: ``tied_width``; heads of 4, 8 or 16 features, whose half is whole pairs.  The
q/k norm's eps is the pre-norm's (``layer_norm_eps``).
"""

from __future__ import annotations

from types import SimpleNamespace

from transformers import PhiConfig, PhiForCausalLM
from transformers.models.phi import modeling_phi

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use, with_white_box
from attnspec.adapters.families.stablelm import partial
from attnspec.protocol.layouts import pre_norm, projections
from attnspec.protocol.targets import LayerSpec, Target

ROTARY_PCT = 0.5
DROPOUTS = {"resid_pdrop": 0.1, "embd_pdrop": 0.1}  # on in training: eval mode must switch them off


def config(spec: LayerSpec) -> PhiConfig:
    """One Phi layer of the spec's sizes (d = d_model / heads), its q/k LayerNorms on."""
    fields = hf_eager.sizes(spec) | DROPOUTS | {"qk_layernorm": True, "pad_token_id": None}
    fields.pop("head_dim")  # the q/k LayerNorms are built over hidden_size / heads features
    fields["rope_parameters"] = fields["rope_parameters"] | {"partial_rotary_factor": ROTARY_PCT}
    return PhiConfig(**fields)


def reported(decoder, module, config: PhiConfig) -> dict:
    """q, k, v and dense with their biases, the input LayerNorm, the q/k LayerNorms shared by the heads
    (gains and biases (d,)), and the rotated share of each head as the config sets it."""
    head_dim = config.hidden_size // config.num_attention_heads
    # the config's share, not the module's rotary_ndims: the white box reports what should be rotated
    rotary_dim = int(head_dim * config.rope_parameters["partial_rotary_factor"])
    norms = {
        "q_norm": module.q_layernorm.weight,
        "q_norm_bias": module.q_layernorm.bias,
        "k_norm": module.k_layernorm.weight,
        "k_norm_bias": module.k_layernorm.bias,
        "qk_norm": "layer",
    }
    parts = projections(module.q_proj, module.k_proj, module.v_proj, module.dense)
    return parts | pre_norm(decoder.input_layernorm) | norms | {"rotary_dim": rotary_dim}


FAMILY = hf_models.Family(
    "Phi",
    PhiConfig,
    PhiForCausalLM,
    "transformers.models.phi.modeling_phi",
    {"qk_layernorm": True, **DROPOUTS, **hf_models.NO_SPECIAL_TOKENS},
    None,  # the white box: LAYER, set below
    sizes=hf_models.REALISTIC,
)


def _layer() -> Target:
    return hf_eager.eager_target(
        "hf-phi",
        SimpleNamespace(
            eager_attention_forward=modeling_phi.eager_attention_forward,
            config=config,
            decoder=modeling_phi.PhiDecoderLayer,
            rotary=modeling_phi.PhiRotaryEmbedding,
            apply_rotary_pos_emb=partial(modeling_phi.apply_rotary_pos_emb),
            reported=reported,
            silence=("fc2",),
            head_dims=(4, 8, 16),
            tied_width=True,
            rotary_pct=ROTARY_PCT,
        ),
        set(),
    )


# LAYER (the decoder layer) and MODEL (the whole model, LAYER its white box), built when first used
__getattr__ = built_on_use(
    __name__, {"LAYER": _layer, "MODEL": with_white_box(FAMILY, __name__, "hf-phi-model")}
)
