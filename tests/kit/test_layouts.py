"""The layer protocol's layouts (src/attnspec/protocol/layouts.py) and its Layer checks: each common module
layout reads the parameters its forward pass uses, in the oracle's (out, in) layout, and a layout
or a pre-norm that cannot be read says why."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnspec.protocol.layouts import (
    fused_projections,
    multihead_attention,
    per_head_fused_projections,
    pre_norm,
    projections,
)
from attnspec.protocol.targets import Layer, LayerSpec
from attnspec.specs.oracle import (
    attention_layer_oracle,
    cross_attention_layer_oracle,
    layer_norm_oracle,
    pre_norm_oracle,
)

SPEC = LayerSpec(d_model=6, n_heads=3, n_kv_heads=3, head_dim=2, dtype=torch.float64)


def x(seq: int = 5) -> torch.Tensor:
    return torch.randn(2, seq, SPEC.d_model, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_a_fused_projection_is_split_q_k_v_in_that_order():
    qkv, o = nn.Linear(6, 18).double(), nn.Linear(6, 6).double()
    found = fused_projections(qkv, o, SPEC)
    torch.testing.assert_close(torch.cat([found["wq"], found["wk"], found["wv"]]), qkv.weight, rtol=0, atol=0)
    torch.testing.assert_close(found["bk"], qkv.bias[6:12], rtol=0, atol=0)
    assert found["wo"] is o.weight and found["bo"] is o.bias


def test_a_per_head_fused_projection_is_split_as_a_neox_style_view_splits_it():
    # GPT-NeoX and BLOOM: qkv(x).view(B, T, H, 3 * d), then q | k | v along the last axis of each head
    qkv, o = nn.Linear(6, 18).double(), nn.Linear(6, 6).double()
    inputs = x()
    found = per_head_fused_projections(qkv, o, n_heads=3)
    q, k, v = qkv(inputs).view(2, 5, 3, 6).split(2, dim=-1)
    for name, heads in zip("qkv", (q, k, v), strict=True):
        projected = inputs @ found[f"w{name}"].T + found[f"b{name}"]
        torch.testing.assert_close(projected, heads.reshape(2, 5, 6), rtol=0, atol=1e-12)
    assert found["wo"] is o.weight
    with pytest.raises(ValueError, match="not 3 x 4 heads"):
        per_head_fused_projections(qkv, o, n_heads=4)


class InOut(nn.Module):
    """A projection whose weight is stored (in, out), as GPT-2's Conv1D stores it."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out, dtype=torch.float64))
        self.bias = nn.Parameter(torch.randn(n_out, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


def test_weights_stored_in_out_are_read_transposed_and_the_wrong_orientation_says_so():
    qkv, o = InOut(6, 18), InOut(6, 6)
    inputs = x()
    found = fused_projections(qkv, o, SPEC, in_out=True)
    q = inputs @ found["wq"].T + found["bq"]
    torch.testing.assert_close(q, qkv(inputs)[..., :6])
    with pytest.raises(ValueError, match=r"stored \(in, out\)\? \(in_out=True\)"):
        fused_projections(qkv, o, SPEC)


def test_separate_projections_keep_a_missing_bias_as_none():
    q, k, v, o = (nn.Linear(6, 6, bias=name != "k").double() for name in "qkvo")
    found = projections(q, k, v, o)
    assert found["bk"] is None and found["bq"] is q.bias and found["wv"] is v.weight


def test_torch_multihead_attention_is_the_oracle_layer_of_its_parameters():
    mha = nn.MultiheadAttention(6, 3, batch_first=True).double().eval()
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn_like(p))
    inputs = x()
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    with torch.no_grad():
        out = mha(inputs, inputs, inputs, attn_mask=mask, need_weights=False)[0]
    keywords = dict(n_heads=3, n_kv_heads=3, head_dim=2, window=None, sinks=None, rope=False)
    golden = attention_layer_oracle(inputs, **multihead_attention(mha), **keywords)
    torch.testing.assert_close(out, golden, rtol=1e-10, atol=1e-12)


def test_torch_multihead_attention_across_is_the_cross_oracle_of_its_parameters():
    """With kdim and vdim (cross-attention), the separate q, k and v projections are read, and the
    layer attends from x to a context of another length and width as the cross oracle does."""
    mha = nn.MultiheadAttention(6, 3, kdim=4, vdim=4, batch_first=True).double().eval()
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn_like(p))
    inputs = x()
    context = torch.randn(2, 7, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        out = mha(inputs, context, context, need_weights=False)[0]
    read = multihead_attention(mha)
    assert read["wk"].shape == (6, 4) and read["wq"] is mha.q_proj_weight
    golden = cross_attention_layer_oracle(inputs, context, **read, n_heads=3, n_kv_heads=3, head_dim=2)
    torch.testing.assert_close(out, golden, rtol=1e-10, atol=1e-12)


def test_the_oracle_layer_norm_is_torchs_and_a_pre_norm_reads_either_kind():
    norm = nn.LayerNorm(6).double()
    with torch.no_grad():
        norm.weight.copy_(torch.randn(6, dtype=torch.float64))
        norm.bias.copy_(torch.randn(6, dtype=torch.float64))
    inputs = x()
    expected = F.layer_norm(inputs, (6,), norm.weight, norm.bias, norm.eps)
    torch.testing.assert_close(layer_norm_oracle(inputs, norm.weight, norm.bias, norm.eps), expected)
    read = pre_norm(norm)
    assert read["norm"] == "layer" and read["norm_bias"] is norm.bias
    torch.testing.assert_close(
        pre_norm_oracle(inputs, read["norm"], read["norm_weight"], read["norm_bias"], read["eps"]), expected
    )
    rms = pre_norm(nn.RMSNorm(6).double())  # eps=None: the machine epsilon of its dtype
    assert rms["norm"] == "rms" and rms["norm_bias"] is None and rms["eps"] == torch.finfo(torch.float64).eps


def test_a_norm_of_its_own_says_its_kind_and_one_without_a_weight_is_refused():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight, self.variance_epsilon = nn.Parameter(torch.ones(6)), 1e-6

    with pytest.raises(TypeError, match="kind='rms' or 'layer'"):
        pre_norm(Scaled())
    assert pre_norm(Scaled(), kind="rms")["eps"] == 1e-6
    with pytest.raises(ValueError, match="elementwise_affine=False"):
        pre_norm(nn.LayerNorm(6, elementwise_affine=False))


def test_a_layer_refuses_an_unknown_norm_and_a_bias_on_an_rms_norm():
    weights = dict(forward=None, wq=None, wk=None, wv=None, wo=None)
    with pytest.raises(ValueError, match="'rms' \\(RMSNorm\\) or 'layer'"):
        Layer(**weights, norm="batch")
    with pytest.raises(ValueError, match="LayerNorm's bias"):
        Layer(**weights, norm_weight=torch.ones(6), norm_bias=torch.zeros(6))


def test_a_layer_without_rope_is_the_same_at_every_offset_of_the_oracle():
    qkv, o = nn.Linear(6, 18).double(), nn.Linear(6, 6).double()
    keywords = dict(
        **fused_projections(qkv, o, SPEC), n_heads=3, n_kv_heads=3, head_dim=2, window=None, sinks=None
    )
    inputs = x()
    unrotated = attention_layer_oracle(inputs, **keywords, rope=False)
    torch.testing.assert_close(attention_layer_oracle(inputs, **keywords, rope=False, offset=7), unrotated)
    assert not torch.allclose(attention_layer_oracle(inputs, **keywords), unrotated)  # RoPE moves it
