"""MPT (transformers' MptForCausalLM): ALiBi with MosaicML's slopes, a fused Wqkv, no biases anywhere.

What the layer computes: a LayerNorm without bias (``norm_1``), one fused ``Wqkv`` projection whose
outputs are q | k | v (``chunk(3)``), heads of d_model / n_heads, the logits scaled by
``attn_config.softmax_scale`` (None: 1/sqrt(d)) and then the ALiBi bias added, the output projection,
the residual; no bias on any projection.  MptModel builds the bias once for ``max_seq_len`` keys,
``slope * (j - (max_seq_len - 1))``, and each layer takes its last Tk columns: relative to the query, a
row's constant away from ``slope * (kv - q)``, which the softmax ignores.

MPT writes its slopes in terms of ``alibi_bias_max``: with P the power of two at or above H, the P slopes
2^(-alibi_bias_max * i / P) (i = 1..P), for H < P those of even i first, then those of odd i, cut to H.
With MPT-7B's alibi_bias_max of 8 these are BLOOM's slopes, for every head count (the even i of 2p are
the p slopes of the power of two below, the odd i BLOOM's extra ones).  ``mpt_alibi`` writes MPT's form
from the formula, for the layer's head count and the config's ``alibi_bias_max``, and the layer reports
it as its ``Layer.score_mod``; ``LAYER`` is checked at 3 heads (the interleaved slopes) and at the
model's 4.

transformers' MptModel calls ``build_mpt_alibi_tensor`` with its default ``alibi_bias_max`` of 8,
whatever the config says (it passes the head count and max_seq_len only), and reads neither
``attn_config.alibi`` nor ``attn_type``: a config with another alibi_bias_max is computed with 8.  The
model here uses 8, so the declaration and the code agree; the same layer built with an alibi_bias_max of
16 and declaring it (``mpt_layer(spec, alibi_bias_max=16)``, planted in
tests/fixtures/misdeclared_families.py) is that finding, which the layer properties fail.

The white box is a one-layer MptModel fed ``inputs_embeds``, its block's output taken by a forward hook
(before the final norm), its MLP's ``down_proj`` zeroed: the bias and mask reach the block as MptModel
makes them.  Not expressible in a Layer, and left off: ``clip_qkv`` (a clamp of the fused projection).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from transformers import MptConfig, MptForCausalLM, MptModel

from attnspec.adapters import hf_models
from attnspec.adapters.families import built_on_use, inside_model
from attnspec.kit.strategies import randomize_
from attnspec.protocol.layouts import fused_projections, pre_norm
from attnspec.protocol.targets import CannotBuild, Layer, LayerSpec, Target
from attnspec.specs.mods import alibi

MODULE = "transformers.models.mpt.modeling_mpt"
MAX_SEQ_LEN = 64  # the longest sequence the model takes (its bias is built for that many keys)
ATTENTION = {"alibi": True, "alibi_bias_max": 8}
DROPOUT = 0.1  # on in training: eval mode must switch it off (F21)
# realistic sizes (hf_models.REALISTIC, in MPT's names): 4 heads of 16 features, an MLP of 4 * 64
SIZES = dict(
    vocab_size=128,
    d_model=64,
    n_heads=4,
    n_layers=2,
    expansion_ratio=4,
    max_seq_len=MAX_SEQ_LEN,
    tie_word_embeddings=False,
    attn_config=ATTENTION,
    **hf_models.NO_SPECIAL_TOKENS,
)
HEADS = (3, 4)  # MPT's interleaved slopes (3 heads) and the model's 4


def mpt_slopes(n_heads: int, bias_max: float) -> list[float]:
    """MPT's ALiBi slopes: for P = 2^ceil(log2 H), the slopes 2^(-bias_max * i / P), i = 1..P; for H < P
    those of even i (2, 4, ...) first, then those of odd i (1, 3, ...), cut to H."""
    power = 2 ** math.ceil(math.log2(n_heads))
    slopes = [2.0 ** (-bias_max * i / power) for i in range(1, power + 1)]
    if power != n_heads:
        slopes = (slopes[1::2] + slopes[0::2])[:n_heads]
    return slopes


def mpt_alibi(n_heads: int, bias_max: float):
    """MPT's ALiBi as a score_mod: slope_h * (kv_idx - q_idx) on the scaled logit."""
    mod = alibi(mpt_slopes(n_heads, bias_max))
    mod.__qualname__ = f"mpt_alibi({n_heads} heads, alibi_bias_max {bias_max:g})"
    return mod


def mpt_config(**fields) -> MptConfig:
    """MptConfig with an attention dropout of DROPOUT (MptModel uses it after the attention and the MLP
    too).  MptAttentionConfig types ``attn_pdrop`` as an int and refuses 0.1, so it is set past that
    check; 1, which it takes, would drop everything deterministically, and a dropout left on in eval
    mode would then look like a model whose MLP adds nothing."""
    config = MptConfig(**fields)
    object.__setattr__(config.attn_config, "attn_pdrop", DROPOUT)
    return config


def layer_config(spec: LayerSpec, **attention) -> MptConfig:
    if spec.d_model != spec.n_heads * spec.head_dim:
        raise CannotBuild(f"MPT's heads are d_model / n_heads wide: {spec}")
    sizes = SIZES | {"d_model": spec.d_model, "n_heads": spec.n_heads, "n_layers": 1, "vocab_size": 1}
    config = mpt_config(**sizes | {"attn_config": ATTENTION | attention})
    config._attn_implementation = "eager"
    return config


def mpt_layer(spec: LayerSpec, **attention) -> Layer:
    """MPT's block in a one-layer MptModel (module docstring): x + attention of norm_1, ALiBi, the MLP
    adding exactly 0."""
    config = layer_config(spec, **attention)
    model = randomize_(MptModel(config), spec).to(spec.device, spec.dtype).eval()
    block = model.blocks[0]
    with torch.no_grad():
        block.ffn.down_proj.weight.zero_()
    forward, decode = inside_model(model, block, config)

    # the config's sizes, scale and slopes: not the module's computed attributes, which a mutant changes
    heads = config.n_heads
    spec = LayerSpec(config.d_model, heads, heads, config.d_model // heads)
    return Layer(
        forward,
        **fused_projections(block.attn.Wqkv, block.attn.out_proj, spec),
        **pre_norm(block.norm_1),
        residual=True,
        rope=False,
        decode=decode,
        scale=config.attn_config.softmax_scale,
        score_mod=mpt_alibi(heads, config.attn_config.alibi_bias_max),
    )


def _layer() -> Target:
    return Target(
        "hf-mpt",
        None,
        frozenset({"layer", "cache"}),
        "transformers MptBlock (ALiBi, a fused Wqkv, no biases) in a one-layer MptModel",
        mpt_layer,
        sources=(MODULE,),
        tied_width=True,
        heads=HEADS,
    )


def _model() -> Target:
    family = hf_models.Family(
        "Mpt", mpt_config, MptForCausalLM, MODULE, {}, __getattr__("LAYER"), sizes=SIZES
    )
    model = hf_models.model_target(family, "hf-mpt-model")
    heads = SIZES["n_heads"]
    return replace(
        model,
        heads=(heads,),
        score_mod=mpt_alibi(heads, ATTENTION["alibi_bias_max"]),
        max_len=MAX_SEQ_LEN,
    )


BUILDERS = {"LAYER": _layer, "MODEL": _model}


# LAYER (MPT's block) and MODEL (the causal LM, LAYER its white box), each built when first used
__getattr__ = built_on_use(__name__, BUILDERS)
