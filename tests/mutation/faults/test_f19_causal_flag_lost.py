"""F19 (f19_causal_flag_lost.py): causal flag lost on the way to attention (causal=causal or self.is_causal
set to False).

Its idioms: the causal flag lost on its way."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("y = attend(q, k, v, causal=causal)", "F19", {"y = attend(q, k, v, causal=False)"}),
        ("self.is_causal = True", "F19", {"self.is_causal = False"}),
        ("_attn_fwd[grid](q, k, v, IS_CAUSAL=causal)", "F19", {"_attn_fwd[grid](q, k, v, IS_CAUSAL=False)"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("causal = torch.ones(t, t, dtype=torch.bool).triu(1)", "F19"),  # a mask named causal
        ("causal = q_idx >= kv_idx", "F19"),
        ("y = attend(q, k, v, is_causal=True)", "F19"),  # F1's: a mask literally never applied
        ("f(q, IS_CAUSAL=causal)", "F19"),  # upper case only for a Triton launch
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
