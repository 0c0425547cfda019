"""F25 (f25_causal_on_bidirectional.py): causal mask left on a bidirectional path (causal=causal forced to
True, 'if causal' dropped).

Its idioms: a causal mask left on where attention is bidirectional."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "y = F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal)",
            "F25",
            {"y = F.scaled_dot_product_attention(q, k, v, is_causal=True)"},
        ),
        ("y = attend(q, k, v, causal=False)", "F25", {"y = attend(q, k, v, causal=True)"}),
        ("if not causal:\n        return torch.ones(4, 4)", "F25", {"if False:"}),
        ("if self.is_causal:\n        scores = scores + mask", "F25", {"if True:"}),
        ("m = causal_mask if self.is_causal else None", "F25", {"m = causal_mask"}),
        ("m = None if not causal else torch.tril(mask)", "F25", {"m = torch.tril(mask)"}),
        ("self.is_causal = False", "F25", {"self.is_causal = True"}),
        (
            "mod = lambda b, h, q_idx, kv_idx: True",
            "F25",
            {"mod = lambda b, h, q_idx, kv_idx: kv_idx <= q_idx"},
        ),
        ("_attn_fwd[grid](q, k, v, CAUSAL=causal)", "F25", {"_attn_fwd[grid](q, k, v, CAUSAL=True)"}),
        (  # a kernel's causal constexpr picks a loop bound
            "hi = (start_m + 1) * BLOCK_M if CAUSAL else N_CTX",
            "F25",
            {"hi = (start_m + 1) * BLOCK_M"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("y = attend(q, k, v, is_causal=True)", "F25"),  # already causal
        ("n = max(0, tq - tk) if causal else 0", "F25"),  # a count the flag picks, not a mask
        ("if causal and window is None:\n        pass", "F25"),  # not the flag alone
        ("mod = lambda b, h, q_idx, kv_idx: q_idx >= kv_idx", "F25"),  # already causal
        # a lower-case flag's IfExp needs a mask in a branch
        ("hi = (start_m + 1) * BLOCK_M if causal else n_ctx", "F25"),
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_a_full_mask_mod_made_causal():
    full = mutate(
        """
        def build(causal):
            def bidirectional(b, h, q_idx, kv_idx):
                return True
            return bidirectional
        """,
        "F25",
    )
    assert len(full) == 1 and "return kv_idx <= q_idx" in full[0]
