"""Whole Hugging Face transformers models as model targets (optional: pip install transformers).

Each target is one family's ``*ForCausalLM`` (Llama; Mistral, a sliding window on every layer; Qwen2, a
window on some layers; Qwen3, the same with q/k norm; GptOss, alternating windowed and full layers,
with sinks; GPT-NeoX, partial rotary and a parallel residual; Gemma 2, soft-capping, sandwich norms and
alternating windows; BLOOM, ALiBi) or BERT's ``BertForMaskedLM``, a bidirectional encoder declared with
an all-visible mask_mod, built from a small config with random weights at the sizes people build (hidden
64, heads of 16, a vocabulary of 128, 3 layers: REALISTIC), nothing downloaded, eager
attention, in eval mode: tokens (B, T) -> logits (B, T, V), with the family's layer as the white box
where the kit has one. Every plumbing step between the model and its attention is the library's own:
the model builds its masks (``create_causal_mask``, ``create_sliding_window_causal_mask``,
``create_bidirectional_mask``, BLOOM's ALiBi from the padding mask) from the padding mask, its position
ids, its ``DynamicCache`` with its sliding-window layers.
What the kit adds is what a user's code or ``generate`` does:

- with a padding mask, the position ids ``generate`` makes (``_prepare_position_ids_for_generation``:
  real tokens counted from 0), so a left-padded sequence starts at position 0 (BLOOM takes none: its
  ALiBi counts from the mask; the encoder's are counted from the mask the same way);
- ``decode(tokens, chunks)``: the prompt, then chunks, through one ``DynamicCache(config=...)``; without a
  padding mask as a user's loop does it (``model(chunk, cache=cache)``: the model offsets the positions
  by what the cache holds), with one as ``generate`` does it (``prepare_inputs_for_generation`` and
  ``_update_model_kwargs_for_generation`` between chunks);
- ``hidden_states(tokens)``: each decoder layer's output (``output_hidden_states``), so that the kit
  places each declared window on its layer.

``sources`` names what a conformance campaign mutates: the family's modeling file, the
``masking_utils`` functions its masks are made with and, for a family with windows, what
``DynamicSlidingWindowLayer.update`` hands the attention of a chunk.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BloomConfig,
    BloomForCausalLM,
    DynamicCache,
    Gemma2Config,
    Gemma2ForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from attnspec.adapters import hf_eager
from attnspec.kit.strategies import randomize_
from attnspec.protocol.targets import Layer, LayerKind, LayerRun, Target
from attnspec.specs.mods import bidirectional

WINDOW = 3  # small: the properties' sequences wrap every windowed layer's cache
# The sizes people build a small model at, where float32's rounding is no longer hidden by tiny widths
# (hidden 16 and a vocabulary of 61 hid it: correct models at these sizes failed a fixed tolerance).
REALISTIC = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=64,
    tie_word_embeddings=False,
    attention_dropout=0.1,  # on in training: eval mode must switch it off (F21)
)
# configs whose default special tokens lie past a small vocabulary (SmolLM3's 128004) leave them unset
NO_SPECIAL_TOKENS = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
SIZES = REALISTIC  # every family is built at them


@dataclass(frozen=True)
class Family:
    name: str
    config: type
    model: type
    module: str  # the modeling file
    extra: dict  # the family's own settings (over SIZES)
    layer: Target | None  # the family's decoder layer (hf_eager): the model's white box, if the kit has one
    encoder: bool = False  # bidirectional: every token sees every other, no cache
    # each layer's kind as the config lays them out (LayerKind: mask and positions), where the family has
    # more than causal and windowed layers; None: its windows alone (windows_of)
    schedule: Callable[[object], tuple[LayerKind, ...]] | None = None
    sizes: dict = field(default_factory=lambda: SIZES)  # the sizes it is built at (its extra over them)
    wrapper: type | None = None  # an encoder's model target (MaskedLM by default, or a subclass of it)


FAMILIES = {
    "llama": Family(
        "Llama", LlamaConfig, LlamaForCausalLM, "transformers.models.llama.modeling_llama", {}, hf_eager.LLAMA
    ),
    "mistral": Family(
        "Mistral",
        MistralConfig,
        MistralForCausalLM,
        "transformers.models.mistral.modeling_mistral",
        {"sliding_window": WINDOW},
        hf_eager.MISTRAL,
    ),
    # windows on the layers from max_window_layers on, as Qwen2's config lays them out
    "qwen2": Family(
        "Qwen2",
        Qwen2Config,
        Qwen2ForCausalLM,
        "transformers.models.qwen2.modeling_qwen2",
        {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
        hf_eager.QWEN2,
    ),
    # q/k norm on every layer's heads, windows laid out as Qwen2's
    "qwen3": Family(
        "Qwen3",
        Qwen3Config,
        Qwen3ForCausalLM,
        "transformers.models.qwen3.modeling_qwen3",
        {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
        hf_eager.QWEN3,
    ),
    # windowed and full layers alternate (the config's default layer_types), sinks, a mixture of experts
    "gptoss": Family(
        "GptOss",
        GptOssConfig,
        GptOssForCausalLM,
        "transformers.models.gpt_oss.modeling_gpt_oss",
        # RoPE without its shipped YaRN scaling (which rescales the angles and cos/sin: no RoPE of the
        # kit's), at its base, so that its own layers are the white box's (MOD-13)
        {
            "sliding_window": WINDOW,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 150000.0},
        },
        hf_eager.GPTOSS,
    ),
    # rotary on a quarter of each head (the config's default partial_rotary_factor 0.25), attention and
    # MLP in parallel from the same input (use_parallel_residual), a fused query_key_value projection,
    # LayerNorm; heads of 16 features, whose rotated quarter is two pairs
    "gptneox": Family(
        "GPTNeoX",
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        "transformers.models.gpt_neox.modeling_gpt_neox",
        {},
        hf_eager.GPTNEOX,
    ),
    # soft-capped attention logits (attn_logit_softcapping 50) and final logits (30), windowed and full
    # layers alternating (the config's default layer_types), sandwich norms (RMSNorm before and after
    # attention and MLP), the scale from query_pre_attn_scalar, embeddings times sqrt(hidden_size)
    "gemma2": Family(
        "Gemma2",
        Gemma2Config,
        Gemma2ForCausalLM,
        "transformers.models.gemma2.modeling_gemma2",
        {"sliding_window": WINDOW},
        hf_eager.GEMMA2,
    ),
    # ALiBi: no positions added, a per-head linear bias on the scores, counted from each sequence's
    # first real token (build_alibi_tensor reads the padding mask)
    "bloom": Family(
        "Bloom", BloomConfig, BloomForCausalLM, "transformers.models.bloom.modeling_bloom", {}, hf_eager.BLOOM
    ),
    # a bidirectional encoder: absolute learned positions, post-norm layers, a masked-LM head
    "bert": Family(
        "Bert",
        BertConfig,
        BertForMaskedLM,
        "transformers.models.bert.modeling_bert",
        {},
        hf_eager.BERT,
        encoder=True,
    ),
}


def build(family: Family, seed: int = 0) -> nn.Module:
    config = family.config(**{**family.sizes, **family.extra})
    config._attn_implementation = "eager"
    return randomize_(family.model(config), seed).eval()  # every parameter drawn from the seed


def windows_of(config) -> tuple[int | None, ...]:
    """Each layer's window as the config lays them out (None: full attention)."""
    types = getattr(config, "layer_types", None)
    if types is None:  # every layer alike: Llama's full attention, Mistral's sliding window
        return (
            config.sliding_window if getattr(config, "sliding_window", None) else None,
        ) * config.num_hidden_layers
    return tuple(config.sliding_window if kind == "sliding_attention" else None for kind in types)


