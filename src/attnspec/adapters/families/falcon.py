"""Falcon (transformers' FalconForCausalLM) in its two published layouts.

**Multi-query, RoPE** (Falcon-7B's layout: ``multi_query=True``, ``parallel_attn=True``, no biases):
every query head reads the one key head and the one value head, whose rows follow the queries' in one
fused ``query_key_value`` projection (q | k | v, the last two one head wide); attention and MLP run in
parallel from the same LayerNorm.  The layer can only be built with one KV head: ``LAYER`` declares
``kv_heads = (1,)``, so the kit never asks for another, and its config raises ``CannotBuild`` for a spec
with more (a spec that reached it anyway is drawn again, never failed).  ``MODEL`` is the whole causal LM.

**ALiBi** (Falcon-RW's layout: ``alibi=True``, multi-head, sequential attention and MLP, biases): the
per-head fused ``query_key_value`` (head by head q, k, v) and BLOOM's slopes, but FalconModel adds the
bias to the attention mask, which the eager attention adds to the logits *after* they were scaled by
1/sqrt(d), and it divides the bias by sqrt(d) first: the logit is (q.k + slope * (kv - q)) / sqrt(d).
So Falcon's ALiBi is BLOOM's divided by sqrt(head_dim), and the layer reports exactly that as its
``Layer.score_mod`` (``falcon_alibi``, built from the layer's head count and head size).  Declaring
BLOOM's ``alibi`` on it instead is a misdeclaration the layer properties fail (planted in
tests/fixtures/misdeclared_families.py).

Falcon's ``build_alibi_tensor`` rounds each slope and each product ``slope * position`` to bfloat16
(as Falcon was trained).  That is exact while the slopes are powers of two (at most 8 heads) and the
positions below 256; with more heads (Falcon-RW-1B has 32) the bias is rounded at each key's position,
not at its distance, and is no longer a function of q_idx - kv_idx alone, which a score_mod of a
layer must be.  So the ALiBi targets declare head counts of at most 8 (``heads``; the model has 4).

The white box of the ALiBi layout is a one-layer FalconModel fed ``inputs_embeds``, its decoder layer's
output taken by a forward hook (before the final LayerNorm): the bias and mask reach the layer exactly
as FalconModel composes them (build_alibi_tensor, the division by sqrt(d), create_causal_mask), so a
fault there is the white box's to see.  Its KV cache is the model's own.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import torch
from transformers import FalconConfig, FalconForCausalLM, FalconModel
from transformers.models.falcon import modeling_falcon

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use, inside_model
from attnspec.kit.strategies import randomize_
from attnspec.protocol.layouts import fused_projections, per_head_fused_projections, pre_norm
from attnspec.protocol.targets import CannotBuild, Layer, LayerSpec, Target
from attnspec.specs.mods import alibi, alibi_slopes

MODULE = "transformers.models.falcon.modeling_falcon"
# Falcon-7B's attention: one KV head, RoPE, attention and MLP in parallel from one LayerNorm, no biases
MULTI_QUERY = dict(
    multi_query=True, parallel_attn=True, bias=False, alibi=False, new_decoder_architecture=False
)
# Falcon-RW's: ALiBi, every head its own K and V, attention then MLP, biases
ALIBI = dict(multi_query=False, parallel_attn=False, bias=True, alibi=True, new_decoder_architecture=False)
ALIBI_HEADS = (3, 4)  # the slopes are powers of two (bfloat16-exact) up to 8 heads; the model has 4
# realistic sizes (hf_models.REALISTIC, in Falcon's names): 4 heads of 16 features, FFN of 128
SIZES = dict(
    vocab_size=128,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    ffn_hidden_size=128,
    max_position_embeddings=64,
    tie_word_embeddings=False,
    attention_dropout=0.1,  # on in training: eval mode must switch it off (F21)
    hidden_dropout=0.1,
    **hf_models.NO_SPECIAL_TOKENS,
)


def layer_config(spec: LayerSpec, layout: dict) -> FalconConfig:
    """One Falcon layer of ``layout`` at the spec's sizes (heads of d_model / n_heads, as Falcon has)."""
    if spec.d_model != spec.n_heads * spec.head_dim:
        raise CannotBuild(f"Falcon's heads are hidden_size / num_attention_heads wide: {spec}")
    if layout["multi_query"] and spec.n_kv_heads != 1:
        raise CannotBuild(f"Falcon's multi-query layer has exactly one KV head: {spec}")
    if not layout["multi_query"] and spec.n_kv_heads != spec.n_heads:
        raise CannotBuild(f"Falcon's multi-head layer has a KV head per query head: {spec}")
    return FalconConfig(
        **SIZES
        | {"num_hidden_layers": 1, "vocab_size": 1, "ffn_hidden_size": 1}
        | {"hidden_size": spec.d_model, "num_attention_heads": spec.n_heads}
        | {"rope_parameters": {"rope_type": "default", "rope_theta": spec.base}},
        **layout,
    )


