"""Hugging Face transformers' eager attention (optional: pip install transformers).

Each target runs the ``eager_attention_forward`` of one model family (Llama; Mistral, whose layers use
a sliding window; Qwen2, with biases on q, k and v and a sliding window; Qwen3, whose heads are RMS-
normalised (q_norm, k_norm) before RoPE, with a sliding window; GptOss, with sinks and a sliding
window; Gemma 2, soft-capped, with its own scale and a sandwich norm; GPT-NeoX, rotary on a quarter of
each head, a per-head fused projection, no GQA), and, for the layer properties, that family's decoder
layer (LlamaDecoderLayer, ...: the input norm, the attention module with its projections, RoPE from the
family's rotary embedding and output projection, the residual, then the MLP sublayer with its output
projection zeroed, so that it adds exactly 0) built from a tiny config with random weights, nothing
downloaded, which also decodes chunk by chunk through transformers' DynamicCache ("cache"), and for the
RoPE properties the family's rotary embedding and apply_rotary_pos_emb (angles in float32, as
transformers builds them).  The attention gets the mask that transformers' ``eager_mask`` makes from
its own mask functions (``causal_mask_function``, ``sliding_window_causal_mask_function``) at absolute
positions: query i at Tk - Tq + i, where a KV cache puts it.  Masked scores get the dtype's lowest
value, so a query that sees no key at all (Tq > Tk) is not defined here: no "blind" capability.  The
eager path scores fp16 in fp16.  ``BERT`` and ``BLOOM`` are white boxes only, for the whole models of
hf_models: BertAttention (post-norm, every token seeing every other) and BloomBlock (ALiBi, declared as
the score_mod).

``sources`` names the code a mutation campaign (``python -m campaigns run --target hf-llama``)
mutates: the family's modeling file and the mask functions of ``masking_utils`` the mask is made
with.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from transformers import (
    BertConfig,
    BloomConfig,
    DynamicCache,
    Gemma2Config,
    GPTNeoXConfig,
    GptOssConfig,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    Qwen3Config,
    masking_utils,
)
from transformers.models.bert import modeling_bert
from transformers.models.bloom import modeling_bloom
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.gpt_neox import modeling_gpt_neox
from transformers.models.gpt_oss import modeling_gpt_oss
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3

from attnspec.kit.strategies import randomize_
from attnspec.protocol.layouts import per_head_fused_projections, pre_norm
from attnspec.protocol.targets import Layer, LayerKind, LayerSpec, Target
from attnspec.specs.mods import alibi, alibi_slopes, bidirectional, soft_cap


def mask_function(window: int | None, kind: LayerKind | None = None):
    """transformers' own mask function of a layer: causal or a sliding window (``window``), or the mask of
    ``kind`` (chunked, bidirectional, a bidirectional local window)."""
    mask = kind.mask if kind is not None else "causal"
    if mask in ("causal", "window"):
        if window is None:
            return masking_utils.causal_mask_function
        return masking_utils.sliding_window_causal_mask_function(window)
    if mask == "chunk":
        return masking_utils.chunked_causal_mask_function(kind.size, torch.zeros(1, dtype=torch.long))
    if mask == "local":
        return masking_utils.sliding_window_bidirectional_mask_function(kind.size)
    return masking_utils.bidirectional_mask_function


def hf_mask(
    tq: int,
    tk: int,
    window: int | None,
    dtype: torch.dtype,
    device,
    q_offset: int | None = None,
    kv_offset: int = 0,
    kind: LayerKind | None = None,
) -> torch.Tensor:
    """Additive (tq, tk) mask made by transformers' own eager_mask from its mask functions: queries
    at positions q_offset.. (by default tk-tq..: bottom-right, as a KV cache puts them), keys at
    kv_offset.. (a sliding-window cache that dropped old keys starts later); causal, windowed or the
    mask of a layer ``kind`` (mask_function)."""
    allowed_at = mask_function(window, kind)
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


def mask_sources(window: bool, kinds: tuple[str, ...] = ()) -> str:
    """The functions of transformers.masking_utils that hf_mask runs for a family (``kinds``: the masks
    of the layer kinds it builds beside causal and windowed ones)."""
    functions = ["causal_mask_function", "sdpa_mask", "eager_mask"]
    if window or kinds:
        functions += ["and_masks"]
    if window:
        functions += ["sliding_window_overlay", "sliding_window_causal_mask_function"]
    if "chunk" in kinds:
        functions += ["chunked_overlay", "chunked_causal_mask_function"]
    if "local" in kinds:
        functions += ["sliding_window_bidirectional_overlay", "sliding_window_bidirectional_mask_function"]
    if "local" in kinds or "bidirectional" in kinds:
        functions += ["bidirectional_mask_function"]
    return "transformers.masking_utils:" + ",".join(functions)


# Each family's white box as eager_target was given it, by its target's name: how the family's decoder
# layer is built and reported, which the whole model's adapter reads to report the model's own attention
# layers the same way (hf_models.CausalLM.layer_runs).
PARTS: dict[str, SimpleNamespace] = {}
# What a decoder layer reports around its attention module: the module alone takes the normed input and
# returns its output before any residual or norm after it.
AROUND_THE_ATTENTION = ("norm_weight", "norm_bias", "norm", "post_norm", "norm_at", "residual")


def attention_report(decoder, module, config, family) -> dict:
    """What one attention module of a decoder layer of ``family`` reports (the Layer fields of its
    white box, the norms and residual around the module left out), its sinks where it has them."""
    parts = getattr(family, "reported", llama_parts)(decoder, module, config)
    report = {name: value for name, value in parts.items() if name not in AROUND_THE_ATTENTION}
    return report | ({"sinks": module.sinks} if hasattr(module, "sinks") else {})


def eager_target(name: str, family, capabilities: set[str], without: frozenset[str] = frozenset()) -> Target:
    """The eager attention core and the attention module of one transformers model family (``without``:
    core capabilities the family lacks, GQA for GPT-NeoX).  A family that soft-caps its logits
    (``family.softcap``) declares it as its score_mod, and its core applies it."""
    softcap = getattr(family, "softcap", None)
    capped = {} if softcap is None else {"softcap": softcap}
    PARTS[name] = family

    def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
        module = SimpleNamespace(num_key_value_groups=q.shape[1] // k.shape[1], training=False)
        if "sinks" in capabilities:  # GptOss always has sinks; -inf sinks are none
            module.sinks = sinks if sinks is not None else q.new_full((q.shape[1],), -math.inf)
        mask = hf_mask(q.shape[2], k.shape[2], window, q.dtype, q.device) if causal else None
        scaling = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        out, weights = family.eager_attention_forward(module, q, k, v, mask, scaling=scaling, **capped)
        out = out.transpose(1, 2)  # eager returns (B, T, H, dv)
        return (out, weights) if return_weights else out

    def layer(spec: LayerSpec) -> Layer:
        config = family.config(spec)
        config._attn_implementation = "eager"
        decoder = family.decoder(config, layer_idx=0)
        randomize_(decoder, spec).to(spec.device, spec.dtype).eval()
        silence = getattr(family, "silence", ("down_proj",))
        with torch.no_grad():  # the MLP adds exactly 0: the layer is x + attn(norm(x)), as the oracle's
            for name, parameter in getattr(decoder, getattr(family, "mlp_name", "mlp")).named_parameters():
                if any(part in name for part in silence):
                    parameter.zero_()
        module = getattr(decoder, getattr(family, "attention_name", "self_attn"))
        if hasattr(module, "sinks") and not spec.sinks:
            module.sinks.data.fill_(-math.inf)
        rotary = family.rotary(config).to(spec.device)
        cache_keyword = getattr(family, "cache_keyword", "cache")

        def forward(x: torch.Tensor, offset: int) -> torch.Tensor:
            batch, seq, _ = x.shape
            positions = torch.arange(offset, offset + seq, device=x.device).expand(batch, seq)
            mask = hf_mask(seq, seq, spec.window, x.dtype, x.device, offset, offset, spec.kind)
            return decoder(x, attention_mask=mask[None, None], position_embeddings=rotary(x, positions))

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
                mask = hf_mask(size, kv_length, spec.window, x.dtype, x.device, start, kv_offset, spec.kind)
                mask = mask[None, None]
                positions = torch.arange(start, start + size, device=x.device).expand(x.shape[0], size)
                embeddings = rotary(piece, positions)
                kwargs = {cache_keyword: cache}
                outputs.append(decoder(piece, attention_mask=mask, position_embeddings=embeddings, **kwargs))
                start += size
            return torch.cat(outputs, dim=1)

        parts = getattr(family, "reported", llama_parts)(decoder, module, config)
        return Layer(
            forward, sinks=module.sinks if spec.sinks else None, residual=True, decode=decode, **parts
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
    return Target(
        name,
        attention,
        frozenset((core - without) | capabilities),
        about,
        layer,
        rope,
        sources,
        head_dims=getattr(family, "head_dims", ()),
        tied_width=getattr(family, "tied_width", False),
        score_mod=None if softcap is None else soft_cap(softcap),
        rotary_pct=getattr(family, "rotary_pct", None),
    )


def llama_parts(decoder, module, config) -> dict:
    """What a Llama-style decoder layer reports: q, k, v, o projections (with their biases, where they
    have them), the input RMSNorm, and each head's q/k norm where the family has one (Qwen3)."""
    projections = [module.q_proj, module.k_proj, module.v_proj, module.o_proj]
    names = ("wq", "wk", "wv", "wo")
    parts = {name: p.weight for name, p in zip(names, projections, strict=True)}
    parts |= {"b" + name[1:]: p.bias for name, p in zip(names, projections, strict=True)}
    return (
        parts | {"norm_weight": decoder.input_layernorm.weight, "eps": config.rms_norm_eps} | qk_norms(module)
    )


