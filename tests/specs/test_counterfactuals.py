"""The oracle with each catalogue fault applied (src/attnspec/specs/counterfactuals.py): every
counterfactual shows on some case (none is the oracle itself
everywhere), and where a fault is simple enough to write by hand, computes what the faulty code
computes."""

from __future__ import annotations

import math

import pytest
import torch

from attnspec.specs import mods
from attnspec.specs.counterfactuals import AttentionCase, LayerCase, RopeCase, at_attention, at_layer, at_rope
from attnspec.specs.oracle import Call, attention_layer_oracle, attention_oracle, rope_oracle


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def attention_cases() -> list[AttentionCase]:
    """Small calls that ask for each thing a fault can get wrong."""
    q, k, v = randn(2, 4, 6, 4, seed=1), randn(2, 2, 6, 4, seed=2), randn(2, 2, 6, 4, seed=3)
    wide = q * 30
    documents = torch.tensor([[0, 0, 0, 1, 2, 2]] * 2)
    calls = [
        (q, Call()),
        (q, Call(window=3)),
        (q, Call(sinks=torch.linspace(-1.0, 1.0, 4))),
        (q, Call(scale=0.3)),
        (q, Call(causal=False)),
        (q, Call(document_ids=documents)),
        (wide, Call(score_mod=mods.soft_cap(5.0))),
        (q, Call(score_mod=mods.alibi(mods.alibi_slopes(4)))),
        (q, Call(score_mod=mods.alibi(mods.alibi_slopes(3)[:3] + [0.01]))),
        (q, Call(mask_mod=mods.chunked(2))),
    ]
    cases = [AttentionCase(query, k, v, call) for query, call in calls]
    three = AttentionCase(
        randn(1, 3, 6, 4, seed=4), randn(1, 3, 6, 4, seed=5), randn(1, 3, 6, 4, seed=6), Call()
    )
    three = AttentionCase(three.q, three.k, three.v, Call(score_mod=mods.alibi(mods.alibi_slopes(3))))
    return [*cases, three]


def layer_keywords(**change) -> dict:
    d, heads, kv_heads, width = 4, 2, 1, 8
    keywords = {
        "wq": randn(heads * d, width, seed=10),
        "wk": randn(kv_heads * d, width, seed=11),
        "wv": randn(kv_heads * d, width, seed=12),
        "wo": randn(width, heads * d, seed=13),
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "head_dim": d,
        "window": None,
        "sinks": None,
        "norm_weight": 1 + randn(width, seed=14) / 4,
        "residual": True,
    }
    return {**keywords, **change}


def layer_cases() -> list[LayerCase]:
    x = randn(1, 6, 8, seed=20)
    return [
        LayerCase(x, layer_keywords()),
        LayerCase(x, layer_keywords(rotary_dim=2)),
        LayerCase(x, layer_keywords(q_norm=1 + randn(4, seed=21) / 2, k_norm=1 + randn(4, seed=22) / 2)),
        LayerCase(x, layer_keywords(norm_at="post")),
        LayerCase(x, layer_keywords(post_norm=1 + randn(8, seed=23) / 2)),
        LayerCase(x, layer_keywords(rope=False)),
        LayerCase(x, layer_keywords(), chunks=(3, 1, 2)),
        LayerCase(x, layer_keywords(score_mod=mods.alibi(mods.alibi_slopes(2)), scale=1.0)),
    ]


def differs(expected: torch.Tensor | None, golden: torch.Tensor) -> bool:
    return expected is not None and not torch.allclose(expected, golden, atol=1e-9)


@pytest.mark.parametrize("counterfactual", at_attention(), ids=lambda c: f"{c.fault}:{c.behaves[:40]}")
def test_each_attention_counterfactual_shows_on_some_call(counterfactual):
    cases = attention_cases()
    goldens = [attention_oracle(c.q, c.k, c.v, **vars(c.call))[0] for c in cases]
    shown = [
        differs(counterfactual.attention(case), golden) for case, golden in zip(cases, goldens, strict=True)
    ]
    assert any(shown), f"{counterfactual.says()}: the oracle's output on every case"