def falcon_alibi(n_heads: int, head_dim: int):
    """Falcon's ALiBi as a score_mod: BLOOM's slopes (specs.mods.alibi_slopes) divided by sqrt(head_dim),
    since Falcon adds the bias, divided so, to logits already scaled by 1/sqrt(head_dim)."""
    root = math.sqrt(head_dim)
    mod = alibi([slope / root for slope in alibi_slopes(n_heads)])
    mod.__qualname__ = f"falcon_alibi({n_heads} heads, BLOOM's / sqrt({head_dim}))"
    return mod


class MultiQueryDecoder(modeling_falcon.FalconDecoderLayer):
    """Falcon's decoder layer returning its hidden states alone (it returns them with the attention
    weights), as hf_eager.eager_target calls a decoder layer."""

    def forward(self, *args, **kwargs):  # type: ignore[override]
        return super().forward(*args, **kwargs)[0]


def multi_query_parts(decoder, module, config: FalconConfig) -> dict:
    """The fused q | k | v of a multi-query layer (H*d query rows, then d key rows and d value rows: one
    KV head, as the config's multi_query says), the dense output projection, the input LayerNorm."""
    heads = config.num_attention_heads
    spec = LayerSpec(config.hidden_size, heads, 1, config.hidden_size // heads)
    parts = fused_projections(module.query_key_value, module.dense, spec)
    return parts | pre_norm(decoder.input_layernorm)


def _multi_query_layer() -> Target:
    target = hf_eager.eager_target(
        "hf-falcon",
        SimpleNamespace(
            eager_attention_forward=modeling_falcon.eager_attention_forward,
            config=lambda spec: layer_config(spec, MULTI_QUERY),
            decoder=MultiQueryDecoder,
            rotary=modeling_falcon.FalconRotaryEmbedding,
            apply_rotary_pos_emb=modeling_falcon.apply_rotary_pos_emb,
            reported=multi_query_parts,
            silence=("dense_4h_to_h",),
            attention_name="self_attention",
            cache_keyword="layer_past",
            tied_width=True,
        ),
        set(),
    )
    return replace(target, kv_heads=(1,))


def alibi_layer(spec: LayerSpec) -> Layer:
    """Falcon-RW's decoder layer inside a one-layer FalconModel (module docstring): x + attention of the
    input LayerNorm, with the ALiBi FalconModel adds to the mask, then the MLP, its dense_4h_to_h zeroed
    so that it adds exactly 0."""
    config = layer_config(spec, ALIBI)
    config._attn_implementation = "eager"
    model = randomize_(FalconModel(config), spec).to(spec.device, spec.dtype).eval()
    decoder = model.h[0]
    with torch.no_grad():
        decoder.mlp.dense_4h_to_h.weight.zero_()
        decoder.mlp.dense_4h_to_h.bias.zero_()
    forward, decode = inside_model(model, decoder, config)

    # the config's sizes, not the module's computed attributes (a mutant changes those too)
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    attention = decoder.self_attention
    return Layer(
        forward,
        **per_head_fused_projections(attention.query_key_value, attention.dense, heads),
        **pre_norm(decoder.input_layernorm),
        residual=True,
        rope=False,
        decode=decode,
        score_mod=falcon_alibi(heads, head_dim),
    )


def _alibi_layer() -> Target:
    return Target(
        "hf-falcon-alibi",
        None,
        frozenset({"layer", "cache"}),
        "transformers FalconDecoderLayer with ALiBi (Falcon-RW), in a one-layer FalconModel",
        alibi_layer,
        sources=(MODULE,),
        tied_width=True,
        heads=ALIBI_HEADS,
    )


def family(name: str, layout: dict, layer: Target) -> hf_models.Family:
    return hf_models.Family(
        name,
        FalconConfig,
        FalconForCausalLM,
        MODULE,
        {**layout, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        layer,
        sizes=SIZES,
    )


def _alibi_model() -> Target:
    """The ALiBi model: its 4 heads of 16 features declared, with Falcon's bias for them."""
    model = hf_models.model_target(
        family("FalconRW", ALIBI, __getattr__("ALIBI_LAYER")), "hf-falcon-alibi-model"
    )
    heads = SIZES["num_attention_heads"]
    return replace(model, heads=(heads,), score_mod=falcon_alibi(heads, SIZES["hidden_size"] // heads))


BUILDERS = {
    "LAYER": _multi_query_layer,
    "MODEL": lambda: hf_models.model_target(
        family("Falcon", MULTI_QUERY, __getattr__("LAYER")), "hf-falcon-model"
    ),
    "ALIBI_LAYER": _alibi_layer,
    "ALIBI_MODEL": _alibi_model,
}


# LAYER and MODEL (multi-query, RoPE), ALIBI_LAYER and ALIBI_MODEL (Falcon-RW's ALiBi), each built when
# first used
__getattr__ = built_on_use(__name__, BUILDERS)
