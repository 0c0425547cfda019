"""A causal language model around the stack: tokens (B, T) -> logits (B, T, V).

    logits = head(RMSNorm(stack(dropout(embed(tokens)))))

A padded batch comes with an attention mask (B, T): 1 for a real token, 0 for a pad, on either
side.  No query attends a pad's key, so a real token's logits are those of its sequence run alone.
The positions stay the batch's (0, 1, ... for every sequence): RoPE's scores depend only on the
distance between two tokens, which padding does not change (a model with absolute positions would
count each sequence's own from the mask).  Decoding continues a sequence through
the stack's KV caches; its attention mask then covers every token so far (B, offset + T).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import describe
from .block import ModelConfig, TransformerStack
from .cache import KVCache
from .layers import RMSNorm


class LanguageModel(nn.Module):
    """Token embedding, config.n_layers TransformerBlocks, a final RMSNorm and an LM head."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.stack = TransformerStack(config)
        self.norm = RMSNorm(config.d_model, eps=config.norm_eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def new_cache(self, max_len: int) -> list[KVCache]:
        """One empty KV cache per layer, for sequences of up to max_len tokens."""
        return self.stack.new_cache(max_len)

    def forward(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        offset: int = 0,
        cache: list[KVCache] | None = None,
    ) -> torch.Tensor:
        """tokens (B, T) -> logits (B, T, V).  With ``cache`` (from new_cache), the tokens continue a
        sequence at ``offset``; ``attention_mask`` (B, offset + T) marks its real tokens with 1."""
        self.check(tokens, attention_mask, offset)
        h = F.dropout(self.embed(tokens), p=self.config.dropout, training=self.training)
        padding_mask = None if attention_mask is None else attention_mask == 1
        h = self.stack(h, offset, cache, padding_mask=padding_mask)
        return self.head(self.norm(h))

    def check(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None, offset: int) -> None:
        """Raise a ValueError or TypeError naming what does not fit the model."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
            raise TypeError(f"tokens must be integer token ids (B, T), got {describe(tokens)}")
        vocab = self.config.vocab_size
        if bool(((tokens < 0) | (tokens >= vocab)).any()):
            low, high = int(tokens.min()), int(tokens.max())
            raise ValueError(f"token ids must be in [0, {vocab}), got ids from {low} to {high}")
        if attention_mask is None:
            return
        expected = (tokens.shape[0], offset + tokens.shape[1])
        if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != expected:
            raise ValueError(
                f"attention_mask must be (B, offset + T) = {expected}: 1 for a real token, 0 for a pad, "
                f"got {describe(attention_mask)}"
            )
        if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
            raise ValueError("attention_mask holds values other than 0 and 1")
