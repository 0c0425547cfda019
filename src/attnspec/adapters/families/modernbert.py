"""ModernBERT (transformers' ModernBertForMaskedLM): an encoder of local and global layers.

Every ``global_attn_every_n_layers``-th layer from the first (i % 3 == 0, the shipped pattern) lets every
token see every other; the others see a local window, ``|q - kv| <= local_attention // 2`` on either
side.  Both rotate q and k with half-split RoPE, at different bases: 160000 on global layers, 10000 on
local ones (``rope_parameters`` per layer type).  The model's schedule declares it:
``LayerKind("bidirectional", base=160000)`` and ``LayerKind("local", R, base=10000)``, with a local window
of 4 (R = 2) so that local layers matter at the properties' lengths.  Its attention has one fused
``Wqkv`` projection (q | k | v, heads of hidden_size / heads: ``tied_width``) and no biases; its layers
are pre-norm, a LayerNorm without bias, except the first layer's, whose attention norm is an identity
(the embeddings end in a LayerNorm).

The white box is ModernBertEncoderLayer with its MLP silenced (``Wo`` zeroed), built as the kind the kit
asks for; as the first layer (no attention norm) or a later one (its LayerNorm) by the spec's seed, so
that both are checked.  Since the first layer is global, every output of every layer already depends on
every token: the local windows show in the white box (LAYER-1 against the local mask) and not in the
module's receptive field (MOD-5), which is all tokens from layer 0 on.  So the white box builds a kind
with the model's own window and base for that type of layer (not the kind's size and base): a schedule
that misstates either fails LAYER-1.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import ModernBertConfig, ModernBertForMaskedLM
from transformers.models.modernbert import modeling_modernbert

from attnspec.adapters import hf_eager, hf_models
from attnspec.adapters.families import built_on_use
from attnspec.kit.strategies import randomize_
from attnspec.protocol.layouts import fused_projections
from attnspec.protocol.targets import Layer, LayerKind, LayerSpec, Target
from attnspec.specs.mods import bidirectional

LOCAL_ATTENTION = 4  # the whole local window: 2 tokens on either side
GLOBAL = "full_attention"
LOCAL = "sliding_attention"


def layer_type(kind: LayerKind | None) -> str:
    return LOCAL if kind is not None and kind.mask == "local" else GLOBAL


def config(spec: LayerSpec, kind: LayerKind | None, layers: int) -> ModernBertConfig:
    """``layers`` layers all of ``kind`` (the last is the one built; global without a kind) at the spec's
    sizes.  A kind of the model's schedule is built as the model's layers of that type are: the model's
    own local window and RoPE base for it, not the kind's, so that a schedule that misstates them fails
    LAYER-1 (the model's receptive field, every token from layer 0 on, cannot show them); without a kind,
    RoPE at the spec's base."""
    theta = SHIPPED.rope_parameters[layer_type(kind)]["rope_theta"] if kind else spec.base
    rope = {"rope_type": "default", "rope_theta": theta}
    built = ModernBertConfig(
        hidden_size=spec.d_model,
        num_attention_heads=spec.n_heads,
        num_hidden_layers=layers,
        intermediate_size=1,
        vocab_size=1,
        layer_types=[layer_type(kind)] * layers,
        local_attention=SHIPPED.local_attention,
        rope_parameters={GLOBAL: dict(rope), LOCAL: dict(rope)},
        attention_dropout=0.1,  # on in training: eval mode must switch it off (F21)
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        cls_token_id=None,
        sep_token_id=None,
    )
    built._attn_implementation = "eager"
    return built


def encoder_layer(spec: LayerSpec) -> Layer:
    """ModernBertEncoderLayer of the spec's kind (global by default), the first layer of a stack (no
    attention norm) for an even seed, the second (a LayerNorm) for an odd one; its MLP adds exactly 0."""
    index = spec.seed % 2
    built = config(spec, spec.kind, index + 1)
    block = modeling_modernbert.ModernBertEncoderLayer(built, layer_idx=index)
    block = randomize_(block, spec).to(spec.device, spec.dtype).eval()
    # the mask and rotary the model hands the layer: by its attention_type, the mask of that type as
    # create_bidirectional_sliding_window_mask makes it (config.sliding_window on either side)
    kind_type = block.attention_type
    kind = LayerKind("local", built.sliding_window) if kind_type == LOCAL else LayerKind("bidirectional")
    with torch.no_grad():
        for parameter in block.mlp.Wo.parameters():
            parameter.zero_()
    rotary = modeling_modernbert.ModernBertRotaryEmbedding(built).to(spec.device)

    def forward(x: torch.Tensor, offset: int) -> torch.Tensor:
        batch, seq, _ = x.shape
        positions = torch.arange(offset, offset + seq, device=x.device).expand(batch, seq)
        mask = hf_eager.hf_mask(seq, seq, None, x.dtype, x.device, offset, offset, kind)[None, None]
        return block(x, attention_mask=mask, position_embeddings=rotary(x, positions, kind_type))

    norm = {}
    if index > 0:  # the first layer's attention norm is an identity
        norm = {"norm_weight": block.attn_norm.weight, "norm_bias": block.attn_norm.bias, "norm": "layer"}
        norm["eps"] = built.norm_eps
    return Layer(forward, **fused_projections(block.attn.Wqkv, block.attn.Wo, spec), **norm, residual=True)


def attention_parts(layer, module, model_config: ModernBertConfig) -> dict:
    """What one of the model's own attention modules reports (the model's layer runs): its fused Wqkv
    split into q | k | v and its output projection; the module takes the normed input (an identity on
    the first layer) and returns its output before the residual."""
    heads = model_config.num_attention_heads
    sizes = LayerSpec(model_config.hidden_size, heads, heads, model_config.hidden_size // heads)
    return fused_projections(module.Wqkv, module.Wo, sizes)


# how the model's own layers report themselves (hf_models.own_layer_runs): ModernBertEncoderLayer's attn
hf_eager.PARTS["hf-modernbert"] = SimpleNamespace(
    decoder=modeling_modernbert.ModernBertEncoderLayer, attention_name="attn", reported=attention_parts
)


def schedule(model_config: ModernBertConfig) -> tuple[LayerKind, ...]:
    """Global layers bidirectional, local ones a window of sliding_window (local_attention // 2) on
    either side, each kind with its RoPE base."""
    bases = {kind: params["rope_theta"] for kind, params in model_config.rope_parameters.items()}
    return tuple(
        LayerKind("local", model_config.sliding_window, base=bases[LOCAL])
        if kind == LOCAL
        else LayerKind("bidirectional", base=bases[GLOBAL])
        for kind in model_config.layer_types
    )


SOURCES = (
    "transformers.models.modernbert.modeling_modernbert",
    hf_eager.mask_sources(False, ("local", "bidirectional")),
)
# three layers: global, local, local (every third global from the first, as shipped)
EXTRA = {
    "num_hidden_layers": 3,
    "local_attention": LOCAL_ATTENTION,
    "attention_dropout": 0.1,  # on in training: eval mode must switch it off (F21)
    **hf_models.NO_SPECIAL_TOKENS,
    "cls_token_id": None,
    "sep_token_id": None,
}
# the model's config: the shipped bases, 160000 on global layers and 10000 on local ones
SHIPPED = ModernBertConfig(**{**hf_models.REALISTIC, **EXTRA})
SCHEDULE = schedule(SHIPPED)

# The encoder layer as a target of its own: both kinds, every token of a global layer seeing every other
LAYER_TARGET = Target(
    "hf-modernbert",
    None,
    frozenset({"layer", "offset"}),
    "transformers ModernBertEncoderLayer (fused Wqkv, RoPE, a local or global mask), its MLP silenced",
    encoder_layer,
    sources=SOURCES,
    tied_width=True,
    mask_mod=bidirectional,
    schedule=tuple(dict.fromkeys(SCHEDULE)),
)

FAMILY = hf_models.Family(
    "ModernBert",
    ModernBertConfig,
    ModernBertForMaskedLM,
    "transformers.models.modernbert.modeling_modernbert",
    EXTRA,
    LAYER_TARGET,
    encoder=True,
    schedule=schedule,
    sizes=hf_models.REALISTIC,
)


# LAYER (the encoder layer) and MODEL (the whole masked LM, LAYER its white box), built when first used
__getattr__ = built_on_use(
    __name__,
    {"LAYER": lambda: LAYER_TARGET, "MODEL": lambda: hf_models.model_target(FAMILY, "hf-modernbert-model")},
)
