"""attnspec's implementation under test: a readable PyTorch decoder block."""

from .attention import check_attention_inputs, scaled_dot_product_attention
from .block import AttentionBlock, MLPBlock, ModelConfig, TransformerBlock, TransformerStack
from .cache import KVCache
from .heads import merge_heads, split_heads
from .layers import FeedForward, RMSNorm, default_ffn_hidden
from .masks import additive_mask, attention_mask, check_window, layer_window
from .model import LanguageModel
from .options import AttentionOptions
from .positions import (
    LearnedPositionalEmbedding,
    alibi_slopes,
    apply_rope,
    rope_cos_sin,
    sinusoidal_positional_encoding,
)

__all__ = [
    "AttentionOptions",
    "AttentionBlock",
    "FeedForward",
    "KVCache",
    "LanguageModel",
    "LearnedPositionalEmbedding",
    "MLPBlock",
    "ModelConfig",
    "RMSNorm",
    "TransformerBlock",
    "TransformerStack",
    "additive_mask",
    "alibi_slopes",
    "apply_rope",
    "attention_mask",
    "check_attention_inputs",
    "check_window",
    "default_ffn_hidden",
    "layer_window",
    "merge_heads",
    "rope_cos_sin",
    "scaled_dot_product_attention",
    "sinusoidal_positional_encoding",
    "split_heads",
]
