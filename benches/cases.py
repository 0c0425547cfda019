"""The bench cases: impl/ against torch on the same inputs (B=1, 8 query heads of 64, fp32).

Each case builds its inputs once and returns two zero-argument functions, "impl" and "torch" (a
causal case a third, "kernels": the kernels of impl's tiles alone, benches/reference.py);
the benches time them, ``benches.memory`` measures their peak memory, ``benches.report``
turns both into ratios.  The variant cases time impl's causal attention with ALiBi, packed documents
or a soft-cap against torch's SDPA with the same bias and mask as its float or boolean mask (a
soft-cap, which no mask carries, against the same formula in eager torch: benches/reference.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnspec.impl import AttentionBlock, ModelConfig, alibi_slopes, scaled_dot_product_attention
from attnspec.impl.attention import QUERY_TILE
from benches.reference import (
    tile_kernels,
    torch_attention,
    torch_attention_block,
    torch_variant_attention,
)

HEADS, HEAD_DIM = 8, 64


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # "causal", "window", "block", or a variant of causal attention (VARIANTS)
    seq: int
    window: int | None = None
    kv_heads: int = HEADS
    rounds: int = 5  # timed rounds per side (the slowest torch cases take seconds a call)

    @property
    def sides(self) -> tuple[str, ...]:
        return ("impl", "torch", "kernels") if self.kind == "causal" else ("impl", "torch")

    def functions(self) -> dict[str, Callable[[], torch.Tensor]]:
        gen = torch.Generator().manual_seed(0)
        if self.kind == "block":
            cfg = ModelConfig(
                d_model=HEADS * HEAD_DIM, n_heads=HEADS, n_kv_heads=self.kv_heads, head_dim=HEAD_DIM,
                window=self.window, use_sinks=True,
            )  # fmt: skip
            block = AttentionBlock(cfg, layer_idx=0).eval()
            with torch.no_grad():
                block.sinks.copy_(torch.randn(HEADS, generator=gen))
            x = torch.randn(1, self.seq, cfg.d_model, generator=gen)
            return {"impl": lambda: block(x), "torch": lambda: torch_attention_block(block, x)}
        q = torch.randn(1, HEADS, self.seq, HEAD_DIM, generator=gen)
        k = torch.randn(1, self.kv_heads, self.seq, HEAD_DIM, generator=gen)
        v = torch.randn(1, self.kv_heads, self.seq, HEAD_DIM, generator=gen)
        if self.kind in VARIANTS:
            variant = VARIANTS[self.kind](self.seq)
            return {
                "impl": lambda: scaled_dot_product_attention(q, k, v, **variant),
                "torch": lambda: torch_variant_attention(q, k, v, **variant),
            }
        functions = {
            "impl": lambda: scaled_dot_product_attention(q, k, v, window=self.window),
            "torch": lambda: torch_attention(q, k, v, window=self.window),
        }
        if "kernels" in self.sides:
            functions["kernels"] = lambda: tile_kernels(q, k, v, QUERY_TILE)
        return functions


VARIANTS = {  # the keywords of each variant for a sequence of T tokens
    "alibi": lambda t: {"alibi_slopes": alibi_slopes(HEADS).float()},
    "documents": lambda t: {"document_ids": torch.arange(t)[None] * 4 // t},  # four documents
    "softcap": lambda t: {"softcap": 50.0},
}

CASES = {
    case.name: case
    for case in (
        Case("causal-1024", "causal", 1024, rounds=10),
        Case("causal-4096", "causal", 4096, rounds=11),  # the target's case: a steadier median
        Case("gqa8/2-4096", "causal", 4096, kv_heads=2),
        Case("window128-4096", "window", 4096, window=128),
        Case("window128-8192", "window", 8192, window=128, rounds=3),
        Case("window128-16384", "window", 16384, window=128, rounds=2),
        Case("window512-4096", "window", 4096, window=512),
        Case("window512-16384", "window", 16384, window=512, rounds=2),
        Case("block-1024", "block", 1024, window=128, kv_heads=2, rounds=10),
        Case("alibi-2048", "alibi", 2048),
        Case("documents-2048", "documents", 2048),
        Case("softcap-2048", "softcap", 2048),
    )
}
