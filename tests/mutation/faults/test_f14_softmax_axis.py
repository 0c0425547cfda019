"""F14 (f14_softmax_axis.py): softmax over the wrong axis (the queries instead of the keys).

Its idioms: the softmax axis."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "w = nn.functional.softmax(scores, dim=-1, dtype=torch.float32)",
            "F14",
            {"w = nn.functional.softmax(scores, dim=-2, dtype=torch.float32)"},
        ),
        ("w = scores.softmax(-1)", "F14", {"w = scores.softmax(-2)"}),
        ("w = torch.softmax(scores, 3)", "F14", {"w = torch.softmax(scores, 2)"}),
        ("m_ij = tl.maximum(m_i, tl.max(qk, 1))", "F14", {"m_ij = tl.maximum(m_i, tl.max(qk, 0))"}),
        ("l_ij = tl.sum(p, axis=1)", "F14", {"l_ij = tl.sum(p, axis=0)"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("w = torch.softmax(scores, dim=0)", "F14"),
        ("delta = tl.sum(o * do, axis=1)", "F14"),  # the backward's rowsum(dO * O), no softmax
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