class CausalLM(nn.Module):
    """A *ForCausalLM as a model target: tokens -> logits, decode and hidden states (module docstring);
    with ``parts`` (its family's white box, hf_eager.PARTS), its own attention layers as it runs them."""

    def __init__(self, model: nn.Module, parts=None) -> None:
        super().__init__()
        self.model = model
        self.parts = parts
        self.vocab_size = model.config.vocab_size
        self.windows = windows_of(model.config)
        # ALiBi (BLOOM) takes no position ids: its bias counts from the padding mask
        self.takes_positions = "position_ids" in inspect.signature(model.forward).parameters

    def positions(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        if not self.takes_positions:
            return {}
        ids = self.model._prepare_position_ids_for_generation(tokens, {"attention_mask": attention_mask})
        return {"position_ids": ids}

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            return self.model(input_ids=tokens, use_cache=False).logits
        positions = self.positions(tokens, attention_mask)
        return self.model(
            input_ids=tokens, attention_mask=attention_mask, use_cache=False, **positions
        ).logits

    def hidden_states(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        states = self.model(input_ids=tokens, use_cache=False, output_hidden_states=True).hidden_states
        return list(states[1:])  # the embeddings first, then each decoder layer's output

    def layer_runs(self, tokens: torch.Tensor) -> list[LayerRun]:
        """Each decoder layer's attention module as the model's forward runs it (own_layer_runs)."""
        return own_layer_runs(self.model, self.parts, lambda: self.model(input_ids=tokens, use_cache=False))

    def decode(self, tokens: torch.Tensor, chunks: list[int], attention_mask: torch.Tensor | None = None):
        cache = DynamicCache(config=self.model.config)
        outputs, start = [], 0
        if attention_mask is None:  # a user's loop: the model offsets positions by the cache's length
            for size in chunks:
                piece = tokens[:, start : start + size]
                outputs.append(self.model(input_ids=piece, cache=cache, use_cache=True).logits)
                start += size
            return torch.cat(outputs, dim=1)
        first = chunks[0]
        kwargs = {"attention_mask": attention_mask[:, :first], "cache": cache, "use_cache": True}
        kwargs.update(self.positions(tokens[:, :first], kwargs["attention_mask"]))
        result = None
        for i, size in enumerate(chunks):
            end = start + size
            if i:  # as generate does between steps, for a step of `size` tokens
                kwargs = self.model._update_model_kwargs_for_generation(result, kwargs, num_new_tokens=size)
            inputs = self.model.prepare_inputs_for_generation(
                tokens[:, :end], next_sequence_length=size, is_first_iteration=i == 0, **kwargs
            )
            result = self.model(**inputs)
            outputs.append(result.logits)
            start = end
        return torch.cat(outputs, dim=1)


def own_layer_runs(model: nn.Module, parts, run: Callable[[], object]) -> list[LayerRun]:
    """Each layer's attention module of ``model`` as ``run`` (a call of the model) runs it: its input (the
    normed hidden state), its output (before the residual and any norm after it), the mask and rotary
    table the model hands it, and what it reports (its family's white box, ``parts`` of hf_eager.PARTS,
    around-the-attention parts left out); its RoPE base the config's for the layer's type."""
    # the library's layer class (a white box may build a subclass of it)
    library = next(c for c in parts.decoder.__mro__ if c.__module__.startswith("transformers."))
    layers = [part for part in model.modules() if isinstance(part, library)]
    name = getattr(parts, "attention_name", "self_attn")
    captured: list[tuple[torch.Tensor, torch.Tensor]] = []

    def capture(module, args, kwargs, output) -> None:
        x = args[0] if args else kwargs["hidden_states"]
        captured.append((x, output[0] if isinstance(output, tuple) else output))

    hooks = [getattr(layer, name).register_forward_hook(capture, with_kwargs=True) for layer in layers]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    config, runs = model.config, []
    for layer, (x, out) in zip(layers, captured, strict=True):
        module = getattr(layer, name)
        report = hf_eager.attention_report(layer, module, config, parts)
        head_dim = getattr(module, "head_dim", None) or module.head_size
        sizes = (report["wq"].shape[0] // head_dim, report["wk"].shape[0] // head_dim, head_dim)
        runs.append(LayerRun(x, out, Layer(None, **report), *sizes, rope_base(config, layer)))
    return runs


def rope_base(config, decoder) -> float:
    """The RoPE base of a decoder layer: the config's, or the one of the layer's type where each type has
    its own (Gemma 3's sliding and full layers)."""
    parameters = getattr(config, "rope_parameters", None) or {}
    if "rope_theta" not in parameters:
        parameters = parameters.get(getattr(decoder, "attention_type", None), {})
    return float(parameters.get("rope_theta", 10000.0))


class MaskedLM(nn.Module):
    """A masked-LM encoder as a model target: tokens -> logits, every token seeing every other.  With a
    padding mask, each sequence's positions count from its own first real token, as a user who
    left-pads an encoder with absolute positions must give them (right padding needs nothing)."""

    def __init__(self, model: nn.Module, parts=None) -> None:
        super().__init__()
        self.model = model
        self.vocab_size = model.config.vocab_size
        self.parts = parts

    def layer_runs(self, tokens: torch.Tensor) -> list[LayerRun]:
        """Each encoder layer's attention module as the model's forward runs it (own_layer_runs)."""
        return own_layer_runs(self.model, self.parts, lambda: self(tokens))

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            return self.model(input_ids=tokens).logits
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return self.model(input_ids=tokens, attention_mask=attention_mask, position_ids=position_ids).logits


LAYER_CAPABILITIES = {"layer", "window", "gqa", "sinks", "offset", "cache"}
# what a windowed layer's cache hands its attention: mutated on the families with windows
SLIDING_CACHE = "transformers.cache_utils:DynamicSlidingWindowLayer.update"


def model_target(key: str | Family, name: str | None = None) -> Target:
    """The family's causal LM (``key`` into FAMILIES, or a Family of src/attnspec/adapters/families/), with
    its decoder layer as its white box where the kit has one (what a black box cannot see: a scale,
    GQA's grouping, RoPE on the values); an encoder's masked LM, declared bidirectional."""
    family = FAMILIES[key] if isinstance(key, str) else key
    name = name or f"hf-{key if isinstance(key, str) else family.name.lower()}-model"
    sources: tuple[str, ...] = (family.module, "transformers.masking_utils")
    about = f"transformers' {family.model.__name__}, a small random config (hidden 64, vocabulary 128)"
    white_box = family.layer.capabilities & LAYER_CAPABILITIES if family.layer else frozenset()
    # the white box's sizes, declared mods (Gemma 2's soft-capping, BLOOM's ALiBi) and conventions (Cohere's
    # interleaved RoPE pairs) are the model's
    shared = ("layer", "head_dims", "tied_width", "heads", "kv_heads", "rope_base", "score_mod")
    shared += ("conventions",)
    layer = {} if family.layer is None else {field: getattr(family.layer, field) for field in shared}
    parts = hf_eager.PARTS.get(family.layer.name) if family.layer is not None else None
    runs = frozenset({"layer_runs"}) if parts is not None else frozenset()
    if family.encoder:
        lm = (family.wrapper or MaskedLM)(build(family), parts)
        return Target(
            name,
            None,
            frozenset({"module", "padding"}) | white_box | runs,
            about,
            sources=sources,
            module=lm,
            layer_runs=lm.layer_runs if parts is not None else None,
            vocab_size=lm.vocab_size,
            mask_mod=bidirectional,
            # an encoder with more than one kind of layer (ModernBERT's local and global layers)
            schedule=family.schedule(lm.model.config) if family.schedule else (),
            **layer,
        )
    lm = CausalLM(build(family), parts)
    if any(window is not None for window in lm.windows):
        sources += (SLIDING_CACHE,)
    schedule = family.schedule(lm.model.config) if family.schedule else ()
    return Target(
        name,
        None,
        # not "float64": eager attention takes its softmax in float32 whatever the dtype (and in float64,
        # where finfo.min turns -inf in float32, a left pad's row of scores is NaN: README, "Findings")
        frozenset({"module", "chunks", "padding", "hidden_states"}) | white_box | runs,
        about,
        sources=sources,
        module=lm,
        layer_runs=lm.layer_runs if parts is not None else None,
        windows=() if schedule else lm.windows,  # the schedule says it all (a chunk is no window)
        schedule=schedule,
        decode=lm.decode,
        vocab_size=lm.vocab_size,
        hidden_states=lm.hidden_states,
        # GptOss's experts multiply the tokens routed to each expert together: one token's logits move
        # in the last bits when another token changes its route
        rows_round_together=key == "gptoss",
        **layer,
    )


# The targets by the names ADAPTERS gives them, each built when first asked for (PEP 562): loading one
# model does not build the others.
BUILT_ON_USE = {
    "LLAMA": ("llama", None),
    "MISTRAL": ("mistral", None),
    "QWEN2": ("qwen2", None),
    "QWEN3": ("qwen3", None),
    "GPTOSS": ("gptoss", None),
    "GPTNEOX": ("gptneox", "hf-gptneox"),
    "GEMMA2": ("gemma2", "hf-gemma2"),
    "BLOOM": ("bloom", None),
    "BERT": ("bert", None),
}


def __getattr__(name: str) -> Target:
    if name not in BUILT_ON_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    target = globals()[name] = model_target(*BUILT_ON_USE[name])
    return target
