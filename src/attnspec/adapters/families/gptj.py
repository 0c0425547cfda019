"""GPT-J (transformers' GPTJForCausalLM): interleaved rotary on the first quarter of each head, base 10000.

GPT-J rotates the pairs (x_2i, x_2i+1) (``rotate_every_two``), not Llama's half-split pairs, and only
within the first ``rotary_dim`` features of each head (64 of 256 in GPT-J 6B: a quarter), the rest
passed as they are.  Both targets declare it: ``conventions = {"rope-interleaved"}``, the layer reporting
its ``rotary_dim``, so that the kit pairs the features within the rotated share only.  The base is
written into the code (``create_sinusoidal_positions``: 10000 ** (-2i / rotary_dim), no config field):
``rope_base = 10000.0``, so the kit never draws another.  The block: one LayerNorm whose output feeds
the attention and the MLP in parallel (x + attn(ln(x)) + mlp(ln(x))), no bias on q, k, v or the output
projection, no GQA (k and v have every head), the MLP silenced by zeroing ``fc_out``.

The width is the heads times their size (GPTJAttention refuses anything else): ``tied_width``; heads of
16 or 32 features, whose quarter is two or four pairs (a quarter of 8 features would be one pair, which
interleaved and half-split pairs rotate alike: a convention could not be told there).  The attention
scores in float32 whatever the dtype (no "float64").
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import torch
from transformers import GPTJConfig, GPTJForCausalLM
from transformers.models.gptj import modeling_gptj

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use, with_white_box
from attnspec.protocol.layouts import pre_norm, projections
from attnspec.protocol.targets import LayerSpec, Target

ROTARY_PCT = 0.25
BASE = 10000.0  # create_sinusoidal_positions' own
INTERLEAVED = frozenset({"rope-interleaved"})
POSITIONS = 512  # the white box's table of angles: past every offset and length the layer properties draw
DROPOUTS = {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}  # eval mode must switch them off


def config(spec: LayerSpec, positions: int = POSITIONS) -> GPTJConfig:
    """One GPT-J block of the spec's sizes (d = d_model / heads), rotating a quarter of each head."""
    return GPTJConfig(
        n_embd=spec.d_model,
        n_head=spec.n_heads,
        n_layer=1,
        n_inner=1,
        rotary_dim=int(spec.d_model // spec.n_heads * ROTARY_PCT),
        n_positions=positions,
        vocab_size=1,
        bos_token_id=None,
        eos_token_id=None,
        **DROPOUTS,
    )


def rope(x: torch.Tensor, positions: torch.Tensor, base: float = BASE) -> torch.Tensor:
    """GPT-J's rotary embedding on its own: x (..., T, d) through apply_rotary_pos_emb with the sines and
    cosines GPTJRotaryEmbedding reads from its table, on the first int(d * 0.25) features (the attention
    module's slicing), the rest unchanged.  ``base`` is always 10000 (rope_base): GPT-J has no other."""
    seq, head_dim = x.shape[-2:]
    table = config(LayerSpec(head_dim, 1, 1, head_dim), positions=int(positions.max()) + 1)
    sin, cos = modeling_gptj.GPTJRotaryEmbedding(table).to(x.device)(x, positions[None])  # (1, T, r/2)
    rows = x.reshape(-1, seq, 1, head_dim)  # (N, T, 1, d): every leading axis as a batch of one head
    rotated = table.rotary_dim
    turned = modeling_gptj.apply_rotary_pos_emb(rows[..., :rotated], sin, cos)
    return torch.cat((turned, rows[..., rotated:]), dim=-1).reshape(x.shape)


def reported(decoder, module, config: GPTJConfig) -> dict:
    """q, k, v and out_proj (no biases), the block's LayerNorm, and the config's rotary_dim (the features
    it rotates, in its own interleaved pairs: the declaration says so)."""
    parts = projections(module.q_proj, module.k_proj, module.v_proj, module.out_proj)
    return parts | pre_norm(decoder.ln_1) | {"rotary_dim": config.rotary_dim}


# hf_models.REALISTIC in GPT-J's config's own names (n_embd, n_head, n_layer, n_positions, n_inner)
_R = hf_models.REALISTIC
SIZES = {
    "vocab_size": _R["vocab_size"],
    "n_embd": _R["hidden_size"],
    "n_head": _R["num_attention_heads"],
    "n_layer": _R["num_hidden_layers"],
    "n_inner": _R["intermediate_size"],
    "rotary_dim": int(_R["hidden_size"] // _R["num_attention_heads"] * ROTARY_PCT),  # a quarter of each head
    "n_positions": _R["max_position_embeddings"],
    "tie_word_embeddings": False,
    **DROPOUTS,
}
FAMILY = hf_models.Family(
    "GPTJ",
    GPTJConfig,
    GPTJForCausalLM,
    "transformers.models.gptj.modeling_gptj",
    dict(hf_models.NO_SPECIAL_TOKENS),
    None,  # the white box: LAYER, set below
    sizes=SIZES,
)


def _layer() -> Target:
    target = hf_eager.eager_target(
        "hf-gptj",
        SimpleNamespace(
            eager_attention_forward=modeling_gptj.eager_attention_forward,
            config=config,
            decoder=modeling_gptj.GPTJBlock,
            rotary=modeling_gptj.GPTJRotaryEmbedding,
            apply_rotary_pos_emb=None,  # rope() above: GPT-J's takes (tensor, sin, cos) in (B, T, H, d)
            reported=reported,
            silence=("fc_out",),
            attention_name="attn",
            head_dims=(16, 32),
            tied_width=True,
            rotary_pct=ROTARY_PCT,
        ),
        set(),
        without=frozenset({"gqa"}),
    )
    return replace(target, rope=rope, conventions=INTERLEAVED, rope_base=BASE)


# LAYER (the decoder layer) and MODEL (the whole model, LAYER its white box), built when first used
__getattr__ = built_on_use(
    __name__, {"LAYER": _layer, "MODEL": with_white_box(FAMILY, __name__, "hf-gptj-model")}
)
