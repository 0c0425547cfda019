"""Whole Hugging Face transformers causal LMs as model targets (optional: pip install transformers).

Each target is one family's ``*ForCausalLM`` (Llama; Mistral, a sliding window on every layer; Qwen2, a
window on some layers; Qwen3, the same with q/k norm; GptOss, alternating windowed and full layers,
with sinks) built from a tiny config with random weights, nothing downloaded, eager attention, in eval
mode: tokens (B, T) -> logits (B, T, V). Every plumbing step between the model and its attention is the
library's own: the model builds its masks (``create_causal_mask``,
``create_sliding_window_causal_mask``) from the padding mask, its position ids, its ``DynamicCache``
with its sliding-window layers. What the kit adds is what a user's code or ``generate`` does:

- with a padding mask, the position ids ``generate`` makes (``_prepare_position_ids_for_generation``:
  real tokens counted from 0), so a left-padded sequence starts at position 0;
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

from dataclasses import dataclass

import torch
from torch import nn
from transformers import (
    DynamicCache,
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

from attnspec.properties.adapters import hf_eager
from attnspec.properties.hypothesis_helpers import randomize_
from attnspec.properties.targets import Target

WINDOW = 3  # small: the properties' sequences wrap every windowed layer's cache
SIZES = dict(
    vocab_size=61,
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=4,
    max_position_embeddings=64,
    tie_word_embeddings=False,
    attention_dropout=0.1,  # on in training: eval mode must switch it off (F21)
)


@dataclass(frozen=True)
class Family:
    name: str
    config: type
    model: type
    module: str  # the modeling file
    extra: dict  # the family's own settings
    layer: Target  # the family's decoder layer (hf_eager): the model's white box


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
        {"sliding_window": WINDOW, "num_local_experts": 4, "num_experts_per_tok": 2},
        hf_eager.GPTOSS,
    ),
}


def build(family: Family, seed: int = 0) -> nn.Module:
    config = family.config(**SIZES, **family.extra)
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
    """A *ForCausalLM as a model target: tokens -> logits, decode and hidden states (module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.vocab_size = model.config.vocab_size
        self.windows = windows_of(model.config)

    def positions(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model._prepare_position_ids_for_generation(tokens, {"attention_mask": attention_mask})

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            return self.model(input_ids=tokens, use_cache=False).logits
        position_ids = self.positions(tokens, attention_mask)
        return self.model(
            input_ids=tokens, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).logits

    def hidden_states(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        states = self.model(input_ids=tokens, use_cache=False, output_hidden_states=True).hidden_states
        return list(states[1:])  # the embeddings first, then each decoder layer's output

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
        kwargs["position_ids"] = self.positions(tokens[:, :first], kwargs["attention_mask"])
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


LAYER_CAPABILITIES = {"layer", "window", "gqa", "sinks", "offset", "cache"}
# what a windowed layer's cache hands its attention: mutated on the families with windows
SLIDING_CACHE = "transformers.cache_utils:DynamicSlidingWindowLayer.update"


def model_target(key: str) -> Target:
    """The family's causal LM, with its decoder layer as its white box (what a black box cannot see: a
    scale, GQA's grouping, RoPE on the values)."""
    family = FAMILIES[key]
    lm = CausalLM(build(family))
    sources: tuple[str, ...] = (family.module, "transformers.masking_utils")
    if any(window is not None for window in lm.windows):
        sources += (SLIDING_CACHE,)
    return Target(
        f"hf-{key}-model",
        None,
        # not "float64": eager attention takes its softmax in float32 whatever the dtype (and in float64,
        # where finfo.min turns -inf in float32, a left pad's row of scores is NaN: README, "Findings")
        frozenset({"module", "chunks", "padding", "hidden_states"})
        | (family.layer.capabilities & LAYER_CAPABILITIES),
        f"transformers' {family.name}ForCausalLM, a tiny random config",
        layer=family.layer.layer,
        sources=sources,
        module=lm,
        windows=lm.windows,
        decode=lm.decode,
        vocab_size=lm.vocab_size,
        hidden_states=lm.hidden_states,
        # GptOss's experts multiply the tokens routed to each expert together: one token's logits move
        # in the last bits when another token changes its route
        rows_round_together=key == "gptoss",
    )


LLAMA = model_target("llama")
MISTRAL = model_target("mistral")
QWEN2 = model_target("qwen2")
QWEN3 = model_target("qwen3")
GPTOSS = model_target("gptoss")
