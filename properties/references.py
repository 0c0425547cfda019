"""Reference values the properties compare against: the spec oracle applied to impl's modules
(every size and switch read from the config, only the learned parameters from the module), float64
dot products and sink probabilities, and the exact dependency structure of a function."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnspec.specs.oracle import attention_block_oracle, ffn_oracle, rms_norm_oracle


def dependency_matrix(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Boolean (T_out, T_in): entry (i, j) is True iff output token i has a non-zero
    derivative with respect to input token j (x is (1, T, D), computed in float64)."""
    x = x.detach().double().requires_grad_(True)
    jac = torch.autograd.functional.jacobian(fn, x)  # (1, T, D, 1, T, D)
    return jac.abs().sum(dim=(0, 2, 3, 5)) != 0


def dot_products(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Unscaled q.k in float64, (B, Hq, Tq, Tk): query head h reads KV head h // (Hq/Hkv)."""
    group = q.shape[1] // k.shape[1]
    kv_head = torch.arange(q.shape[1], device=k.device) // group
    return q.double() @ k.double()[:, kv_head].transpose(-2, -1)


def sink_probability(q, k, sinks, allowed, scale=None) -> torch.Tensor:
    """p_sink = e^s / (e^s + sum over visible j of e^score_j), (B, Hq, Tq) in float64 on the CPU;
    zero everywhere when there are no sinks."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (dot_products(q, k) * scale).cpu()
    if sinks is None:
        return torch.zeros(scores.shape[:-1], dtype=torch.float64)
    scores = scores.masked_fill(~allowed, -math.inf)
    sink = sinks.detach().double().cpu().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.exp(sink[..., 0] - torch.logsumexp(torch.cat([scores, sink], dim=-1), dim=-1))


def scheduled_window(cfg, layer_idx: int) -> int | None:
    """MASK-4: the window on even layers (or on all layers), full attention elsewhere."""
    return cfg.window if cfg.window_layers == "all" or layer_idx % 2 == 0 else None


def block_oracle(
    block, cfg, layer_idx: int, x: torch.Tensor, offset: int = 0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """specs.oracle.attention_block_oracle for an AttentionBlock built from ``cfg`` as layer
    ``layer_idx``.  Every size and switch (eps, RoPE base, window) comes from the config and the
    schedule, only the learned parameters from the module: a module that ignored a config field
    would otherwise agree with itself."""
    return attention_block_oracle(
        x,
        norm_weight=block.norm.weight,
        eps=cfg.norm_eps,
        w_qkv=block.qkv.weight,
        w_out=block.out.weight,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim,
        window=scheduled_window(cfg, layer_idx),
        sinks=block.sinks,
        offset=offset,
        base=cfg.rope_base,
        dtype=dtype,
    )


# The oracles read every size and switch from the CONFIG (and the layer index), and only the
# learned parameters from the module: a module that ignored a config field (norm eps, RoPE base,
# FFN width or activation, the window schedule) would otherwise agree with itself.


def ffn_width(cfg) -> int:
    """FFN-1: the config's ffn_hidden, else 4D (ReLU/GELU) or 8D/3 rounded up to a multiple of 8."""
    if cfg.ffn_hidden is not None:
        return cfg.ffn_hidden
    if cfg.activation == "swiglu":
        at_least = -(-8 * cfg.d_model // 3)  # ceil(8D/3) in integers
        return -(-at_least // 8) * 8
    return 4 * cfg.d_model


def mlp_oracle(mlp, cfg, x: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """x + FFN(RMSNorm(x)) from the oracle's norm and FFN: the config's eps, activation and
    width, the block's own weights."""
    ffn = mlp.ffn
    width = ffn_width(cfg)
    assert ffn.w1.weight.shape == (width, cfg.d_model), (
        f"MLPBlock W1 is {tuple(ffn.w1.weight.shape)}, config asks for ({width}, {cfg.d_model})"
    )
    w3 = ffn.w3.weight if cfg.activation == "swiglu" else None
    normed = rms_norm_oracle(x, mlp.norm.weight, cfg.norm_eps, dtype=dtype)
    branch = ffn_oracle(normed, ffn.w1.weight, ffn.w2.weight, w3, cfg.activation, dtype)
    return x.detach().cpu().to(dtype) + branch


def stack_oracle(
    stack, cfg, x: torch.Tensor, offset: int = 0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """A TransformerStack from the oracle: per layer, the attention block (that layer's window from
    the schedule) and then the MLP block, with the stack's learned parameters."""
    for layer_idx, block in enumerate(stack.blocks):
        x = mlp_oracle(block.mlp, cfg, block_oracle(block.attn, cfg, layer_idx, x, offset, dtype), dtype)
    return x
