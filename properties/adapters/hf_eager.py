"""Hugging Face transformers' eager attention (optional: pip install transformers).

Each target runs the ``eager_attention_forward`` of one model family (Llama; Mistral, whose
layers use a sliding window; Qwen2, with biases on q, k and v and a sliding window; Qwen3, whose heads
are RMS-normalised (q_norm, k_norm) before RoPE, with a sliding window; GptOss, with sinks and a
sliding window), and, for the layer
properties, that family's decoder layer (LlamaDecoderLayer, MistralDecoderLayer,
GptOssDecoderLayer: the input RMSNorm, the attention module with its projections, RoPE from the
family's rotary embedding and output projection, the residual, then the MLP sublayer with its
output projection zeroed, so that it adds exactly 0) built from a tiny config with random
weights, nothing downloaded, which also decodes chunk by chunk through transformers'
DynamicCache ("cache"), and for the RoPE properties the family's rotary embedding and
apply_rotary_pos_emb (angles in float32, as transformers builds them).  The attention gets the
mask that transformers' ``eager_mask`` makes from its own mask functions
(``causal_mask_function``, ``sliding_window_causal_mask_function``) at absolute positions: query
i at Tk - Tq + i, where a KV cache puts it.  Masked scores get the dtype's lowest value, so a
query that sees no key at all (Tq > Tk) is not defined here: no "blind" capability.  The eager
path scores fp16 in fp16.

``sources`` names the code a mutation campaign (``python -m mutants run --target hf-llama``)
mutates: the family's modeling file and the mask functions of ``masking_utils`` the mask is made
with.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from transformers import (
    DynamicCache,
    GptOssConfig,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    Qwen3Config,
    masking_utils,
)
from transformers.models.gpt_oss import modeling_gpt_oss
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3

from attnspec.properties.hypothesis_helpers import randomize_
from attnspec.properties.targets import Layer, LayerSpec, Target


def hf_mask(
    tq: int,
    tk: int,
    window: int | None,
    dtype: torch.dtype,
    device,
    q_offset: int | None = None,
    kv_offset: int = 0,
) -> torch.Tensor:
    """Additive (tq, tk) mask made by transformers' own eager_mask from its mask functions: queries
    at positions q_offset.. (by default tk-tq..: bottom-right, as a KV cache puts them), keys at
    kv_offset.. (a sliding-window cache that dropped old keys starts later)."""
    if window is None:
        allowed_at = masking_utils.causal_mask_function
    else:
        allowed_at = masking_utils.sliding_window_causal_mask_function(window)
    mask = masking_utils.eager_mask(
        batch_size=1,
        q_length=tq,
        kv_length=tk,
        q_offset=tk - tq if q_offset is None else q_offset,
        kv_offset=kv_offset,
        mask_function=allowed_at,
        dtype=dtype,
        device=device,
    )
    return mask[0, 0]


def mask_sources(window: bool) -> str:
    """The functions of transformers.masking_utils that hf_mask runs for a family."""
    functions = ["causal_mask_function", "sdpa_mask", "eager_mask"]
    if window:
        functions += ["sliding_window_overlay", "sliding_window_causal_mask_function", "and_masks"]
    return "transformers.masking_utils:" + ",".join(functions)


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
        decoder = family.decoder(config, layer_idx=0)
        randomize_(decoder, spec.seed).to(spec.device, spec.dtype).eval()
        with torch.no_grad():  # the MLP adds exactly 0: the layer is x + attn(norm(x)), as the oracle's
            for name, parameter in decoder.mlp.named_parameters():
                if "down_proj" in name:
                    parameter.zero_()
        module = decoder.self_attn
        if hasattr(module, "sinks") and not spec.sinks:
            module.sinks.data.fill_(-math.inf)
        rotary = family.rotary(config).to(spec.device)

        def forward(x: torch.Tensor, offset: int) -> torch.Tensor:
            batch, seq, _ = x.shape
            positions = torch.arange(offset, offset + seq, device=x.device).expand(batch, seq)
            mask = hf_mask(seq, seq, spec.window, x.dtype, x.device)[None, None]
            return decoder(x, attention_mask=mask, position_embeddings=rotary(x, positions))

        def decode(x: torch.Tensor, chunks: list[int]) -> torch.Tensor:
            """Chunk by chunk through transformers' DynamicCache (a sliding-window layer's cache keeps
            only the last W-1 keys), with the mask sizes and key offset the cache reports."""
            # transformers 5.24's DynamicSlidingWindowLayer keeps every key when sliding_window == 1
            # (it keeps keys[-W+1:], which is keys[0:]) yet reports mask sizes for the W-1 = 0 keys
            # it should hold: in decode, such a layer attends to the whole past.  The kit found that;
            # a window of 1 decodes through the plain cache here (the mask still applies the window)
            # so that every other case stays checkable.  README: "Findings".
            cache = DynamicCache() if spec.window == 1 else DynamicCache(config=config)
            outputs, start = [], 0
            for size in chunks:
                piece = x[:, start : start + size]
                kv_length, kv_offset = cache.get_mask_sizes(size, 0)
                mask = hf_mask(size, kv_length, spec.window, x.dtype, x.device, start, kv_offset)[None, None]
                positions = torch.arange(start, start + size, device=x.device).expand(x.shape[0], size)
                embeddings = rotary(piece, positions)
                outputs.append(
                    decoder(piece, attention_mask=mask, position_embeddings=embeddings, cache=cache)
                )
                start += size
            return torch.cat(outputs, dim=1)

        projections = [module.q_proj, module.k_proj, module.v_proj, module.o_proj]
        return Layer(
            forward,
            *(p.weight for p in projections),
            *(p.bias for p in projections),
            sinks=module.sinks if spec.sinks else None,
            norm_weight=decoder.input_layernorm.weight,
            eps=config.rms_norm_eps,
            residual=True,
            decode=decode,
            **qk_norms(module),
        )

    def rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
        seq, head_dim = x.shape[-2:]
        config = family.config(LayerSpec(head_dim, 1, 1, head_dim, base=base))
        cos, sin = family.rotary(config).to(x.device)(x, positions[None])  # (1, T, ...)
        rows = x.reshape(-1, 1, seq, head_dim)  # (N, 1, T, d): every leading axis as a batch of one head
        return family.apply_rotary_pos_emb(rows, rows, cos, sin)[0].reshape(x.shape)

    core = {
        "weights",
        "gqa",
        "value_dim",
        "decode",
        "non_causal",
        "scale",
        "layer",
        "offset",
        "rope",
        "cache",
        "grad",
    }
    about = f"transformers {name} eager attention, attention module and rotary embedding"
    sources = (family.eager_attention_forward.__module__, mask_sources("window" in capabilities))
    return Target(name, attention, frozenset(core | capabilities), about, layer, rope, sources)


def qk_norms(module) -> dict:
    """The gains of the per-head RMSNorms of q and k, where the family has them (Qwen3)."""
    norms = {name: getattr(module, name, None) for name in ("q_norm", "k_norm")}
    return {name: norm.weight for name, norm in norms.items() if norm is not None}


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
        "attention_dropout": 0.1,  # on in training: eval mode must switch it off (F21)
    }


LLAMA = eager_target(
    "hf-llama",
    SimpleNamespace(
        eager_attention_forward=modeling_llama.eager_attention_forward,
        config=lambda spec: LlamaConfig(**sizes(spec)),
        decoder=modeling_llama.LlamaDecoderLayer,
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
        decoder=modeling_mistral.MistralDecoderLayer,
        rotary=modeling_mistral.MistralRotaryEmbedding,
        apply_rotary_pos_emb=modeling_mistral.apply_rotary_pos_emb,
    ),
    {"window"},
)
# Qwen2: biases on the q, k and v projections; a window on the layers the config's layer_types name
QWEN2 = eager_target(
    "hf-qwen2",
    SimpleNamespace(
        eager_attention_forward=modeling_qwen2.eager_attention_forward,
        config=lambda spec: Qwen2Config(
            **sizes(spec),
            use_sliding_window=spec.window is not None,
            sliding_window=spec.window,
            max_window_layers=0,
        ),
        decoder=modeling_qwen2.Qwen2DecoderLayer,
        rotary=modeling_qwen2.Qwen2RotaryEmbedding,
        apply_rotary_pos_emb=modeling_qwen2.apply_rotary_pos_emb,
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
        decoder=modeling_gpt_oss.GptOssDecoderLayer,
        rotary=modeling_gpt_oss.GptOssRotaryEmbedding,
        apply_rotary_pos_emb=modeling_gpt_oss.apply_rotary_pos_emb,
    ),
    {"window", "sinks"},
)
# Qwen3: each query and key head RMS-normalised over its features (q_norm, k_norm) before RoPE; a window
# on the layers the config's layer_types name
QWEN3 = eager_target(
    "hf-qwen3",
    SimpleNamespace(
        eager_attention_forward=modeling_qwen3.eager_attention_forward,
        config=lambda spec: Qwen3Config(
            **sizes(spec),
            use_sliding_window=spec.window is not None,
            sliding_window=spec.window,
            max_window_layers=0,
        ),
        decoder=modeling_qwen3.Qwen3DecoderLayer,
        rotary=modeling_qwen3.Qwen3RotaryEmbedding,
        apply_rotary_pos_emb=modeling_qwen3.apply_rotary_pos_emb,
    ),
    {"window"},
)
