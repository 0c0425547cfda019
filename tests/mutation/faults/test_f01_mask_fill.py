"""F1 (f01_mask_fill.py): mask adds 0 instead of -inf (fill value 0, or the mask built but never applied).

Its idioms: the fill value in every spelling, and a mask built but never applied."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "w = scores.masked_fill(mask == 0, float('-inf'))",
            "F1",
            {"w = scores.masked_fill(mask == 0, 0.0)", "w = scores"},
        ),
        ("low = torch.finfo(q.dtype).min", "F1", {"low = 0.0"}),
        ("position_ids = position_ids.masked_fill(attention_mask == 0, 1)", "F1", set()),  # no scores
        ("m = torch.where(mask, zero, min_dtype)", "F1", {"m = torch.where(mask, zero, 0.0)"}),
        ("scores = scores + mask", "F1", {"scores = scores"}),
        ("scores += mask[None, None]", "F1", {"pass"}),
        (
            "o = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
            "F1",
            {"o = F.scaled_dot_product_attention(q, k, v, is_causal=False)"},
        ),
        (
            "o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
            "F1",
            {"o = F.scaled_dot_product_attention(q, k, v, attn_mask=None)"},
        ),
        (
            "m = torch.triu(q.new_full((4, 4), -float('inf')), diagonal=1)",
            "F1",
            {"m = torch.triu(q.new_full((4, 4), 0.0), diagonal=1)"},
        ),
        (  # a Triton kernel's mask: the fill zeroed (F1's oldest operator) or the where dropped
            'qk = tl.where(mask, qk, float("-inf"))',
            "F1",
            {"qk = tl.where(mask, qk, 0.0)", "qk = qk"},
        ),
        ("qk = qk + tl.where(causal, 0, -1.0e6)", "F1", {"qk = qk + tl.where(causal, 0, 0.0)"}),
        (  # the backward's mask of probabilities
            "p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)",
            "F1",
            {"p = p"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("y = total + flat_mask.sum()", "F1"),  # a sum of a mask, not a mask added to scores
        ("y = tl.where(x > 0, x, 0.0)", "F1"),  # a ReLU: no key or query index
        ("y = torch.where(cond, a, -1.0e6)", "F1"),  # torch.where of a large fill: only tl.where's
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
