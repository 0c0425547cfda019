"""F17 (f17_padding_mask.py): padding mask ignored or inverted (never passed on, dropped from the mask, or
pads taken for tokens).

Its idioms: the padding mask ignored (not passed on, left out of the mask) or inverted."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("y = attend(q, k, v, padding_mask=pads)", "F17", {"y = attend(q, k, v, padding_mask=None)"}),
        (
            "f = and_masks(causal_fn, padding_mask_function(mask))",
            "F17",
            {"f = and_masks(causal_fn)"},
        ),
        ("return padding_mask[batch_idx, kv_idx]", "F17", {"return ~padding_mask[batch_idx, kv_idx]"}),
        ("allowed = allowed & attention_mask[:, None, None, :]", "F17", {"allowed = allowed"}),
        (
            "allowed = allowed & key_padding[:, None]",
            "F17",
            {"allowed = allowed", "allowed = allowed & ~key_padding[:, None]"},
        ),
        ("real = attention_mask == 1", "F17", {"real = attention_mask == 0"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("x = F.pad(x, (0, padding_length))", "F17"),  # padding a tensor, not a padding mask
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
