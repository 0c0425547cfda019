"""F22 (f22_softcap_misplaced.py): soft-capping misplaced: after the mask (hidden keys capped to -cap get
weight) or before the scale."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, mutate


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("y = x * scaling\n    y = 0.5 * y * (1 + torch.tanh(0.8 * y))\n    y = y + mask", "F22"),
        (
            "logits = logits / self.final_logit_softcapping\n    logits = torch.tanh(logits)\n"
            "    logits = logits * self.final_logit_softcapping",
            "F22",
        ),
        ("scores = cap * torch.tanh(scores / cap)\n    return scores", "F22"),
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_soft_cap_after_the_mask_or_before_the_scale():
    """Gemma 2's eager attention: the cap moved below the mask, or the scale moved below the cap."""
    made = mutate(
        """
        def eager(query, key, attention_mask, scaling, softcap):
            attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
            if softcap is not None:
                attn_weights = attn_weights / softcap
                attn_weights = torch.tanh(attn_weights)
                attn_weights = attn_weights * softcap
            if attention_mask is not None:
                attn_weights = attn_weights + attention_mask[:, :, :, : key.shape[-2]]
            return attn_weights.softmax(-1)
        """,
        "F22",
    )
    assert len(made) == 2
    after_mask, before_scale = made
    assert after_mask.index("attn_weights + attention_mask") < after_mask.index("torch.tanh")
    assert "attn_weights = torch.matmul(query, key.transpose(2, 3))\n" in before_scale
    assert before_scale.index("attn_weights * softcap") < before_scale.index(
        "attn_weights = attn_weights * scaling"
    )
    # impl's form: a scale on q inside the product, one capping line, the mask added in place
    made = mutate(
        """
        def core(q, k, scale, softcap, allowed, lo):
            scores = torch.matmul(q * scale, k.mT)
            if softcap is not None:
                scores = torch.tanh(scores / softcap) * softcap
            if lo < k.shape[-2]:
                scores[..., lo:].add_(additive_mask(allowed))
            return scores
        """,
        "F22",
    )
    assert len(made) == 2
    assert made[0].index(".add_(additive_mask") < made[0].index("torch.tanh")
    assert "scores = torch.matmul(q, k.mT)" in made[1]
    assert made[1].index("torch.tanh") < made[1].index("scores = scores * scale")
    # a kernel's statements: the scale applied in place, the cap written out, a -inf fill
    made = mutate(
        """
        def tile(qk, mask, sm_scale, logit_cap):
            qk *= sm_scale
            qk = logit_cap * torch.tanh(qk / logit_cap)
            qk = torch.where(mask, qk, float("-inf"))
            return qk
        """,
        "F22",
    )
    assert len(made) == 2
    assert made[0].index("torch.where") < made[0].index("torch.tanh")
    assert made[1].index("torch.tanh") < made[1].index("qk *= sm_scale")
