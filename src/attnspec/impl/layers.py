"""RMSNorm and the feed-forward variants (ReLU, GELU, SwiGLU)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS = ("relu", "gelu", "swiglu")


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last axis."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        if dim < 1:
            raise ValueError(f"RMSNorm dim must be >= 1, got {dim}")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight).to(x.dtype)


def default_ffn_hidden(d_model: int, activation: str) -> int:
    """4*D for ReLU/GELU; about 8/3*D (rounded up to a multiple of 8) for SwiGLU."""
    if activation == "swiglu":
        return 8 * math.ceil(8 * d_model / 3 / 8)
    return 4 * d_model


class FeedForward(nn.Module):
    """W2 act(W1 x) for ReLU/GELU, W2 (silu(W1 x) * W3 x) for SwiGLU; no biases."""

    def __init__(self, d_model: int, hidden: int | None = None, activation: str = "swiglu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if hidden is None:
            hidden = default_ffn_hidden(d_model, activation)
        if d_model < 1 or hidden < 1:
            raise ValueError(f"FFN sizes must be >= 1, got d_model={d_model}, hidden={hidden}")
        self.activation = activation
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False) if activation == "swiglu" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w1(x)
        if self.w3 is not None:
            h = F.silu(h) * self.w3(x)
        elif self.activation == "gelu":
            h = F.gelu(h)
        else:
            h = F.relu(h)
        return self.w2(h)
