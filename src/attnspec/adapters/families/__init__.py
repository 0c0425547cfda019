"""Public model families as built-in adapters, one module per family (optional: pip install transformers).

Each module builds, from transformers' own classes and a small random config at the sizes people build
(hf_models.REALISTIC), the family's decoder layer as a white box (hf_eager.eager_target, or a layer of
its own) and its whole model as a model target (hf_models.model_target of a Family), each with the
declarations the family needs (its schedule of layers, its q/k norm, its rotary, its fixed sizes, its
score_mod); ``LAYER`` and ``MODEL`` are built when first asked for (PEP 562), as targets.ADAPTERS names
them.  The first families (Llama, Mistral, Qwen2/3, GptOss, GPT-NeoX, Gemma 2, BLOOM, BERT) live in
hf_eager.py and hf_models.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace


def built_on_use(module_name: str, builders: dict[str, Callable[[], object]]) -> Callable[[str], object]:
    """A family module's ``__getattr__`` (PEP 562): each of its ``builders``' targets built when first
    asked for, and kept in the module, so that loading one target builds no other."""
    module = sys.modules[module_name]

    def __getattr__(name: str) -> object:
        if name not in builders:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = builders[name]()
        setattr(module, name, value)
        return value

    return __getattr__


def with_white_box(family, module_name: str, name: str, layer: str = "LAYER") -> Callable[[], object]:
    """The builder of ``family``'s whole model (hf_models.model_target), its module's ``layer`` target its
    white box."""

    def build() -> object:
        from attnspec.adapters import hf_models

        white_box = getattr(sys.modules[module_name], layer)
        return hf_models.model_target(replace(family, layer=white_box), name)

    return build


def inside_model(model, sublayer, config, cache_keyword: str = "cache"):
    """The ``forward(x, offset)`` and ``decode(x, chunks)`` of a Layer whose white box is ``sublayer`` of a
    one-layer ``model`` fed ``inputs_embeds``: its output taken by a forward hook (before the model's final
    norm), so that the masks and biases reach it as the model composes them; decoding goes chunk by chunk
    through the model's own DynamicCache (``config``'s), passed as ``cache_keyword``."""
    import torch
    from transformers import DynamicCache

    outputs: list[torch.Tensor] = []
    sublayer.register_forward_hook(lambda module, args, out: outputs.append(out[0]))

    def forward(x: torch.Tensor, offset: int) -> torch.Tensor:
        outputs.clear()
        model(inputs_embeds=x, use_cache=False)
        return outputs[-1]

    def decode(x: torch.Tensor, chunks: list[int]) -> torch.Tensor:
        cache, start, pieces = DynamicCache(config=config), 0, []
        for size in chunks:
            outputs.clear()
            model(inputs_embeds=x[:, start : start + size], use_cache=True, **{cache_keyword: cache})
            pieces.append(outputs[-1])
            start += size
        return torch.cat(pieces, dim=1)

    return forward, decode
