"""F11 (f11_eviction_off_by_one.py): KV cache eviction off by one (a windowed layer's cache holds W+1
or W-1 positions).

Its idioms: the length a windowed cache keeps, ``min(length, window)``, in either order."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "keep = min(length, self.window)",
            "F11",
            {"keep = min(length, self.window + 1)", "keep = min(length, self.window - 1)"},
        ),
        (
            "kept = min(window, cache_length)",
            "F11",
            {"kept = min(window + 1, cache_length)", "kept = min(window - 1, cache_length)"},
        ),
        (
            "keep = min(max_len, window)",
            "F11",
            {"keep = min(max_len, window + 1)", "keep = min(max_len, window - 1)"},
        ),
        (  # litgpt's windowed KVCache size
            "size = min(max_seq_length, self.config.sliding_window_size)",
            "F11",
            {
                "size = min(max_seq_length, self.config.sliding_window_size + 1)",
                "size = min(max_seq_length, self.config.sliding_window_size - 1)",
            },
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("n = min(length, limit)", "F11"),  # no window
        ("w = min(window, d)", "F11"),  # no length
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
