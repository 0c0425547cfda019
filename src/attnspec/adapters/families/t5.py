"""T5 (transformers' T5EncoderModel, and the decoder's cross-attention sublayer).

**The encoder** (``MODEL``, ``LAYER``).  Every token sees every other (declared: the mask_mod
``bidirectional``); there are no positions but a learned bias per head and per bucket of the distance
``kv - q`` (half the buckets for keys after the query, half for keys before; distances below a quarter of
the buckets each their own bucket, the rest logarithmically up to ``relative_attention_max_distance``,
beyond it the last), added to logits that T5 never scales (scale 1.0); an RMSNorm without mean or bias
(T5LayerNorm); no bias on any projection; heads of ``d_kv`` features whatever ``d_model``.  The first
layer owns the table (``relative_attention_bias``) and hands its bias to the others.

``LAYER`` is T5's encoder block (T5Block) built as the first layer, with a table: its self-attention
sublayer (T5LayerSelfAttention: x + attention of the RMS-normed x), then its feed-forward sublayer with
the output projection ``wo`` zeroed, so that it adds exactly 0 (its norm and residual still run); it
reports the bias as its ``Layer.score_mod`` (``t5_bias``: the bucket written here from its formula, the
table read from the layer's own parameter at each call).
The model and its white box use 16 buckets up to a distance of 32 (T5 ships 32 up to 128), so that the
kit's short sequences reach the logarithmic buckets and the clamp at the last one.

``MODEL`` is the encoder as a module target, ``x (B, T, D) -> (B, T, D)`` through ``inputs_embeds``
(its last hidden state, after the final norm): a model target must return logits (B, T, V) for tokens,
and an encoder without a head returns hidden states.  It takes a padding mask.

**Cross-attention** (``CROSS``): the decoder's T5LayerCrossAttention, x + attention from the RMS-normed x
to the encoder's output, every query seeing every context token, no bias table (the decoder hands it a
zero bias), no scale; a "cross" target whose context is as wide as the model (``tied_context``: T5's
k and v read d_model features).

Neither computes in float64 (T5LayerNorm takes the variance in float32 whatever the dtype).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import T5Config, T5EncoderModel
from transformers.models.t5 import modeling_t5

from attnspec.adapters.families import built_on_use
from attnspec.kit.strategies import randomize_
from attnspec.protocol.layouts import pre_norm, projections
from attnspec.protocol.targets import Layer, LayerSpec, Target
from attnspec.specs.mods import bidirectional

MODULE = "transformers.models.t5.modeling_t5"
BUCKETS, MAX_DISTANCE = 16, 32
# realistic sizes: 4 heads of 16 features over a width of 64, an FFN of 128, 2 layers
SIZES = dict(
    vocab_size=128,
    d_model=64,
    d_kv=16,
    d_ff=128,
    num_layers=2,
    num_heads=4,
    relative_attention_num_buckets=BUCKETS,
    relative_attention_max_distance=MAX_DISTANCE,
    dropout_rate=0.1,  # on in training: eval mode must switch it off (F21)
    feed_forward_proj="relu",
    is_decoder=False,
    use_cache=False,
    tie_word_embeddings=False,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=None,
)


def relative_bucket(distance: torch.Tensor, buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucket of each distance ``kv - q`` (bidirectional): keys after the query take the upper half
    of the buckets; within a half of n buckets, a distance r below n/2 is bucket r, a larger one
    n/2 + floor(log(r / (n/2)) / log(max_distance / (n/2)) * n/2) (computed in float32, as T5 does),
    at most n - 1."""
    half = buckets // 2
    exact = half // 2
    upper = (distance > 0).long() * half
    r = distance.abs()
    scaled = torch.log(r.float() / exact) / math.log(max_distance / exact) * (half - exact)
    far = (exact + scaled.long()).clamp(max=half - 1)
    return upper + torch.where(r < exact, r, far)


def t5_bias(table: torch.Tensor, buckets: int, max_distance: int):
    """T5's relative-position bias as a score_mod: the logit plus ``table[bucket(kv - q), h]``, the table
    (buckets, H) the layer's own parameter, read when called."""

    def t5_bias(score, b, h, q_idx, kv_idx):
        bucket = relative_bucket(kv_idx - q_idx, buckets, max_distance).to(score.device)
        return score + table.to(score.device, score.dtype)[bucket, h.to(score.device)]

    t5_bias.__qualname__ = f"t5_bias({table.shape[1]} heads, {buckets} buckets up to {max_distance})"
    return t5_bias


