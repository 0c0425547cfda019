"""F21 (f21_dropout_in_eval.py): dropout not switched off in eval mode (training=True, or the eval guard on
p dropped).

Its idioms: dropout left on in eval."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "w = F.dropout(w, p=self.p, training=self.training)",
            "F21",
            {"w = F.dropout(w, p=self.p, training=True)"},
        ),
        (
            "y = attend(q, k, v, dropout=0.0 if not self.training else self.attention_dropout)",
            "F21",
            {"y = attend(q, k, v, dropout=self.attention_dropout)"},
        ),
        (
            "y = sdpa(q, k, v, dropout_p=self.dropout if self.training else 0)",
            "F21",
            {"y = sdpa(q, k, v, dropout_p=self.dropout)"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("y = F.dropout(x, p=0.1, training=True)", "F21"),  # already on: nothing to switch on
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
