"""F8 (f08_window_layers.py): sliding window on the wrong layers (odd layers, every layer, or never passed
on).

Its idioms: layer_types and the window argument."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "w = self.window if self.layer_type == 'sliding_attention' else None",
            "F8",
            {
                "w = self.window if self.layer_type != 'sliding_attention' else None",
                "w = self.window if True else None",
            },
        ),
        (
            "o = attn(q, k, v, sliding_window=self.sliding_window)",
            "F8",
            {"o = attn(q, k, v, sliding_window=None)"},
        ),
        (
            "m = causal_mask_mapping[self.config.layer_types[i]]",
            "F8",
            {
                'm = causal_mask_mapping["full_attention"]',
                "m = causal_mask_mapping[self.config.layer_types[i - 1]]",
            },
        ),
        (
            "f = create_causal_mask if self.config.sliding_window is None else create_windowed_mask",
            "F8",
            {"f = create_causal_mask"},
        ),
        ("f = windowed if self.window is not None else full", "F8", {"f = full"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("t = config.layer_types[i]", "F8"),  # reading the schedule, not picking a mask by it
        ("d = None if dropout is None else dropout", "F8"),  # no window in the choice
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