def layer_config(spec: LayerSpec, decoder: bool = False) -> T5Config:
    """One T5 layer at the spec's sizes (heads of d_kv = head_dim features, whatever d_model)."""
    sizes = {"d_model": spec.d_model, "d_kv": spec.head_dim, "num_heads": spec.n_heads}
    config = T5Config(**SIZES | sizes | {"num_layers": 1, "vocab_size": 1, "d_ff": 1, "is_decoder": decoder})
    config._attn_implementation = "eager"
    return config


def t5_layer(spec: LayerSpec) -> Layer:
    """T5's encoder block, built as the encoder's first (with its bias table): the self-attention sublayer,
    then the feed-forward sublayer, its ``wo`` zeroed so that it adds exactly 0."""
    config = layer_config(spec)
    block = modeling_t5.T5Block(config, has_relative_attention_bias=True, layer_idx=0)
    randomize_(block, spec).to(spec.device, spec.dtype).eval()
    with torch.no_grad():
        block.layer[-1].DenseReluDense.wo.weight.zero_()
    sublayer = block.layer[0]
    attention = sublayer.SelfAttention

    def forward(x: torch.Tensor, offset: int) -> torch.Tensor:
        return block(x)[0]

    table = attention.relative_attention_bias.weight.detach()  # the live parameter, (buckets, H)
    return Layer(
        forward,
        **projections(attention.q, attention.k, attention.v, attention.o),
        **pre_norm(sublayer.layer_norm, kind="rms"),
        residual=True,
        rope=False,
        scale=1.0,  # T5 adds the bias to logits it never scales
        score_mod=t5_bias(
            table, config.relative_attention_num_buckets, config.relative_attention_max_distance
        ),
    )


def cross_layer(spec: LayerSpec) -> Layer:
    """The decoder's cross-attention sublayer: x + attention from the RMS-normed x to the context."""
    config = layer_config(spec, decoder=True)
    sublayer = modeling_t5.T5LayerCrossAttention(config, layer_idx=0)
    randomize_(sublayer, spec).to(spec.device, spec.dtype).eval()
    attention = sublayer.EncDecAttention

    def forward(x: torch.Tensor, offset: int, context: torch.Tensor | None = None) -> torch.Tensor:
        return sublayer(x, key_value_states=context)[0]

    return Layer(
        forward,
        **projections(attention.q, attention.k, attention.v, attention.o),
        **pre_norm(sublayer.layer_norm, kind="rms"),
        residual=True,
        rope=False,
        scale=1.0,
    )


class Encoder(nn.Module):
    """T5EncoderModel as a module: features (B, T, D) in as ``inputs_embeds``, its last hidden state out;
    with a padding mask, as T5 takes one (its bias is relative: either side may be padded)."""

    def __init__(self, model: T5EncoderModel) -> None:
        super().__init__()
        self.model = model
        self.d_model = model.config.d_model

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(inputs_embeds=x, attention_mask=attention_mask).last_hidden_state


def _layer() -> Target:
    return Target(
        "hf-t5",
        None,
        frozenset({"layer"}),
        "transformers T5Block (the encoder's first, with its relative-position bias table; its FFN silenced)",
        t5_layer,
        sources=(MODULE,),
        mask_mod=bidirectional,
    )


def _model() -> Target:
    config = T5Config(**SIZES)
    config._attn_implementation = "eager"
    encoder = Encoder(randomize_(T5EncoderModel(config), 0).eval())
    return Target(
        "hf-t5-model",
        None,
        frozenset({"module", "padding", "layer"}),
        "transformers' T5EncoderModel (inputs_embeds in, its last hidden state out), a tiny random config",
        layer=t5_layer,
        sources=(MODULE, "transformers.masking_utils"),
        module=encoder,
        d_model=encoder.d_model,
        mask_mod=bidirectional,
    )


def _cross() -> Target:
    return Target(
        "hf-t5-cross",
        None,
        frozenset({"cross"}),
        "transformers T5LayerCrossAttention (the decoder's cross-attention sublayer)",
        cross_layer,
        sources=(MODULE,),
        tied_context=True,
    )


BUILDERS = {"LAYER": _layer, "MODEL": _model, "CROSS": _cross}


# LAYER (the encoder's self-attention sublayer), MODEL (the encoder, LAYER its white box) and CROSS (the
# decoder's cross-attention sublayer), each built when first used
__getattr__ = built_on_use(__name__, BUILDERS)
