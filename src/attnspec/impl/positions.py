"""Positions: rotary embeddings (RoPE), sinusoidal encodings and a learned table."""

from __future__ import annotations

import torch
from torch import nn


def rope_cos_sin(positions: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles p * theta_i, theta_i = base^(-2i/d), each (T, d/2), float64."""
    if head_dim < 2 or head_dim % 2 != 0:
        raise ValueError(f"RoPE needs an even head_dim >= 2, got head_dim={head_dim}")
    two_i = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device)
    theta = base ** (-two_i / head_dim)  # (d/2,)
    angles = positions[:, None] * theta  # (T, d/2), float64 (theta is)
    return torch.cos(angles), torch.sin(angles)


def alibi_slopes(n_heads: int, device: torch.device | str | None = None) -> torch.Tensor:
    """ALiBi's slope of each of ``n_heads`` heads, (H,) float64: the geometric sequence 2^(-8h/H'),
    h = 1 .. H', for the largest power of two H' <= H, then every other slope of the sequence for 2H'
    (its 1st, 3rd, 5th, ...) for the heads beyond H'."""
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive int, got n_heads={n_heads!r}")
    power = 1 << (n_heads.bit_length() - 1)  # the largest power of two <= n_heads
    steps = torch.arange(1, power + 1, dtype=torch.float64, device=device)
    slopes = torch.pow(2.0, -8.0 * steps / power)
    extra = torch.arange(1, 2 * (n_heads - power) + 1, 2, dtype=torch.float64, device=device)
    return torch.cat([slopes, torch.pow(2.0, -8.0 * extra / (2 * power))])


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    offset: int = 0,
    base: float = 10000.0,
    rotary_dim: int | None = None,
) -> torch.Tensor:
    """Rotate x (..., T, d) by its positions (default offset, offset+1, ...), half-split pairs.

    Feature i is paired with feature i + d/2 and the pair is rotated by p * theta_i.  With
    ``rotary_dim`` r (partial rotary, GPT-NeoX's rotary_pct) the first r features are rotated as a
    head of size r would be, and features r .. d-1 pass through.
    """
    if x.dim() < 2:
        raise ValueError(f"apply_rope expects (..., T, d), got shape {tuple(x.shape)}")
    seq, head_dim = x.shape[-2], x.shape[-1]
    if rotary_dim is not None and not (
        isinstance(rotary_dim, int) and not isinstance(rotary_dim, bool) and 2 <= rotary_dim <= head_dim
    ):
        raise ValueError(f"rotary_dim must be an int in 2..d = 2..{head_dim}, got rotary_dim={rotary_dim!r}")
    if positions is None:
        positions = torch.arange(offset, offset + seq, device=x.device)
    elif positions.shape != (seq,):
        raise ValueError(f"positions must have shape (T,) = ({seq},), got {tuple(positions.shape)}")
    rotated = head_dim if rotary_dim is None else rotary_dim
    x_rot, x_pass = x[..., :rotated], x[..., rotated:]
    cos, sin = rope_cos_sin(positions, rotated, base)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    half = rotated // 2
    x1, x2 = x_rot[..., :half], x_rot[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x_pass], dim=-1)


def sinusoidal_positional_encoding(seq_len: int, d_model: int) -> torch.Tensor:
    """(seq_len, d_model) table: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = 10000^(-2i/D)."""
    if seq_len < 1 or d_model < 2 or d_model % 2 != 0:
        raise ValueError(
            f"need seq_len >= 1 and an even d_model >= 2, got seq_len={seq_len}, d_model={d_model}"
        )
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angles = torch.arange(seq_len)[:, None] * 10000.0 ** (-two_i / d_model)  # (T, D/2), float64
    pe = torch.empty(seq_len, d_model)  # torch's default dtype; the angles round on assignment
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


class LearnedPositionalEmbedding(nn.Module):
    """A trainable (max_len, d_model) table with a hard limit of max_len positions."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        if max_len < 1 or d_model < 1:
            raise ValueError(f"need max_len >= 1 and d_model >= 1, got {max_len}, {d_model}")
        self.max_len = max_len
        self.table = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, seq_len: int, offset: int = 0) -> torch.Tensor:
        """Rows offset .. offset+seq_len-1 of the table, (seq_len, d_model)."""
        if seq_len < 1 or offset < 0:
            raise ValueError(f"need seq_len >= 1 and offset >= 0, got {seq_len}, {offset}")
        if offset + seq_len > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + seq_len - 1} exceed the learned table (T_max={self.max_len})"
            )
        return self.table[offset : offset + seq_len]
