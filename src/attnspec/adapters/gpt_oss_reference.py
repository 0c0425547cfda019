"""OpenAI's gpt-oss reference implementation (its package's torch model, gpt_oss.torch.model).

The core is its ``sdpa``: self-attention over one unbatched sequence (here, one call per batch
row), GQA through a (T, Hkv, r, d) query layout, sinks always on (none = sinks of -inf), a band
mask for the window, and values of the query head size.  The layer is its ``AttentionBlock``:
RMSNorm, one fused q|k|v matrix with biases, RoPE (YaRN scaling off: factor 1), the core, the
output projection and the residual; its RoPE always starts at position 0 (no offset), and it is
built as layer 0 (windowed) or layer 1 (full, from a config whose window is 1: gpt-oss's own
schedule must ignore it there).  The RoPE is its
RotaryEmbedding's cos/sin table (float32, YaRN off) and its _apply_rotary_emb; with float32 angles
it has no "float64" capability (its sdpa alone would compute float64 in float64).

The package declares Python >= 3.12 and a serving stack; its torch model needs only torch and
safetensors, so `tox -e conformance` installs it with ``--no-deps --ignore-requires-python``.
"""

from __future__ import annotations

import math

import torch
from gpt_oss.torch import model

from attnspec.kit.strategies import randomize_
from attnspec.protocol.targets import Layer, LayerSpec, Target
from attnspec.specs.oracle import split_w_qkv


def attention(q, k, v, *, causal=True, window=None, sinks=None, scale=None):
    batch, n_heads, seq, head_dim = q.shape
    n_kv_heads = k.shape[1]
    if sinks is None:
        sinks = q.new_full((n_heads,), -math.inf)
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    rows = []
    for b in range(batch):
        grouped = q[b].transpose(0, 1).reshape(seq, n_kv_heads, n_heads // n_kv_heads, head_dim)
        out = model.sdpa(grouped, k[b].transpose(0, 1), v[b].transpose(0, 1), sinks, scale, window or 0)
        rows.append(out.view(seq, n_heads, head_dim).transpose(0, 1))
    return torch.stack(rows)


def rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    seq, head_dim = x.shape[-2:]
    table = model.RotaryEmbedding(head_dim, base, torch.float32, scaling_factor=1.0, device=x.device)
    cos, sin = table._compute_cos_sin(int(positions.max()) + 1)  # (P, d/2), rows 0..max position
    tokens_first = x.reshape(-1, seq, head_dim).transpose(0, 1)  # (T, N, d), as the block holds q
    rotated = model._apply_rotary_emb(tokens_first, cos[positions], sin[positions])
    return rotated.transpose(0, 1).reshape(x.shape)


FULL_LAYER_CONFIG_WINDOW = 1


def layer(spec: LayerSpec) -> Layer:
    config = model.ModelConfig(
        hidden_size=spec.d_model,
        head_dim=spec.head_dim,
        num_attention_heads=spec.n_heads,
        num_key_value_heads=spec.n_kv_heads,
        # a full layer comes from a config with a window too (as in gpt-oss's own configs): the
        # layer schedule, not the config, must keep it full
        sliding_window=spec.window or FULL_LAYER_CONFIG_WINDOW,
        rope_theta=spec.base,
        rope_scaling_factor=1.0,
    )
    block = model.AttentionBlock(config, layer_idx=0 if spec.window else 1, device=spec.device)
    randomize_(block, spec).to(spec.dtype)
    if not spec.sinks:
        block.sinks.data.fill_(-math.inf)

    def forward(x: torch.Tensor, offset: int) -> torch.Tensor:
        assert offset == 0, "gpt-oss's reference RoPE starts at position 0"
        return torch.stack([block(row) for row in x])

    weight, bias = block.qkv.weight, block.qkv.bias
    biases = split_w_qkv(bias, spec.n_heads, spec.n_kv_heads, spec.head_dim)
    return Layer(
        forward,
        **split_w_qkv(weight, spec.n_heads, spec.n_kv_heads, spec.head_dim),
        wo=block.out.weight,
        bq=biases["wq"],
        bk=biases["wk"],
        bv=biases["wv"],
        bo=block.out.bias,
        sinks=block.sinks if spec.sinks else None,
        norm_weight=block.norm.scale,
        eps=block.norm.eps,
        residual=True,
    )


TARGET = Target(
    "gpt-oss",
    attention,
    frozenset({"window", "sinks", "gqa", "scale", "layer", "rope", "grad"}),
    "gpt-oss reference sdpa, AttentionBlock and RoPE (gpt_oss.torch.model)",
    layer,
    rope,
    sources=("gpt_oss.torch.model",),
)
