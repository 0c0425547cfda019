"""Independent reference oracle, written straight from the chapters' formulas.

Every function loops over batch, head and query (or over pairs of features) and spells
out the softmax with its sink column, in float64 unless another dtype is asked for (the
tolerance policy runs the oracle in the tested dtype too).  Nothing here imports impl/.
Weights use the nn.Linear layout: y = x @ W^T with W of shape (out, in).
"""

from __future__ import annotations

import math

import torch

GOLDEN = torch.float64


def visible_keys(i: int, tq: int, tk: int, causal: bool = True, window: int | None = None) -> list[int]:
    """Keys that query i may attend: it sits at position tk - tq + i (bottom-right)."""
    if not causal:
        return list(range(tk))
    pos = tk - tq + i
    lowest = 0 if window is None else pos - window + 1
    return [j for j in range(tk) if lowest <= j <= pos]


def mask_oracle(tq: int, tk: int, causal: bool = True, window: int | None = None) -> torch.Tensor:
    """Boolean (tq, tk) 'may attend' mask built key by key."""
    mask = torch.zeros(tq, tk, dtype=torch.bool)
    for i in range(tq):
        for j in visible_keys(i, tq, tk, causal, window):
            mask[i, j] = True
    return mask


def attention_oracle(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
    scale: float | None = None,
    dtype: torch.dtype = GOLDEN,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output (B,Hq,Tq,dv), weights (B,Hq,Tq,Tk)) of softmax(q.k * scale + M, sink) v."""
    q, k, v = q.detach().cpu().to(dtype), k.detach().cpu().to(dtype), v.detach().cpu().to(dtype)
    batch, n_heads, tq, d = q.shape
    n_kv_heads, tk, dv = k.shape[1], k.shape[2], v.shape[3]
    group = n_heads // n_kv_heads
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    out = torch.zeros(batch, n_heads, tq, dv, dtype=dtype)
    weights = torch.zeros(batch, n_heads, tq, tk, dtype=dtype)
    for b in range(batch):
        for h in range(n_heads):
            g = h // group  # the KV head that serves query head h
            for i in range(tq):
                keys = visible_keys(i, tq, tk, causal, window)
                logits = [(q[b, h, i] * k[b, g, j]).sum() * scale for j in keys]
                if sinks is not None:
                    logits.append(sinks.detach().cpu().to(dtype)[h])
                if not logits or all(x == -math.inf for x in logits):
                    continue  # nothing visible: zero output, zero weights
                row = torch.stack(logits)
                row = torch.exp(row - row.max())
                row = row / row.sum()
                for n, j in enumerate(keys):
                    weights[b, h, i, j] = row[n]
                    out[b, h, i] += row[n] * v[b, g, j]
    return out, weights


def rope_oracle(
    x: torch.Tensor, positions: list[int], base: float = 10000.0, dtype: torch.dtype = GOLDEN
) -> torch.Tensor:
    """Rotate each half-split pair (x_i, x_(i+d/2)) of x (..., T, d) by p * base^(-2i/d)."""
    x = x.detach().cpu().to(dtype)
    d = x.shape[-1]
    half = d // 2
    y = x.clone()
    for t, p in enumerate(positions):
        for i in range(half):
            angle = p * base ** (-2.0 * i / d)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., t, i], x[..., t, i + half]
            y[..., t, i] = a * c - b * s
            y[..., t, i + half] = a * s + b * c
    return y


def sinusoidal_oracle(seq_len: int, d_model: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = 10000^(-2i/d_model)."""
    pe = torch.zeros(seq_len, d_model, dtype=GOLDEN)
    for p in range(seq_len):
        for i in range(d_model // 2):
            w = 10000.0 ** (-2.0 * i / d_model)
            pe[p, 2 * i] = math.sin(p * w)
            pe[p, 2 * i + 1] = math.cos(p * w)
    return pe


def rms_norm_oracle(
    x: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype = GOLDEN
) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis."""
    x, weight = x.detach().cpu().to(dtype), weight.detach().cpu().to(dtype)
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def ffn_oracle(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w3: torch.Tensor | None,
    activation: str,
    dtype: torch.dtype = GOLDEN,
) -> torch.Tensor:
    """W2 act(W1 x); SwiGLU: W2 (silu(W1 x) * W3 x).  GELU is the exact erf form."""
    x, w1, w2 = (t.detach().cpu().to(dtype) for t in (x, w1, w2))
    h = x @ w1.T
    if activation == "relu":
        h = torch.clamp(h, min=0)
    elif activation == "gelu":
        h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2.0)))
    elif activation == "swiglu":
        assert w3 is not None
        h = h / (1 + torch.exp(-h)) * (x @ w3.detach().cpu().to(dtype).T)
    else:
        raise ValueError(f"unknown activation {activation!r}")
    return h @ w2.T


def block_qkv_oracle(
    x: torch.Tensor,
    *,
    norm_weight: torch.Tensor,
    eps: float,
    w_qkv: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    offset: int = 0,
    base: float = 10000.0,
    dtype: torch.dtype = GOLDEN,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The block's RoPE(q) (B, Hq, T, d), RoPE(k) and v (B, Hkv, T, d) over RMSNorm(x): one fused
    matrix split into q | k | v, head i = features i*d .. (i+1)*d - 1, positions offset.."""
    x = x.detach().cpu().to(dtype)
    batch, seq, _ = x.shape
    h = rms_norm_oracle(x, norm_weight, eps, dtype)
    qkv = h @ w_qkv.detach().cpu().to(dtype).T
    nq, nkv = n_heads * head_dim, n_kv_heads * head_dim
    q, k, v = qkv[..., :nq], qkv[..., nq : nq + nkv], qkv[..., nq + nkv :]

    def heads(t: torch.Tensor, n: int) -> torch.Tensor:  # (B, T, n*d) -> (B, n, T, d)
        out = torch.zeros(batch, n, seq, head_dim, dtype=dtype)
        for i in range(n):
            out[:, i] = t[..., i * head_dim : (i + 1) * head_dim]
        return out

    positions = list(range(offset, offset + seq))
    q = rope_oracle(heads(q, n_heads), positions, base, dtype)
    k = rope_oracle(heads(k, n_kv_heads), positions, base, dtype)
    return q, k, heads(v, n_kv_heads)


def cache_positions_oracle(seen: int, window: int | None) -> list[int]:
    """The absolute positions a layer's KV cache holds after ``seen`` positions: every one, or the
    last W of a windowed layer (the W - 1 the next query still sees, and the one it evicts)."""
    first = 0 if window is None else max(0, seen - window)
    return list(range(first, seen))


def attention_block_oracle(
    x: torch.Tensor,
    *,
    norm_weight: torch.Tensor,
    eps: float,
    w_qkv: torch.Tensor,
    w_out: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    window: int | None,
    sinks: torch.Tensor | None,
    offset: int = 0,
    base: float = 10000.0,
    dtype: torch.dtype = GOLDEN,
) -> torch.Tensor:
    """x + Wout . attn(RoPE(q), RoPE(k), v) over RMSNorm(x); q|k|v from one fused matrix."""
    q, k, v = block_qkv_oracle(
        x,
        norm_weight=norm_weight,
        eps=eps,
        w_qkv=w_qkv,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        offset=offset,
        base=base,
        dtype=dtype,
    )
    attn, _ = attention_oracle(q, k, v, window=window, sinks=sinks, dtype=dtype)
    merged = torch.cat([attn[:, i] for i in range(n_heads)], dim=-1)  # (B, T, Hq*d)
    return x.detach().cpu().to(dtype) + merged @ w_out.detach().cpu().to(dtype).T
