"""Hugging Face transformers' eager attention cores (optional: pip install transformers).

Each target runs the ``eager_attention_forward`` of one model family (Llama; Mistral, whose
layers use a sliding window; GptOss, with sinks and a sliding window), with the mask made by
transformers' own mask functions (``causal_mask_function``, ``sliding_window_causal_mask_function``)
at absolute positions: query i at Tk - Tq + i, where a KV cache puts it.  Masked scores get
the dtype's lowest value, as transformers' eager masks do, so a query that sees no key at all
(Tq > Tk) is not defined here: no "blind" capability.  The eager path scores fp16 in fp16.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from transformers import masking_utils
from transformers.models.gpt_oss import modeling_gpt_oss
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral

from properties.targets import Target


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


def eager_target(name: str, eager, capabilities: set[str]) -> Target:
    def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
        module = SimpleNamespace(num_key_value_groups=q.shape[1] // k.shape[1], training=False)
        if "sinks" in capabilities:  # GptOss always has sinks; -inf sinks are none
            module.sinks = sinks if sinks is not None else q.new_full((q.shape[1],), -math.inf)
        mask = hf_mask(q.shape[2], k.shape[2], window, q.dtype, q.device) if causal else None
        scaling = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        out, weights = eager(module, q, k, v, mask, scaling)
        out = out.transpose(1, 2)  # eager returns (B, T, H, dv)
        return (out, weights) if return_weights else out

    core = {"weights", "gqa", "decode", "non_causal", "scale"}
    return Target(name, attention, frozenset(core | capabilities), f"transformers {name} eager attention")


LLAMA = eager_target("hf-llama", modeling_llama.eager_attention_forward, set())
MISTRAL = eager_target("hf-mistral", modeling_mistral.eager_attention_forward, {"window"})
GPTOSS = eager_target("hf-gptoss", modeling_gpt_oss.eager_attention_forward, {"window", "sinks"})
