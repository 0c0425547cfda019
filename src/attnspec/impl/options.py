"""What a call of attention asks for beyond q, k and v, as one object: the mask (causal, a window,
padding, packed documents), the sinks, the scale and the variants of the logits.
``scaled_dot_product_attention`` takes them as keywords and hands them on as one ``AttentionOptions``
to the paths that compute it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch


@dataclass(frozen=True)
class AttentionOptions:
    causal: bool = True
    window: int | None = None  # query p sees keys p-W < j <= p
    sinks: torch.Tensor | None = None  # (Hq,): one extra softmax column per query head
    scale: float | None = None  # None: 1 / sqrt(d)
    padding_mask: torch.Tensor | None = None  # (B, Tk) bool: True for a real token's key
    document_ids: torch.Tensor | None = None  # (B, Tk): the document of each key
    softcap: float | None = None  # each scaled logit s becomes softcap * tanh(s / softcap)
    alibi_slopes: torch.Tensor | None = None  # (Hq,): ALiBi's bias slope_h * (j - p)

    def keys(self, lo: int, hi: int) -> AttentionOptions:
        """The options for the keys lo .. hi-1 alone: the per-key tensors sliced, the rest kept."""
        return replace(
            self,
            padding_mask=None if self.padding_mask is None else self.padding_mask[:, lo:hi],
            document_ids=None if self.document_ids is None else self.document_ids[:, lo:hi],
        )
