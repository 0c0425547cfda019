"""Correct cross-attention layers, as an encoder-decoder's decoder writes them, as "cross" targets.

``WHISPER``: a Hugging-Face-Whisper-style decoder cross-attention sublayer.  Queries from the decoder's
hidden states after a LayerNorm, scaled by ``head_dim ** -0.5`` as they are projected; keys (a
projection without bias) and values from the encoder's output, whatever its length and width; heads
split by ``view(bsz, seq, heads, head_dim).transpose(1, 2)``; no mask (every query sees every encoder
token) and no positions; the output projection and the residual.

``TORCH_MHA``: torch's ``nn.MultiheadAttention(embed_dim, heads, kdim=, vdim=, batch_first=True)``
attending from x to the context, read by ``attnspec.protocol.layouts.multihead_attention``.

Each builds its layer from the kit's LayerSpec (``context_dim``: the encoder's width) and reports its
parameters; the kit checks it against the cross oracle (LAYER-3), and that its queries do not see
each other and its context has no order (LAYER-4).  The broken twin ``CAUSAL_ON_CONTEXT`` reuses a
decoder's causal mask in cross-attention (query i sees encoder tokens 0..i only), a bug encoder-decoder
code ships; ``CAUSAL_NO_KEY`` builds that mask aligned bottom-right, as self-attention with a cache
does, so that over a context shorter than the decoder's tokens the first queries see no encoder token
(NaN); ``KEYS_FROM_X`` projects keys and values from the decoder's own hidden states, a self-attention
path left in (it crashes on an encoder of another width).

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from attnspec import Layer, LayerSpec, Target, multihead_attention, pre_norm, projections, randomize_


class WhisperStyleCrossAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, kv_dim: int | None = None) -> None:
        super().__init__()
        kv_dim = kv_dim or embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(kv_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(kv_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, tensor: torch.Tensor, seq_len: int, bsz: int) -> torch.Tensor:
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        return torch.matmul(query, key.transpose(2, 3))

    def forward(self, hidden_states: torch.Tensor, key_value_states: torch.Tensor) -> torch.Tensor:
        bsz, tgt_len, _ = hidden_states.size()
        src_len = key_value_states.shape[1]
        query_states = self._shape(self.q_proj(hidden_states) * self.scaling, tgt_len, bsz)
        key_states = self._shape(self.k_proj(key_value_states), src_len, bsz)
        value_states = self._shape(self.v_proj(key_value_states), src_len, bsz)
        attn_weights = nn.functional.softmax(self.scores(query_states, key_states), dim=-1)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, tgt_len, -1)
        return self.out_proj(attn_output)


class CrossAttentionSublayer(nn.Module):
    """x + encoder_attn(LayerNorm(x), encoder_hidden_states), as a decoder layer's middle sublayer."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        kv_dim: int | None = None,
        attention: type[WhisperStyleCrossAttention] = WhisperStyleCrossAttention,
    ) -> None:
        super().__init__()
        self.encoder_attn = attention(embed_dim, num_heads, kv_dim)
        self.encoder_attn_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.encoder_attn_layer_norm(hidden_states)
        return residual + self.encoder_attn(hidden_states, encoder_hidden_states)


def whisper_layer(spec: LayerSpec, sublayer=CrossAttentionSublayer) -> Layer:
    block = sublayer(spec.d_model, spec.n_heads, spec.context_dim)
    randomize_(block, spec).to(spec.device, spec.dtype).eval()
    attn = block.encoder_attn
    return Layer(
        lambda x, offset, context=None: block(x, context),
        **projections(attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj),
        **pre_norm(block.encoder_attn_layer_norm),
        residual=True,
        rope=False,
    )


def torch_mha_layer(spec: LayerSpec) -> Layer:
    width = spec.context_dim or spec.d_model
    mha = nn.MultiheadAttention(spec.d_model, spec.n_heads, kdim=width, vdim=width, batch_first=True)
    randomize_(mha, spec).to(spec.device, spec.dtype).eval()
    return Layer(
        lambda x, offset, context=None: mha(x, context, context, need_weights=False)[0],
        **multihead_attention(mha),
        rope=False,
    )


WHISPER = Target(
    "whisper-style cross-attention",
    None,
    frozenset({"cross", "float64"}),
    "a Whisper-style decoder cross-attention sublayer",
    whisper_layer,
    tied_width=True,
)
TORCH_MHA = Target(
    "nn.MultiheadAttention(kdim=, vdim=)",
    None,
    frozenset({"cross", "float64"}),
    "torch's nn.MultiheadAttention attending to a context of another width",
    torch_mha_layer,
    tied_width=True,
)


# --- the broken twin ----------------------------------------------------------------------------------


class CausalOnContext(WhisperStyleCrossAttention):
    """The decoder's causal mask reused on the encoder's tokens: query i sees encoder tokens 0..i."""

    def scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        scores = super().scores(query, key)
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
        return scores.masked_fill(~causal, float("-inf"))


CAUSAL_ON_CONTEXT = Target(
    "cross-attention with a causal mask",
    None,
    frozenset({"cross", "float64"}),
    "a Whisper-style cross-attention sublayer that masks the encoder's tokens causally",
    partial(whisper_layer, sublayer=partial(CrossAttentionSublayer, attention=CausalOnContext)),
    tied_width=True,
)


class BottomRightCausal(WhisperStyleCrossAttention):
    """The causal mask as a decoder with a cache aligns it (query i at key position Tc - Tq + i)."""

    def scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        scores = super().scores(query, key)
        tgt_len, src_len = scores.shape[-2:]
        future = torch.ones(tgt_len, src_len, dtype=torch.bool, device=scores.device).triu(
            src_len - tgt_len + 1
        )
        return scores.masked_fill(future, float("-inf"))


class KeysFromHiddenStates(WhisperStyleCrossAttention):
    """Self-attention's projections of the hidden states where the encoder's output belongs."""

    def forward(self, hidden_states: torch.Tensor, key_value_states: torch.Tensor) -> torch.Tensor:
        return super().forward(hidden_states, hidden_states)


CAUSAL_NO_KEY = Target(
    "cross-attention with a bottom-right causal mask",
    None,
    frozenset({"cross", "float64"}),
    "a Whisper-style cross-attention sublayer whose causal mask leaves its first queries no encoder token",
    partial(whisper_layer, sublayer=partial(CrossAttentionSublayer, attention=BottomRightCausal)),
    tied_width=True,
)
KEYS_FROM_X = Target(
    "cross-attention with keys from x",
    None,
    frozenset({"cross", "float64"}),
    "a Whisper-style cross-attention sublayer that projects its keys and values from the hidden states",
    partial(whisper_layer, sublayer=partial(CrossAttentionSublayer, attention=KeysFromHiddenStates)),
    tied_width=True,
)
