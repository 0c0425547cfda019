"""F29 (f29_rescale_dropped.py): the online softmax's rescale dropped when the max grows.

Its idioms: alpha = exp(m_old - m_new) applied to the accumulator and the running sum."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("acc = acc * alpha[:, None]", "F29", {"acc = acc"}),
        ("l_i = l_i * alpha + tl.sum(p, 1)", "F29", {"l_i = l_i + tl.sum(p, 1)"}),
        ("acc *= correction[:, None]", "F29", {"pass"}),
        ("alpha = tl.math.exp2(m_i - m_ij)", "F29", {"alpha = tl.math.exp2(m_i - m_i)"}),
        ("rescale = torch.exp(m - base)", "F29", {"rescale = torch.exp(m - m)"}),  # by the factor's name
        ("acc = acc * alpha[:, None] + p @ v", "F29", {"acc = acc + p @ v"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("p = tl.math.exp2(qk - m_ij[:, None])", "F29"),  # the probabilities, not the rescale
        ("w_split = tl.exp2(m_split - m_max)", "F29"),  # a key split's weight is F31's
        ("x = alpha * alpha", "F29"),
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_an_alpha_that_rescales_no_running_statistic_is_left_alone():
    """gpt-oss's SwiGLU: gate * torch.sigmoid(gate * self.alpha) is no online softmax."""
    assert (
        mutate(body("glu = gate * torch.sigmoid(gate * self.alpha)", "y = x * (self.ntk_alpha * 2)"), "F29")
        == []
    )
