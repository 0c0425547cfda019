"""Hugging Face transformers' eager attention (optional: pip install transformers).

Each target runs the ``eager_attention_forward`` of one model family (Llama; Mistral, whose
layers use a sliding window; GptOss, with sinks and a sliding window), and, for the layer
properties, that family's attention module (LlamaAttention, MistralAttention, GptOssAttention:
projections, RoPE from the family's rotary embedding, output projection) built from a tiny
config with random weights, nothing downloaded, and for the RoPE properties the family's rotary
embedding and apply_rotary_pos_emb (angles in float32, as transformers builds them).  The
attention gets the mask made by
transformers' own mask functions (``causal_mask_function``, ``sliding_window_causal_mask_function``)
at absolute positions: query i at Tk - Tq + i, where a KV cache puts it.  Masked scores get
the dtype's lowest value, as transformers' eager masks do, so a query that sees no key at all
(Tq > Tk) is not defined here: no "blind" capability.  The eager path scores fp16 in fp16.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from transformers import GptOssConfig, LlamaConfig, MistralConfig, masking_utils
from transformers.models.gpt_oss import modeling_gpt_oss
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral

from attnspec.properties.hypothesis_helpers import randomize_
from attnspec.properties.targets import Layer, LayerSpec, Target


def hf_mask(tq: int, tk: int, window: int | None, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive (tq, tk) mask from transformers' mask functions, queries at positions tk-tq.."""
    if window is None:
        allowed_at = masking_utils.causal_mask_function
    else:
        allowed_at = masking_utils.sliding_window_causal_mask_function(window)
    query = torch.arange(tk - tq, tk, device=device)[:, None]
    key = torch.arange(tk, device=device)[None, :]
    allowed = allowed_at(0, 0, query, key)
    return torch.zeros(tq, tk, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)


def eager_target(name: str, family, capabilities: set[str]) -> Target:
    """The eager attention core and the attention module of one transformers model family."""

    def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
        module = SimpleNamespace(num_key_value_groups=q.shape[1] // k.shape[1], training=False)
        if "sinks" in capabilities:  # GptOss always has sinks; -inf sinks are none
            module.sinks = sinks if sinks is not None else q.new_full((q.shape[1],), -math.inf)
        mask = hf_mask(q.shape[2], k.shape[2], window, q.dtype, q.device) if causal else None
        scaling = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        out, weights = family.eager_attention_forward(module, q, k, v, mask, scaling)
        out = out.transpose(1, 2)  # eager returns (B, T, H, dv)
        return (out, weights) if return_weights else out

    def layer(spec: LayerSpec) -> Layer:
        config = family.config(spec)
        config._attn_implementation = "eager"
        module = family.attention(config, layer_idx=0)
        randomize_(module, spec.seed).to(spec.device, spec.dtype).eval()
        if hasattr(module, "sinks") and not spec.sinks:
            module.sinks.data.fill_(-math.inf)
        rotary = family.rotary(config).to(spec.device)

        def forward(x: torch.Tensor, offset: int) -> torch.Tensor:
            batch, seq, _ = x.shape
            positions = torch.arange(offset, offset + seq, device=x.device).expand(batch, seq)
            mask = hf_mask(seq, seq, spec.window, x.dtype, x.device)[None, None]
            return module(x, rotary(x, positions), mask)[0]

        projections = [module.q_proj, module.k_proj, module.v_proj, module.o_proj]
        return Layer(
            forward,
            *(p.weight for p in projections),
            *(p.bias for p in projections),
            sinks=module.sinks if spec.sinks else None,
        )

    def rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
        seq, head_dim = x.shape[-2:]
        config = family.config(LayerSpec(head_dim, 1, 1, head_dim, base=base))
        cos, sin = family.rotary(config).to(x.device)(x, positions[None])  # (1, T, ...)
        rows = x.reshape(-1, 1, seq, head_dim)  # (N, 1, T, d): every leading axis as a batch of one head
        return family.apply_rotary_pos_emb(rows, rows, cos, sin)[0].reshape(x.shape)

    core = {"weights", "gqa", "value_dim", "decode", "non_causal", "scale", "layer", "offset", "rope"}
    about = f"transformers {name} eager attention, attention module and rotary embedding"
    return Target(name, attention, frozenset(core | capabilities), about, layer, rope)


def sizes(spec: LayerSpec) -> dict:
    """The config fields of a tiny model with one attention layer of ``spec``'s sizes and RoPE."""
    return {
        "hidden_size": spec.d_model,
        "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "rope_parameters": {"rope_type": "default", "rope_theta": spec.base},
        "num_hidden_layers": 1,
        "intermediate_size": 1,
        "vocab_size": 1,
        "bos_token_id": None,
        "eos_token_id": None,
    }


LLAMA = eager_target(
    "hf-llama",
    SimpleNamespace(
        eager_attention_forward=modeling_llama.eager_attention_forward,
        config=lambda spec: LlamaConfig(**sizes(spec)),
        attention=modeling_llama.LlamaAttention,
        rotary=modeling_llama.LlamaRotaryEmbedding,
        apply_rotary_pos_emb=modeling_llama.apply_rotary_pos_emb,
    ),
    set(),
)
MISTRAL = eager_target(
    "hf-mistral",
    SimpleNamespace(
        eager_attention_forward=modeling_mistral.eager_attention_forward,
        config=lambda spec: MistralConfig(**sizes(spec), sliding_window=spec.window),
        attention=modeling_mistral.MistralAttention,
        rotary=modeling_mistral.MistralRotaryEmbedding,
        apply_rotary_pos_emb=modeling_mistral.apply_rotary_pos_emb,
    ),
    {"window"},
)
GPTOSS = eager_target(
    "hf-gptoss",
    SimpleNamespace(
        eager_attention_forward=modeling_gpt_oss.eager_attention_forward,
        config=lambda spec: GptOssConfig(
            **sizes(spec),
            sliding_window=spec.window or 1,
            layer_types=["full_attention" if spec.window is None else "sliding_attention"],
            num_local_experts=1,
            num_experts_per_tok=1,
        ),
        attention=modeling_gpt_oss.GptOssAttention,
        rotary=modeling_gpt_oss.GptOssRotaryEmbedding,
        apply_rotary_pos_emb=modeling_gpt_oss.apply_rotary_pos_emb,
    ),
    {"window", "sinks"},
)
