"""F2 (f02_triangle_flipped.py): upper/lower triangle flipped (causal comparison, band bound or tril/triu
mirrored).

Its idioms: causal comparisons between any key-like and query-like index, tril/triu swapped."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("return kv_idx <= q_idx", "F2", {"return kv_idx >= q_idx"}),
        ("return j <= i", "F2", {"return j >= i"}),
        (  # Hugging Face's mask builders: key positions as an arange, query positions as cache_position
            "m = torch.arange(target_length, device=d) > cache_position.reshape(-1, 1)",
            "F2",
            {"m = torch.arange(target_length, device=d) < cache_position.reshape(-1, 1)"},
        ),
        ("m = torch.arange(n) > limit.reshape(-1, 1)", "F2", set()),
        ("return key <= position", "F2", {"return key >= position"}),
        ("m = torch.tril(torch.ones(8, 8))", "F2", {"m = torch.triu(torch.ones(8, 8))"}),
        ("m = torch.triu(full, diagonal=1)", "F2", {"m = torch.tril(full, diagonal=-1)"}),
        # a comparison written as a call (Keras' causal mask from cumsum'd row and column indices)
        (
            "return ops.greater_equal(row_index, col_index)",
            "F2",
            {"return ops.less_equal(row_index, col_index)"},
        ),
        ("m = torch.le(kv_idx, q_idx)", "F2", {"m = torch.ge(kv_idx, q_idx)"}),
        (  # Triton's tile offsets: offs_m rows are queries, offs_n columns keys
            "causal = offs_m[:, None] >= (start_n + offs_n[None, :])",
            "F2",
            {"causal = offs_m[:, None] <= (start_n + offs_n[None, :])"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("return q.shape[2] < k.shape[2]", "F2"),  # sizes, not positions
        ("return a <= b", "F2"),
        ("return ops.greater_equal(x, threshold)", "F2"),  # no positions
        ("return ops.less(q.shape[1], k.shape[1])", "F2"),  # sizes
        ("if num_query_heads > num_kv_heads and num_kv_heads > 1:\n        pass", "F2"),  # head counts
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
