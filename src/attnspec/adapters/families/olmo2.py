"""OLMo 2 (transformers' Olmo2ForCausalLM): q/k norm over the whole width, and norms after the sublayers.

Two things set OLMo 2's layer apart from Llama's.  Its q/k norm is one RMSNorm over all of q's heads
together (``q_norm`` of width Hq * d, ``k_norm`` of Hkv * d), applied to the projections before they are
split into heads: the layer reports ``qk_norm_over="width"``, gains (H * d,).  A per-head norm (Qwen3's,
Gemma 3's) normalises each head by its own features; this one by every head's, so one loud head quiets
the others.  And its norms come after the sublayers, not before: no input norm (the projections read x
itself), an RMSNorm of the attention's output before the residual (``post_norm``, a gain of plain
``weight``), the same after the MLP (which the white box silences, and RMSNorm of 0 is 0).

Every layer is causal with RoPE over the whole head; no window, no schedule beyond that.
"""

from __future__ import annotations

from types import SimpleNamespace

from transformers import Olmo2Config, Olmo2ForCausalLM
from transformers.models.olmo2 import modeling_olmo2

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use, with_white_box
from attnspec.protocol.targets import LayerSpec, Target


def config(spec: LayerSpec) -> Olmo2Config:
    """One OLMo 2 layer of the spec's sizes (biases off, as OLMo 2 ships)."""
    return Olmo2Config(**hf_eager.sizes(spec) | {"pad_token_id": None})


def reported(decoder, module, config: Olmo2Config) -> dict:
    """The q, k, v, o projections, no input norm, the q/k RMSNorms over the whole width, the RMSNorm of
    the attention's output before the residual (plain gains), and the config's eps for all three."""
    names = ("wq", "wk", "wv", "wo")
    projections = (module.q_proj, module.k_proj, module.v_proj, module.o_proj)
    parts = {name: p.weight for name, p in zip(names, projections, strict=True)}
    parts |= {"b" + name[1:]: p.bias for name, p in zip(names, projections, strict=True)}
    return parts | {
        "q_norm": module.q_norm.weight,
        "k_norm": module.k_norm.weight,
        "qk_norm_over": "width",
        "post_norm": decoder.post_attention_layernorm.weight,
        "eps": config.rms_norm_eps,
    }


FAMILY = hf_models.Family(
    "Olmo2",
    Olmo2Config,
    Olmo2ForCausalLM,
    "transformers.models.olmo2.modeling_olmo2",
    dict(hf_models.NO_SPECIAL_TOKENS),
    None,  # the white box: LAYER, set below
    sizes=hf_models.REALISTIC,
)


def _layer() -> Target:
    return hf_eager.eager_target(
        "hf-olmo2",
        SimpleNamespace(
            eager_attention_forward=modeling_olmo2.eager_attention_forward,
            config=config,
            decoder=modeling_olmo2.Olmo2DecoderLayer,
            rotary=modeling_olmo2.Olmo2RotaryEmbedding,
            apply_rotary_pos_emb=modeling_olmo2.apply_rotary_pos_emb,
            reported=reported,
        ),
        set(),
    )


# LAYER (the decoder layer) and MODEL (the whole model, LAYER its white box), built when first used
__getattr__ = built_on_use(
    __name__, {"LAYER": _layer, "MODEL": with_white_box(FAMILY, __name__, "hf-olmo2-model")}
)
