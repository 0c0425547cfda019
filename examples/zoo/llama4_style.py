"""A correct Llama-4-style decoder stack, as a module target with a white box and a schedule of layers.

Written the way Meta's Llama 4 code is: ``ModelArgs``, pre-norm ``TransformerBlock``s (RMSNorm,
attention, RMSNorm, a SwiGLU ``FeedForward`` of ``w1``/``w2``/``w3``), and an ``Attention`` whose
RoPE multiplies interleaved pairs by complex numbers (``torch.polar``, ``view_as_complex``).  Every
``nope_layer_interval``-th layer (``(layer_id + 1) % interval == 0``) is a NoPE layer: no RoPE, full
causal attention.  The others rotate q and k, normalise each rotated head by its root mean square (an
``L2Norm`` without a gain: ``use_qk_norm``) and attend within chunks of ``attention_chunk_size``
positions counted from 0 (a query at position p sees the keys of its own chunk up to p).  Features
(B, T, D) in and out (no embeddings), a start position for the white box's offset.

It declares the schedule of its four layers (three ``LayerKind("chunk", 4)``, one
``LayerKind("causal", rope=False)``), its interleaved RoPE pairs (``conventions``), a white box that
builds the block the kit asks for (``spec.kind``: layer 0 for a chunked kind, layer 3 for the NoPE
kind, its FFN silenced; the q/k norm reported as an RMSNorm of gain ones: RoPE keeps each pair's
length, so normalising after it is normalising before), and each layer's output (``hidden_states``).

Its broken twins ship the bugs such code has: ``CHUNKS_OFF_BY_ONE`` cuts the chunks at positions counted
from 1 (each chunk starts one token late), ``ROPE_ON_NOPE_LAYERS`` rotates q and k on every layer, the
NoPE ones too (the ``if`` around the rotary lost in a refactor).

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 32
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_dim: int = 64
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    attention_chunk_size: int = 4
    nope_layer_interval: int = 4
    use_qk_norm: bool = True


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class L2Norm(nn.Module):
    """Meta's name for an RMSNorm without a gain."""

    def __init__(self, eps: float) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def freqs_cis(head_dim: int, start_pos: int, seqlen: int, theta: float, dtype: torch.dtype, device):
    """e^(i p theta_k) for positions start_pos .. start_pos + seqlen - 1: (T, d/2), complex."""
    real = torch.float64 if dtype == torch.float64 else torch.float32
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).to(real) / head_dim))
    t = torch.arange(start_pos, start_pos + seqlen, device=device).to(real)
    angles = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs: torch.Tensor):
    """(B, T, H, d) q and k times the table (T, d/2), pair (x_2k, x_2k+1) by pair."""
    real = torch.float64 if xq.dtype == torch.float64 else torch.float32
    xq_ = torch.view_as_complex(xq.to(real).reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.to(real).reshape(*xk.shape[:-1], -1, 2))
    freqs = freqs[None, :, None, :]
    xq_out = torch.view_as_real(xq_ * freqs).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def causal_mask(start_pos: int, seqlen: int, chunk_size: int | None, device) -> torch.Tensor:
    """(T, T) bool, True where a query may see a key: causal, and within its chunk where chunked."""
    pos = torch.arange(start_pos, start_pos + seqlen, device=device)
    mask = pos[None, :] <= pos[:, None]
    if chunk_size is not None:
        mask &= (pos[:, None] // chunk_size) == (pos[None, :] // chunk_size)
    return mask


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, use_rope: bool) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = args.n_heads, args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.use_rope, self.rope_theta = use_rope, args.rope_theta
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
        self.qk_norm = L2Norm(args.norm_eps) if args.use_qk_norm and use_rope else None

    def rotate(self, xq, xk, start_pos: int):
        freqs = freqs_cis(self.head_dim, start_pos, xq.shape[1], self.rope_theta, xq.dtype, xq.device)
        return apply_rotary_emb(xq, xk, freqs)

    def forward(self, x: torch.Tensor, start_pos: int, mask: torch.Tensor) -> torch.Tensor:
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        if self.use_rope:
            xq, xk = self.rotate(xq, xk, start_pos)
        if self.qk_norm is not None:
            xq, xk = self.qk_norm(xq), self.qk_norm(xk)
        xq, xk, xv = (t.transpose(1, 2) for t in (xq, xk, xv))
        n_rep = self.n_heads // self.n_kv_heads
        xk, xv = xk.repeat_interleave(n_rep, dim=1), xv.repeat_interleave(n_rep, dim=1)
        scores = (xq @ xk.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ xv
        return self.wo(out.transpose(1, 2).reshape(bsz, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs) -> None:
        super().__init__()
        self.is_nope_layer = (layer_id + 1) % args.nope_layer_interval == 0
        self.chunk_size = None if self.is_nope_layer else args.attention_chunk_size
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args, use_rope=not self.is_nope_layer)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.ffn_dim)

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        mask = causal_mask(start_pos, x.shape[1], self.chunk_size, x.device)
        h = x + self.attention(self.attention_norm(x), start_pos, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """The stack of blocks over features (B, T, D), and a final RMSNorm."""

    def __init__(self, args: ModelArgs, block_class=TransformerBlock) -> None:
        super().__init__()
        self.args = args
        self.layers = nn.ModuleList(block_class(i, args) for i in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)

    def hidden_states(self, h: torch.Tensor) -> list[torch.Tensor]:
        states = []
        for layer in self.layers:
            h = layer(h)
            states.append(h)
        return states

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(self.hidden_states(h)[-1])


# --- what it tells the kit ----------------------------------------------------------------------------


def schedule(args: ModelArgs):
    """Each layer's kind as Llama 4 lays them out: chunked with RoPE, every interval-th NoPE and full."""
    from attnspec import LayerKind

    nope = [(i + 1) % args.nope_layer_interval == 0 for i in range(args.n_layers)]
    return tuple(
        LayerKind("causal", rope=False) if n else LayerKind("chunk", args.attention_chunk_size) for n in nope
    )


def white_box(block_class=TransformerBlock):
    """layer(spec): the block of the kind the kit asks for, built as the stack builds it (layer 0 is
    chunked, layer interval - 1 the NoPE one), its feed-forward silenced."""

    def layer(spec):
        from attnspec import CannotBuild, Layer, LayerKind, randomize_

        kind = spec.kind or LayerKind("chunk", ModelArgs.attention_chunk_size)
        if (kind.mask, kind.rope) not in (("chunk", True), ("causal", False)):
            raise CannotBuild(f"a Llama 4 stack has no {kind} layer")
        args = ModelArgs(
            dim=spec.d_model,
            n_heads=spec.n_heads,
            n_kv_heads=spec.n_kv_heads,
            rope_theta=spec.base,
            attention_chunk_size=kind.size or ModelArgs.attention_chunk_size,
        )
        block = block_class(0 if kind.rope else args.nope_layer_interval - 1, args)
        block = randomize_(block, spec).to(spec.device, spec.dtype).eval()
        with torch.no_grad():
            block.feed_forward.w2.weight.zero_()
        attention = block.attention
        norms = {}
        if kind.rope and args.use_qk_norm:
            ones = torch.ones(spec.head_dim, dtype=spec.dtype, device=spec.device)
            norms = {"q_norm": ones, "k_norm": ones}
        return Layer(
            lambda x, offset: block(x, offset),
            wq=attention.wq.weight,
            wk=attention.wk.weight,
            wv=attention.wv.weight,
            wo=attention.wo.weight,
            norm_weight=block.attention_norm.weight,
            eps=args.norm_eps,
            residual=True,
            rope=kind.rope,
            **norms,
        )

    return layer


def declared(model: Transformer, block_class=TransformerBlock) -> Transformer:
    model.capabilities = {"float64", "hidden_states", "layer", "gqa", "offset"}
    model.schedule = schedule(model.args)
    model.conventions = {"rope-interleaved"}
    model.tied_width = True  # its heads are dim / n_heads wide
    model.layer = white_box(block_class)
    return model


torch.manual_seed(0)
MODEL = declared(Transformer(ModelArgs()))


# --- broken twins -----------------------------------------------------------------------------------


class ChunksCountedFromOne(TransformerBlock):
    """The chunk of position p taken as (p + 1) // C: positions counted from 1 for the chunks."""

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        mask = causal_mask(start_pos + 1, x.shape[1], self.chunk_size, x.device)
        h = x + self.attention(self.attention_norm(x), start_pos, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class RopeOnNopeLayers(TransformerBlock):
    """Every block's attention told to rotate: the NoPE layers rotate too."""

    def __init__(self, layer_id: int, args: ModelArgs) -> None:
        super().__init__(layer_id, args)
        self.attention.use_rope = True


def _twin(block_class) -> Transformer:
    torch.manual_seed(0)
    return declared(Transformer(ModelArgs(), block_class), block_class)


CHUNKS_OFF_BY_ONE = _twin(ChunksCountedFromOne)
ROPE_ON_NOPE_LAYERS = _twin(RopeOnNopeLayers)