# (the faults of the call, shared with attention, show on the attention's cases)
@pytest.mark.parametrize(
    "counterfactual",
    [c for c in at_layer() if c.attention is None],
    ids=lambda c: f"{c.fault}:{c.behaves[:40]}",
)
def test_each_layer_counterfactual_shows_on_some_layer(counterfactual):
    shown = [
        differs(counterfactual.layer(case), attention_layer_oracle(case.x, **case.layer))
        for case in layer_cases()
    ]
    assert any(shown), f"{counterfactual.says()}: the oracle's output on every layer"


def faulty_attention(q, k, v, *, fill=-math.inf, flipped=False, axis=-1, cap=None, cap_after_mask=False):
    """Plain attention written as code with bugs is written: a boolean causal mask filled with ``fill``,
    triu for tril, the softmax over ``axis``, a soft-cap before or after the mask."""
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    t = scores.shape[-1]
    keep = torch.ones(t, t, dtype=torch.bool)
    keep = keep.triu() if flipped else keep.tril()
    if cap is not None and not cap_after_mask:
        scores = cap * torch.tanh(scores / cap)
    scores = scores.masked_fill(~keep, fill)
    if cap is not None and cap_after_mask:
        scores = cap * torch.tanh(scores / cap)
    weights = torch.softmax(scores, dim=axis).nan_to_num(0.0)
    return weights @ v


def named(out: torch.Tensor, case: AttentionCase) -> set[str]:
    return {
        c.fault
        for c in at_attention()
        if (expected := c.attention(case)) is not None and torch.allclose(out, expected, atol=1e-9)
    }


@pytest.mark.parametrize(
    "bug, fault",
    [
        ({"fill": 0.0}, "F1"),
        ({"flipped": True}, "F2"),
        ({"axis": -2}, "F14"),
        ({"cap": 2.0, "cap_after_mask": True}, "F22"),
    ],
)
def test_code_written_with_a_fault_computes_its_counterfactual(bug, fault):
    q, k, v = randn(1, 2, 5, 4, seed=30) * 4, randn(1, 2, 5, 4, seed=31) * 4, randn(1, 2, 5, 4, seed=32)
    call = Call(score_mod=mods.soft_cap(bug["cap"])) if "cap" in bug else Call()
    out = faulty_attention(q, k, v, **bug)
    assert not torch.allclose(out, attention_oracle(q, k, v, **vars(call))[0], atol=1e-9)
    assert fault in named(out, AttentionCase(q, k, v, call))


def rotate_half_split(t: torch.Tensor, positions: list[int], base: float = 10000.0) -> torch.Tensor:
    """RoPE as model code writes it: pairs (i, i + d/2), rotate_half."""
    half = t.shape[-1] // 2
    angles = torch.tensor(positions, dtype=torch.float64)[:, None] * base ** (
        -torch.arange(half, dtype=torch.float64) * 2 / t.shape[-1]
    )
    cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)
    return t * cos + torch.cat([-t[..., half:], t[..., :half]], dim=-1) * sin


PARTIAL_ROTARY_BUGS = {
    "the whole head": lambda x, r, p: rotate_half_split(x, p),
    "the last features": lambda x, r, p: torch.cat([x[..., :-r], rotate_half_split(x[..., -r:], p)], -1),
    "rotated after the rest": lambda x, r, p: torch.cat([x[..., r:], rotate_half_split(x[..., :r], p)], -1),
}


@pytest.mark.parametrize("bug", PARTIAL_ROTARY_BUGS)
def test_partial_rotary_written_with_a_fault_computes_one_rope_counterfactual(bug):
    x, positions, r = randn(1, 2, 5, 8, seed=40), [0, 3, 1, 7, 12], 4
    out = PARTIAL_ROTARY_BUGS[bug](x, r, positions)
    case = RopeCase(x, positions, 10000.0, r)
    golden = torch.cat([rotate_half_split(x[..., :r], positions), x[..., r:]], dim=-1)
    assert torch.allclose(rope_oracle(x, positions, rotary_dim=r), golden, atol=1e-12)
    matched = [c for c in at_rope() if (e := c.rope(case)) is not None and torch.allclose(out, e, atol=1e-9)]
    assert [c.fault for c in matched] == ["F26"], [c.behaves for c in matched]
