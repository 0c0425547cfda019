"""StableLM (transformers' StableLmForCausalLM): LayerNorm, a LayerNorm per head on q and k, partial rotary.

The layer as StableLM 2 12B ships it: a LayerNorm pre-norm (with bias), q and k each normalised by a
LayerNorm of its own head (``qk_layernorm``: StableLmLayerNormPerHead, one ``nn.LayerNorm(d)`` without
bias per head, so the gains are (H, d) and the layer reports ``qk_norm="layer"``), RoPE on the first
quarter of each head (``partial_rotary_factor`` 0.25), biases on q, k and v (``use_qkv_bias``, StableLM
2 1.6B's) but none on the output projection, and the attention and the MLP reading the same normed input
in parallel (``use_parallel_residual``: x + attn(ln(x)) + mlp(ln(x))).  With the MLP silenced the
sequential form (x + attn(ln(x)), then the MLP on its own norm of that: StableLM 2 1.6B's and 3B's) is
the same function of the layer's parameters, so the white box is built either way, by the parity of the
spec's seed, and reports the same: the model runs one form, its white box checks both.

The width is the heads times their size (StableLmAttention computes d = hidden_size / heads and refuses
anything else): ``tied_width``; heads of 8 or 16 features, whose quarter is whole pairs.  The q/k norm's
eps is the pre-norm's (``layer_norm_eps``), as the Layer's one ``eps`` reports.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import StableLmConfig, StableLmForCausalLM
from transformers.models.stablelm import modeling_stablelm

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use, with_white_box
from attnspec.protocol.layouts import pre_norm
from attnspec.protocol.targets import LayerSpec, Target

ROTARY_PCT = 0.25
VARIANTS = {"qk_layernorm": True, "use_qkv_bias": True, "use_parallel_residual": True}


def config(spec: LayerSpec) -> StableLmConfig:
    """One StableLM layer of the spec's sizes (d = d_model / heads), with the variants switched on, its
    residual parallel or sequential by the seed's parity."""
    fields = hf_eager.sizes(spec) | VARIANTS | {"hidden_dropout": 0.1, "pad_token_id": None}
    fields["use_parallel_residual"] = spec.seed % 2 == 0  # both forms, one spec in two (module docstring)
    fields.pop("head_dim")  # StableLM has none: d = hidden_size / num_attention_heads
    fields["rope_parameters"] = fields["rope_parameters"] | {"partial_rotary_factor": ROTARY_PCT}
    return StableLmConfig(**fields)


def partial(apply_rotary_pos_emb):
    """A family's apply_rotary_pos_emb (which rotates every feature it is given) on the first
    ``cos.shape[-1]`` features of each head, the rest passed as they are: the slicing the family's
    attention module does around it, for the kit's rope() (hf_eager.eager_target)."""

    def apply(q, k, cos, sin):
        rotated = cos.shape[-1]
        q_rot, k_rot = apply_rotary_pos_emb(q[..., :rotated], k[..., :rotated], cos, sin)
        return torch.cat((q_rot, q[..., rotated:]), dim=-1), torch.cat((k_rot, k[..., rotated:]), dim=-1)

    return apply


def reported(decoder, module, config: StableLmConfig) -> dict:
    """The q, k, v, o projections (biases on q, k, v), the input LayerNorm, the per-head LayerNorms of q
    and k (gains (H, d), no bias), and the rotated share of each head as the config sets it."""
    names = ("wq", "wk", "wv", "wo")
    projections = (module.q_proj, module.k_proj, module.v_proj, module.o_proj)
    parts = {name: p.weight for name, p in zip(names, projections, strict=True)}
    parts |= {"b" + name[1:]: p.bias for name, p in zip(names, projections, strict=True)}
    head_dim = config.hidden_size // config.num_attention_heads
    # the config's share, not the module's rotary_ndims: the white box reports what should be rotated
    rotary_dim = int(head_dim * config.rope_parameters["partial_rotary_factor"])
    gains = {
        f"{name}_norm": torch.stack([norm.weight for norm in getattr(module, f"{name}_layernorm").norms])
        for name in ("q", "k")
    }
    return parts | pre_norm(decoder.input_layernorm) | gains | {"qk_norm": "layer", "rotary_dim": rotary_dim}


FAMILY = hf_models.Family(
    "StableLm",
    StableLmConfig,
    StableLmForCausalLM,
    "transformers.models.stablelm.modeling_stablelm",
    {**VARIANTS, "hidden_dropout": 0.1, **hf_models.NO_SPECIAL_TOKENS},
    None,  # the white box: LAYER, set below
    sizes=hf_models.REALISTIC,
)


def _layer() -> Target:
    return hf_eager.eager_target(
        "hf-stablelm",
        SimpleNamespace(
            eager_attention_forward=modeling_stablelm.eager_attention_forward,
            config=config,
            decoder=modeling_stablelm.StableLmDecoderLayer,
            rotary=modeling_stablelm.StableLmRotaryEmbedding,
            apply_rotary_pos_emb=partial(modeling_stablelm.apply_rotary_pos_emb),
            reported=reported,
            head_dims=(8, 16),
            tied_width=True,
            rotary_pct=ROTARY_PCT,
        ),
        set(),
    )


# LAYER (the decoder layer) and MODEL (the whole model, LAYER its white box), built when first used
__getattr__ = built_on_use(
    __name__, {"LAYER": _layer, "MODEL": with_white_box(FAMILY, __name__, "hf-stablelm-model")}
)
