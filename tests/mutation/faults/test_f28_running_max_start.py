"""F28 (f28_running_max_start.py): the online softmax's running max starts at 0 or at a finite sentinel
instead of -inf.

Its idioms: the running max's first value in a Triton kernel and in PyTorch tiled code."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            'm_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)',
            "F28",
            {
                "m_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)",
                "m_i = tl.full([BLOCK_M], -1.0e4, dtype=tl.float32)",
            },
        ),
        (  # the fused-attention tutorial's spelling: zeros less +inf
            'm_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")',
            "F28",
            {
                "m_i = tl.zeros([BLOCK_M], dtype=tl.float32)",
                "m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - 1.0e4",
            },
        ),
        ('m_i = -float("inf")', "F28", {"m_i = 0.0", "m_i = -1.0e4"}),
        (
            "row_max = x.new_full((n,), -math.inf)",
            "F28",
            {"row_max = x.new_full((n,), 0.0)", "row_max = x.new_full((n,), -1.0e4)"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ('mask = torch.full((t, t), float("-inf"))', "F28"),  # a mask's fill is F1's
        ('m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)', "F28"),  # a guard, not a first value
        ("m_i = tl.full([BLOCK_M], -1.0e6, dtype=tl.float32)", "F28"),  # already a sentinel
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