def gemma2_parts(decoder, module, config) -> dict:
    """Gemma 2's layer: Llama's projections, RMSNorms that multiply by 1 + weight (the gain is 1 +
    weight), the sandwich norm after attention, and the scale query_pre_attn_scalar ** -0.5."""
    parts = llama_parts(decoder, module, config)
    parts["norm_weight"] = 1.0 + decoder.input_layernorm.weight
    parts["post_norm"] = 1.0 + decoder.post_attention_layernorm.weight
    return parts | {"scale": config.query_pre_attn_scalar**-0.5}  # the config's: not what the code made of it


def neox_parts(decoder, module, config) -> dict:
    """GPT-NeoX's layer: one query_key_value projection whose rows hold, head by head, that head's q,
    k and v (d rows each); the input LayerNorm; RoPE on the first rotary_ndims features of each head."""
    heads = config.num_attention_heads
    parts = per_head_fused_projections(module.query_key_value, module.dense, heads)
    # the config's quarter, not the module's rotary_ndims: the white box reports what should be
    rotary_dim = int(config.hidden_size // heads * config.rope_parameters["partial_rotary_factor"])
    return parts | pre_norm(decoder.input_layernorm) | {"rotary_dim": rotary_dim}


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
# Gemma 2: logits soft-capped at attn_logit_softcapping (50, its default), the scale from
# query_pre_attn_scalar (256, its default, whatever the head size), RMSNorms of gain 1 + weight, a
# sandwich norm after the attention, a window on the layers the config's layer_types name
GEMMA2 = eager_target(
    "hf-gemma2",
    SimpleNamespace(
        eager_attention_forward=modeling_gemma2.eager_attention_forward,
        config=lambda spec: Gemma2Config(
            **sizes(spec),
            sliding_window=spec.window or 1,
            layer_types=["full_attention" if spec.window is None else "sliding_attention"],
        ),
        decoder=modeling_gemma2.Gemma2DecoderLayer,
        rotary=modeling_gemma2.Gemma2RotaryEmbedding,
        apply_rotary_pos_emb=modeling_gemma2.apply_rotary_pos_emb,
        reported=gemma2_parts,
        softcap=Gemma2Config().attn_logit_softcapping,
    ),
    {"window"},
)


def neox_config(spec: LayerSpec) -> GPTNeoXConfig:
    """GPT-NeoX with its shipped partial rotary (rotary_pct 0.25): heads of Hq * d features, no GQA."""
    fields = sizes(spec) | {"use_parallel_residual": True}
    for name in ("num_key_value_heads", "head_dim"):  # NeoX has neither: d = hidden_size / heads
        fields.pop(name)
    fields["rope_parameters"] = fields["rope_parameters"] | {"partial_rotary_factor": 0.25}
    return GPTNeoXConfig(**fields)


# GPT-NeoX: a per-head fused query_key_value, LayerNorm, attention and MLP in parallel from the same
# input (use_parallel_residual), RoPE on the first quarter of each head (heads of 8 or 16 features,
# so that the quarter is whole pairs), the cache handed over as layer_past
GPTNEOX = eager_target(
    "hf-gptneox",
    SimpleNamespace(
        eager_attention_forward=modeling_gpt_neox.eager_attention_forward,
        config=neox_config,
        decoder=modeling_gpt_neox.GPTNeoXLayer,
        rotary=modeling_gpt_neox.GPTNeoXRotaryEmbedding,
        apply_rotary_pos_emb=modeling_gpt_neox.apply_rotary_pos_emb,
        reported=neox_parts,
        silence=("dense_4h_to_h",),
        attention_name="attention",
        cache_keyword="layer_past",
        head_dims=(8, 16),
        tied_width=True,
        rotary_pct=0.25,
    ),
    set(),
    without=frozenset({"gqa"}),
)


def bert_layer(
    spec: LayerSpec, config_class=BertConfig, attention_class=modeling_bert.BertAttention
) -> Layer:
    """BERT's attention sublayer (BertAttention: self-attention, then BertSelfOutput's
    LayerNorm(x + dense(attn))): post-norm, biases everywhere, no positions (they are added to the
    embeddings), every token seeing every other.  A family that ships BERT's sublayer as its own
    (RoBERTa's RobertaAttention) passes its config and attention classes."""
    config = config_class(
        hidden_size=spec.d_model,
        num_attention_heads=spec.n_heads,
        num_hidden_layers=1,
        intermediate_size=1,
        vocab_size=1,
        attention_probs_dropout_prob=0.1,  # on in training: eval mode must switch it off (F21)
        hidden_dropout_prob=0.1,
    )
    config._attn_implementation = "eager"
    module = randomize_(attention_class(config), spec).to(spec.device, spec.dtype).eval()

    def forward(x: torch.Tensor, offset: int) -> torch.Tensor:
        return module(x)[0]

    attention, output = module.self, module.output
    return Layer(
        forward,
        attention.query.weight,
        attention.key.weight,
        attention.value.weight,
        output.dense.weight,
        attention.query.bias,
        attention.key.bias,
        attention.value.bias,
        output.dense.bias,
        norm="layer",
        norm_weight=output.LayerNorm.weight,
        norm_bias=output.LayerNorm.bias,
        eps=output.LayerNorm.eps,
        residual=True,
        rope=False,
        norm_at="post",
    )


# BERT's attention sublayer as the white box of the encoder model (hf_models): declared bidirectional
BERT = Target(
    "hf-bert",
    None,
    frozenset({"layer"}),
    "transformers BertAttention (self-attention and its post-norm output)",
    bert_layer,
    sources=("transformers.models.bert.modeling_bert",),
    tied_width=True,
    mask_mod=bidirectional,
)


BLOOM_HEADS = 4  # ALiBi's slopes depend on the head count: the white box is built with the model's


def bloom_layer(spec: LayerSpec) -> Layer:
    """BLOOM's block (BloomBlock: input LayerNorm, attention with ALiBi over a per-head fused
    query_key_value, the residual added inside the attention, then the MLP, its dense_4h_to_h zeroed
    so that it adds exactly 0).  ALiBi is the declared score_mod; the block is given the bias
    build_alibi_tensor makes from a mask of ones, and the causal mask eager_mask makes."""
    config = BloomConfig(
        hidden_size=spec.d_model,
        n_head=spec.n_heads,
        n_layer=1,
        vocab_size=1,
        bos_token_id=None,
        eos_token_id=None,
        attention_dropout=0.1,  # on in training: eval mode must switch it off (F21)
        hidden_dropout=0.1,
    )
    config._attn_implementation = "eager"
    block = randomize_(modeling_bloom.BloomBlock(config, layer_idx=0), spec).to(spec.device, spec.dtype)
    block.eval()
    with torch.no_grad():
        block.mlp.dense_4h_to_h.weight.zero_()
        block.mlp.dense_4h_to_h.bias.zero_()

    def forward(x: torch.Tensor, offset: int) -> torch.Tensor:
        batch, seq, _ = x.shape
        ones = torch.ones(batch, seq, dtype=torch.long, device=x.device)
        bias = modeling_bloom.build_alibi_tensor(ones, spec.n_heads, x.dtype)
        mask = hf_mask(seq, seq, None, x.dtype, x.device)[None, None]
        out = block(x, bias, mask)
        return out[0] if isinstance(out, tuple) else out  # (hidden states, attention weights)

    attention = block.self_attention
    parts = per_head_fused_projections(attention.query_key_value, attention.dense, spec.n_heads)
    return Layer(forward, **parts, **pre_norm(block.input_layernorm), residual=True, rope=False)


# BLOOM's block as the white box of its model (hf_models): ALiBi declared for the model's 4 heads
BLOOM = Target(
    "hf-bloom",
    None,
    frozenset({"layer"}),
    "transformers BloomBlock (ALiBi attention, its residual, the MLP silenced)",
    bloom_layer,
    sources=("transformers.models.bloom.modeling_bloom",),
    tied_width=True,
    heads=(BLOOM_HEADS,),
    score_mod=alibi(alibi_slopes(BLOOM_HEADS)),
)
