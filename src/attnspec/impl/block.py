"""The pre-norm decoder block of the source chapters, and a stack of them.

x = x + Attn(RMSNorm(x))     AttentionBlock: fused QKV (no bias), GQA, RoPE on Q and K (on part
                             of each head with rotary_dim; after a per-head q/k RMSNorm with
                             qk_norm), per-head sinks, a sliding window on even layers
x = x + FFN(RMSNorm(x))      MLPBlock
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from .attention import scaled_dot_product_attention
from .cache import KVCache
from .heads import merge_heads, split_heads
from .layers import ACTIVATIONS, FeedForward, RMSNorm
from .masks import WINDOW_LAYERS, check_window, layer_window
from .positions import alibi_slopes, apply_rope


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and switches of the block; every check runs at construction."""

    d_model: int = 256
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 64
    n_layers: int = 2
    window: int | None = 128
    window_layers: str = "even"
    use_sinks: bool = True
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    ffn_hidden: int | None = None
    activation: str = "swiglu"
    vocab_size: int = 256  # the LanguageModel's (src/attnspec/impl/model.py)
    dropout: float = 0.0  # the LanguageModel's, on its embeddings in training
    softcap: float | None = None  # attention logits soft-capped at softcap * tanh(s / softcap) (Gemma 2)
    alibi: bool = False  # ALiBi's bias on the attention logits (with RoPE, whose scores it does not touch)
    rotary_dim: int | None = None  # RoPE on the first rotary_dim features of each head only (GPT-NeoX)
    qk_norm: bool = False  # each query and key head RMS-normalised before RoPE (Qwen3, Gemma 3, OLMo 2)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        sizes = {
            name: getattr(self, name)
            for name in ("d_model", "n_heads", "n_kv_heads", "head_dim", "n_layers", "vocab_size")
        }
        if self.ffn_hidden is not None:
            sizes["ffn_hidden"] = self.ffn_hidden
        for name, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(
                f"n_heads must be a multiple of n_kv_heads: n_heads={self.n_heads}, "
                f"n_kv_heads={self.n_kv_heads}"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"RoPE needs an even head_dim, got head_dim={self.head_dim}")
        rotary = self.rotary_dim
        whole_pairs = isinstance(rotary, int) and not isinstance(rotary, bool) and rotary % 2 == 0
        if rotary is not None and not (whole_pairs and 2 <= rotary <= self.head_dim):
            raise ValueError(
                f"rotary_dim must be None or an even int in 2..head_dim = 2..{self.head_dim}, got {rotary!r}"
            )
        if not isinstance(self.qk_norm, bool):
            raise ValueError(f"qk_norm must be True or False, got {self.qk_norm!r}")
        check_window(self.window)
        if self.window_layers not in WINDOW_LAYERS:
            raise ValueError(f"window_layers must be one of {WINDOW_LAYERS}, got {self.window_layers!r}")
        if not self.norm_eps >= 0:
            raise ValueError(f"norm_eps must be >= 0, got {self.norm_eps!r}")
        if not self.rope_base > 0:
            raise ValueError(f"rope_base must be > 0, got {self.rope_base!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.softcap is not None and (isinstance(self.softcap, bool) or not self.softcap > 0):
            raise ValueError(f"softcap must be None or > 0, got {self.softcap!r}")
        if not isinstance(self.alibi, bool):
            raise ValueError(f"alibi must be True or False, got {self.alibi!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")


class AttentionBlock(nn.Module):
    """x + out_proj(attention(RoPE(q), RoPE(k), v)) over RMSNorm(x)."""

    def __init__(self, config: ModelConfig, layer_idx: int = 0) -> None:
        super().__init__()
        self.config = config
        self.window = layer_window(layer_idx, config.window, config.window_layers)
        self.norm = RMSNorm(config.d_model, eps=config.norm_eps)
        q_width = config.n_heads * config.head_dim
        kv_width = config.n_kv_heads * config.head_dim
        self.qkv = nn.Linear(config.d_model, q_width + 2 * kv_width, bias=False)
        self.out = nn.Linear(q_width, config.d_model, bias=False)
        self.sinks = nn.Parameter(torch.zeros(config.n_heads)) if config.use_sinks else None
        # over each head's d features, before RoPE; the identity without qk_norm
        self.q_norm = RMSNorm(config.head_dim, eps=config.norm_eps) if config.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(config.head_dim, eps=config.norm_eps) if config.qk_norm else nn.Identity()

    def new_cache(self, max_len: int) -> KVCache:
        """An empty KV cache for this layer (its window) and sequences of up to max_len tokens."""
        return KVCache(max_len, self.window)

    def forward(
        self,
        x: torch.Tensor,
        offset: int = 0,
        cache: KVCache | None = None,
        *,
        padding_mask: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); ``offset`` is the absolute position of x[:, 0].

        With a cache, x is the next T tokens of a sequence whose first ``offset`` tokens the
        cache has seen: their keys and values join the cache, and the queries see the earlier
        positions too (prefill with an empty cache at offset 0, then decode).

        A padded batch gives ``padding_mask`` (B, offset + T) bool, True for a real token, over the
        whole sequence so far.  RoPE keeps the batch's positions offset, offset + 1, ...: its scores
        depend only on the distance between two tokens, which padding does not change.  Packed
        sequences give ``document_ids`` (B, offset + T), the document of every token so far: a token
        attends only to its own document, whose tokens keep the row's positions (RoPE and ALiBi
        depend on distances only)."""
        if x.dim() != 3 or x.shape[-1] != self.config.d_model:
            raise ValueError(f"expected x of shape (B, T, {self.config.d_model}), got {tuple(x.shape)}")
        if cache is not None and cache.window != self.window:
            raise ValueError(f"a cache for window={cache.window} given to a layer with window={self.window}")
        batch, seq = x.shape[0], x.shape[1]
        for name, labels in (("padding_mask", padding_mask), ("document_ids", document_ids)):
            if labels is not None and labels.shape != (batch, offset + seq):
                raise ValueError(
                    f"{name} must cover the sequence so far, (B, offset + T) = ({batch}, {offset + seq}), "
                    f"got {tuple(labels.shape)}"
                )
        cfg = self.config
        q_width = cfg.n_heads * cfg.head_dim
        kv_width = cfg.n_kv_heads * cfg.head_dim
        q, k, v = self.qkv(self.norm(x)).split([q_width, kv_width, kv_width], dim=-1)
        q, k = split_heads(q, cfg.n_heads), split_heads(k, cfg.n_kv_heads)
        q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, offset=offset, base=cfg.rope_base, rotary_dim=cfg.rotary_dim)
        k = apply_rope(k, offset=offset, base=cfg.rope_base, rotary_dim=cfg.rotary_dim)
        v = split_heads(v, cfg.n_kv_heads)  # V is never rotated
        if cache is not None:
            # (B, Hkv, held + T, d), the new positions last; one decoded token's in any order where no
            # padding mask, document or ALiBi distance has to line up with them (its attention sums
            # over all of them alike)
            in_order = padding_mask is not None or document_ids is not None or cfg.alibi
            k, v = cache.update(k, v, offset, any_order=not in_order)
        # the keys are the last k.shape[2] positions of the sequence so far
        keys_padding = None if padding_mask is None else padding_mask[:, -k.shape[2] :]
        keys_documents = None if document_ids is None else document_ids[:, -k.shape[2] :]
        slopes = alibi_slopes(cfg.n_heads, device=x.device) if cfg.alibi else None
        attn = cast(
            torch.Tensor,
            scaled_dot_product_attention(
                q,
                k,
                v,
                window=self.window,
                sinks=self.sinks,
                padding_mask=keys_padding,
                document_ids=keys_documents,
                softcap=cfg.softcap,
                alibi_slopes=slopes,
            ),
        )
        return x + self.out(merge_heads(attn))


class MLPBlock(nn.Module):
    """x + FFN(RMSNorm(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(config.d_model, eps=config.norm_eps)
        self.ffn = FeedForward(config.d_model, config.ffn_hidden, config.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(self.norm(x))


class TransformerBlock(nn.Module):
    """An AttentionBlock followed by an MLPBlock."""

    def __init__(self, config: ModelConfig, layer_idx: int = 0) -> None:
        super().__init__()
        self.attn = AttentionBlock(config, layer_idx)
        self.mlp = MLPBlock(config)

    def forward(
        self,
        x: torch.Tensor,
        offset: int = 0,
        cache: KVCache | None = None,
        *,
        padding_mask: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.mlp(self.attn(x, offset, cache, padding_mask=padding_mask, document_ids=document_ids))


class TransformerStack(nn.Module):
    """config.n_layers TransformerBlocks; layer i uses the window iff the schedule says so."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.blocks = nn.ModuleList(TransformerBlock(config, i) for i in range(config.n_layers))

    def new_cache(self, max_len: int) -> list[KVCache]:
        """One empty KV cache per layer, for sequences of up to max_len tokens."""
        cfg = self.config
        return [KVCache(max_len, layer_window(i, cfg.window, cfg.window_layers)) for i in range(cfg.n_layers)]

    def prefill(self, prompt: torch.Tensor, max_len: int) -> tuple[torch.Tensor, list[KVCache]]:
        """Run the prompt (B, T, D) through a new cache; decode on with ``self(x, offset, cache)``."""
        cache = self.new_cache(max_len)
        return self(prompt, 0, cache), cache

    def forward(
        self,
        x: torch.Tensor,
        offset: int = 0,
        cache: list[KVCache] | None = None,
        *,
        padding_mask: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); with ``cache`` (from new_cache), x continues a sequence at ``offset``;
        a padded batch gives ``padding_mask``, packed sequences ``document_ids`` (AttentionBlock.forward)."""
        if cache is not None and len(cache) != len(self.blocks):
            raise ValueError(f"the stack has {len(self.blocks)} layers but the cache has {len(cache)}")
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else cache[i]
            x = block(x, offset, layer_cache, padding_mask=padding_mask, document_ids=document_ids)
        return x
