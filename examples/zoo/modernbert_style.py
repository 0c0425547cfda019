"""A correct ModernBERT-style encoder of local and global layers, as a module target with a white box.

Features (B, T, D) in and out: pre-norm layers ``x + attn(attn_norm(x))`` then ``x + mlp(mlp_norm(x))``
(LayerNorm without bias, a GeGLU MLP of ``Wi``/``Wo``), the first layer's ``attn_norm`` an identity (the
embeddings before it end in a norm), and a final LayerNorm.  Every ``global_attn_every_n_layers``-th
layer from the first (``layer_id % n == 0``) is global: every token sees every other; the others see a
local window, ``local_attention // 2`` tokens on either side.  The attention has one fused ``Wqkv``
(``view(B, T, 3, H, d)``), half-split RoPE (``rotate_half``) with a base per kind of layer (160000 on
global layers, 10000 on local ones), a boolean mask handed to torch's ``scaled_dot_product_attention``,
and an optional padding mask (B, T) that hides the pads' keys.

It declares the schedule of its three layers (``LayerKind("bidirectional", base=160000)``, then two
``LayerKind("local", 2, base=10000)``), a padding mask, each layer's output (``hidden_states``) and a white
box that builds the layer the kit asks for (``spec.kind``: layer 0 for the global kind, layer 1 for the
local one, its MLP silenced), so that the local windows are checked on the layers they belong to.

Its broken twin ``LOCAL_ON_WRONG_LAYERS`` ships a bug such code has: the global layers taken as every
n-th counting from 1 (``(layer_id + 1) % n == 0``, the other common layout), so the first two layers are
local and the last global: the local window on the wrong layers.

A target of the zoo (examples/zoo/__init__.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class EncoderConfig:
    hidden_size: int = 32
    num_attention_heads: int = 4
    intermediate_size: int = 48
    num_hidden_layers: int = 3
    global_attn_every_n_layers: int = 3
    local_attention: int = 4
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    norm_eps: float = 1e-5


def is_global(layer_id: int, config: EncoderConfig) -> bool:
    return layer_id % config.global_attn_every_n_layers == 0


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotary(head_dim: int, positions: torch.Tensor, theta: float, dtype: torch.dtype):
    """cos and sin (T, d) of the angles p * theta^(-2i/d), each repeated over both halves."""
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=dtype) / head_dim)
    )
    freqs = positions.to(dtype)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, config: EncoderConfig, layer_id: int) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        if is_global(layer_id, config):
            self.window, self.rope_theta = None, config.global_rope_theta
        else:
            self.window, self.rope_theta = config.local_attention // 2, config.local_rope_theta

    def forward(self, x: torch.Tensor, start: int = 0, padding_mask: torch.Tensor | None = None):
        bs, seqlen, dim = x.shape
        qkv = self.Wqkv(x).view(bs, seqlen, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, T, d)
        positions = torch.arange(start, start + seqlen, device=x.device)
        cos, sin = rotary(self.head_dim, positions, self.rope_theta, x.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        mask = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device)
        if self.window is not None:
            distance = positions[:, None] - positions[None, :]
            mask = distance.abs() <= self.window
        mask = mask[None, None]
        if padding_mask is not None:
            mask = mask & padding_mask.bool()[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.Wo(out.transpose(1, 2).reshape(bs, seqlen, dim))


class MLP(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(F.gelu(inputs) * gate)


class EncoderLayer(nn.Module):
    def __init__(self, config: EncoderConfig, layer_id: int) -> None:
        super().__init__()
        if layer_id == 0:
            self.attn_norm = nn.Identity()
        else:
            self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=False)
        self.attn = Attention(config, layer_id)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=False)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, start: int = 0, padding_mask: torch.Tensor | None = None):
        x = x + self.attn(self.attn_norm(x), start, padding_mask)
        return x + self.mlp(self.mlp_norm(x))


class Encoder(nn.Module):
    """The layers over features (B, T, D); ``attention_mask`` (B, T): 1 for a real token, 0 for a pad."""

    def __init__(self, config: EncoderConfig, layer_class=EncoderLayer) -> None:
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(layer_class(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=False)

    def hidden_states(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None):
        states = []
        for layer in self.layers:
            x = layer(x, 0, attention_mask)
            states.append(x)
        return states

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.final_norm(self.hidden_states(x, attention_mask)[-1])


# --- what it tells the kit ----------------------------------------------------------------------------


def schedule(config: EncoderConfig):
    """Global layers every n-th from the first, bidirectional with the global base; the others a local
    window of local_attention // 2 on either side, with the local base."""
    from attnspec import LayerKind

    glob = LayerKind("bidirectional", base=config.global_rope_theta)
    local = LayerKind("local", config.local_attention // 2, base=config.local_rope_theta)
    return tuple(
        glob if i % config.global_attn_every_n_layers == 0 else local for i in range(config.num_hidden_layers)
    )


def white_box(layer_class=EncoderLayer):
    """layer(spec): layer 0 of a stack for the global kind (no attention norm), layer 1 for the local
    kind (a LayerNorm), at the spec's sizes and base, its MLP silenced."""

    def layer(spec):
        from attnspec import CannotBuild, Layer, LayerKind, randomize_

        kind = spec.kind or LayerKind("bidirectional")
        if kind.mask not in ("bidirectional", "local"):
            raise CannotBuild(f"a ModernBERT-style encoder has no {kind} layer")
        config = EncoderConfig(
            hidden_size=spec.d_model,
            num_attention_heads=spec.n_heads,
            local_attention=2 * (kind.size or 2),
            global_rope_theta=spec.base,
            local_rope_theta=spec.base,
        )
        block = layer_class(config, 0 if kind.mask == "bidirectional" else 1)
        block = randomize_(block, spec).to(spec.device, spec.dtype).eval()
        with torch.no_grad():
            block.mlp.Wo.weight.zero_()
        qkv = block.attn.Wqkv.weight.view(3, spec.d_model, spec.d_model)
        norm = {}
        if isinstance(block.attn_norm, nn.LayerNorm):
            norm = {"norm_weight": block.attn_norm.weight, "norm": "layer", "eps": config.norm_eps}
        return Layer(
            lambda x, offset: block(x, offset),
            wq=qkv[0],
            wk=qkv[1],
            wv=qkv[2],
            wo=block.attn.Wo.weight,
            residual=True,
            **norm,
        )

    return layer


def declared(encoder: Encoder, layer_class=EncoderLayer) -> Encoder:
    encoder.capabilities = {"float64", "padding", "hidden_states", "layer", "offset"}
    encoder.schedule = schedule(encoder.config)
    encoder.tied_width = True  # its heads are hidden_size / heads wide
    encoder.layer = white_box(layer_class)
    return encoder


torch.manual_seed(0)
ENCODER = declared(Encoder(EncoderConfig()))


# --- broken twin ------------------------------------------------------------------------------------


class LayerGlobalFromOne(EncoderLayer):
    """The global layers counted from 1: layer_id + 1 a multiple of n (the last of every n layers)."""

    def __init__(self, config: EncoderConfig, layer_id: int) -> None:
        super().__init__(config, layer_id)
        glob = (layer_id + 1) % config.global_attn_every_n_layers == 0
        if glob:
            self.attn.window, self.attn.rope_theta = None, config.global_rope_theta
        else:
            self.attn.window, self.attn.rope_theta = config.local_attention // 2, config.local_rope_theta


def _local_on_wrong_layers() -> Encoder:
    torch.manual_seed(0)
    return declared(Encoder(EncoderConfig(), LayerGlobalFromOne), LayerGlobalFromOne)


LOCAL_ON_WRONG_LAYERS = _local_on_wrong_layers()
