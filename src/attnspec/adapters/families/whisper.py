"""Whisper's decoder cross-attention (transformers' WhisperDecoderLayer), as a "cross" layer target.

The white box is a whole WhisperDecoderLayer whose two other sublayers add exactly 0: its
self-attention's ``out_proj`` and its MLP's ``fc2`` zeroed (weights and biases), so that the layer is
``x + encoder_attn(LayerNorm(x), context)`` as the decoder layer itself wires it (its own residuals,
norms and the keyword it hands the encoder's states over with).  The cross-attention: queries from the
normed decoder states, scaled by ``head_dim ** -0.5`` as they are projected (the attention then scales by
1.0), keys from a projection without bias, values and output with biases, no mask (every query sees
every encoder token) and no positions.  Its keys and values read d_model features: the context is as
wide as the model (``tied_context``), and the heads are d_model / heads wide (``tied_width``).  It
computes in float64 too (its eager attention keeps the input's dtype).

Whisper has no decoder-only model target here: its decoder needs an encoder's output to attend to,
which the module properties do not give; the encoder alone is a plain bidirectional encoder.
"""

from __future__ import annotations

import torch
from transformers import WhisperConfig
from transformers.models.whisper import modeling_whisper

from attnspec.adapters.families import built_on_use
from attnspec.kit.strategies import randomize_
from attnspec.protocol.layouts import pre_norm, projections
from attnspec.protocol.targets import CannotBuild, Layer, LayerSpec, Target

# What a campaign mutates: the attention (WhisperAttention, the eager attention).  The decoder layer's own
# forward runs too, but with its self-attention and MLP silenced their faults cannot show here, and no
# target checks them (a decoder needs an encoder's output, which no module property gives).
SOURCES = (
    "transformers.models.whisper.modeling_whisper:eager_attention_forward,WhisperAttention.__init__,"
    "WhisperAttention.forward",
)


def cross_layer(spec: LayerSpec) -> Layer:
    """WhisperDecoderLayer with its self-attention and MLP silenced: x + its cross-attention sublayer."""
    if spec.d_model != spec.n_heads * spec.head_dim:
        raise CannotBuild(f"Whisper's heads are d_model / heads wide: {spec}")
    config = WhisperConfig(
        d_model=spec.d_model,
        decoder_attention_heads=spec.n_heads,
        encoder_attention_heads=spec.n_heads,
        decoder_ffn_dim=1,
        encoder_ffn_dim=1,
        decoder_layers=1,
        encoder_layers=1,
        vocab_size=1,
        attention_dropout=0.1,  # on in training: eval mode must switch it off (F21)
        dropout=0.1,
    )
    config._attn_implementation = "eager"
    decoder = modeling_whisper.WhisperDecoderLayer(config, layer_idx=0)
    randomize_(decoder, spec).to(spec.device, spec.dtype).eval()
    with torch.no_grad():  # the self-attention and the MLP add exactly 0
        for silenced in (decoder.self_attn.out_proj, decoder.fc2):
            silenced.weight.zero_()
            silenced.bias.zero_()

    def forward(x: torch.Tensor, offset: int, context: torch.Tensor | None = None) -> torch.Tensor:
        return decoder(x, encoder_hidden_states=context, use_cache=False)

    attention = decoder.encoder_attn
    return Layer(
        forward,
        **projections(attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj),
        **pre_norm(decoder.encoder_attn_layer_norm),
        residual=True,
        rope=False,
    )


def _cross() -> Target:
    """The decoder layer's cross-attention as a target."""
    return Target(
        "hf-whisper-cross",
        None,
        frozenset({"cross", "float64"}),
        "transformers WhisperDecoderLayer's cross-attention (its self-attention and MLP silenced)",
        cross_layer,
        sources=SOURCES,
        tied_width=True,
        tied_context=True,
    )


__getattr__ = built_on_use(__name__, {"CROSS": _cross})
