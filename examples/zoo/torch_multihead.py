"""A correct causal self-attention module built on torch's own ``nn.MultiheadAttention``, as PyTorch
tutorials and many small projects write one: ``batch_first=True``, biases on the fused input projection
and on the output projection, and the causal mask from ``nn.Transformer.generate_square_subsequent_mask``
(a float mask of -inf above the diagonal), or a boolean mask (True: not allowed) when the layer has a
sliding window.  No positions inside (a model adds them to its input).

It is a module target (a black box, x (B, T, D) -> (B, T, D)) with its white box: ``layer(spec)``
builds the module at the spec's sizes and reports the parameters nn.MultiheadAttention holds
(``in_proj_weight`` split into q | k | v, ``in_proj_bias``, ``out_proj``) through
``attnspec.protocol.layouts.multihead_attention``.  Its width is n_heads * head_dim.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import torch
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, window: int | None = None) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.window = window

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.shape[1]
        if self.window is None:
            mask = nn.Transformer.generate_square_subsequent_mask(seq, device=x.device, dtype=x.dtype)
        else:  # query i sees keys i-W+1 .. i
            i = torch.arange(seq, device=x.device)
            mask = (i[None, :] > i[:, None]) | (i[None, :] <= i[:, None] - self.window)
        out, _ = self.mha(x, x, x, attn_mask=mask, need_weights=False)
        return out


def layer(spec):
    from attnspec import Layer, multihead_attention, randomize_

    module = randomize_(CausalSelfAttention(spec.d_model, spec.n_heads, spec.window), spec)
    module = module.to(spec.device, spec.dtype).eval()
    return Layer(lambda x, offset: module(x), **multihead_attention(module.mha), rope=False)


torch.manual_seed(0)
ATTENTION = CausalSelfAttention(32, 4)
ATTENTION.capabilities = {"float64", "no_positions", "layer", "window"}
ATTENTION.windows = (None,)
ATTENTION.layer = layer
ATTENTION.tied_width = True


class NormedInFloat32(CausalSelfAttention):
    """A broken twin: an RMS norm before the attention, computed in float32 "for stability" as
    Llama-family code writes its norms (the input cast to float32, the result cast back).  It declares
    float64, but its float64 inputs are rounded to float32 there: nothing after the norm can tell apart
    two inputs that float32 cannot."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return super().forward(h.to(dtype))


torch.manual_seed(0)
NORMED_IN_FLOAT32 = NormedInFloat32(32, 4)
NORMED_IN_FLOAT32.capabilities = {"float64", "no_positions"}
