"""F12 (f12_rope_offset.py): RoPE offset not applied in decode (every chunk rotated from position 0).

Its idioms: decode positions."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("p = torch.arange(T) + past_seen_tokens", "F12", {"p = torch.arange(T)"}),
        (
            "p = torch.arange(past_length, past_length + T, device=x.device)",
            "F12",
            {"p = torch.arange(T, device=x.device)"},
        ),
        ("p = torch.arange(position_offset, total)", "F12", {"p = torch.arange(total - position_offset)"}),
        # ... and the offset itself dropped where it is read from the cache (Llama, NeoX, a cache's length)
        (
            "past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0",
            "F12",
            {"past_seen_tokens = 0 if past_key_values is not None else 0"},
        ),
        ("offset = layer_past[0].shape[-2] if layer_past is not None else 0", "F12", {"offset = 0"}),
        ("offset = 0 if cache is None else cache.length", "F12", {"offset = 0"}),
        ("past_key_values = outputs.past_key_values", "F12", set()),  # the cache, not a count
        ("offset = start_n * BLOCK_N", "F12", set()),  # a tile's offset
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("i = torch.arange(0, d, 2)", "F12"),  # RoPE's frequencies, not positions after an offset
        ("p = torch.arange(tk - tq, tk)", "F12"),  # bottom-right alignment, not a cache offset
        ("n = torch.arange(start_n, min(start_n + BLOCK_N, hi))", "F12"),  # a tile's offsets
        ("offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)", "F12"),  # a Triton tile's rows, no positions
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
