"""Multi-head reshapes: (B, T, D) <-> (B, H, T, d) with D = H * d."""

from __future__ import annotations

import torch


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, H*d) -> (B, H, T, d); head h takes features [h*d, (h+1)*d) of every token."""
    if x.dim() != 3:
        raise ValueError(f"split_heads expects (B, T, D), got shape {tuple(x.shape)}")
    batch, seq, width = x.shape
    if n_heads < 1 or width % n_heads != 0:
        raise ValueError(f"D={width} is not divisible by n_heads={n_heads}")
    return x.view(batch, seq, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, d) -> (B, T, H*d), the inverse of split_heads."""
    if x.dim() != 4:
        raise ValueError(f"merge_heads expects (B, H, T, d), got shape {tuple(x.shape)}")
    batch, n_heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * head_dim)
