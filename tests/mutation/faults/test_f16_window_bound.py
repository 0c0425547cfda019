"""F16 (f16_window_bound.py): window bound off by one (W+1 keys, an inclusive bound, or W-1).

Its idioms: the window's bound off by one."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("return kv_idx > q_idx - window", "F16", {"return kv_idx >= q_idx - window"}),
        (
            "m = torch.arange(target_length) <= cache_position.reshape(-1, 1) - sliding_window",
            "F16",
            {"m = torch.arange(target_length) < cache_position.reshape(-1, 1) - sliding_window"},
        ),
        (
            "m = torch.tril(full, diagonal=-window)",
            "F16",
            {"m = torch.tril(full, diagonal=-window - 1)", "m = torch.tril(full, diagonal=-window + 1)"},
        ),
        (  # litgpt: the sliding-window mask built row by row from the window's first key
            "start = max(0, i - self.config.sliding_window_size + 1)",
            "F16",
            {
                "start = max(0, i - self.config.sliding_window_size)",
                "start = max(0, i - self.config.sliding_window_size + 2)",
            },
        ),
        ("start = pos - window", "F16", {"start = pos - window - 1", "start = pos - window + 1"}),
        (
            "keys = k[:, i - window + 1 : i + 1]",
            "F16",
            {"keys = k[:, i - window : i + 1]", "keys = k[:, i - window + 2 : i + 1]"},
        ),
        (  # Keras: the band as a call
            "return ops.less(ops.abs(row_index - col_index), self._sliding_window)",
            "F16",
            {"return ops.less_equal(ops.abs(row_index - col_index), self._sliding_window)"},
        ),
        (  # a Triton kernel's first key block inside the window
            "lo = tl.maximum(0, start_m * BLOCK_M - WINDOW + 1)",
            "F16",
            {
                "lo = tl.maximum(0, start_m * BLOCK_M - WINDOW)",
                "lo = tl.maximum(0, start_m * BLOCK_M - WINDOW + 2)",
            },
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("if window < 1:\n        raise ValueError('w')", "F16"),  # a check, not a bound on keys
        ("n = seq_len - window", "F16"),  # a size, no query's position
        ("ok = ops.less(window, limit)", "F16"),  # no positions
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
