"""F10 (f10_sinks_ignored.py): sinks ignored (not passed, or the sink column dropped before the softmax)."""

from __future__ import annotations

from tests.fixtures.mutation import mutate


def test_sink_column_dropped_whatever_the_sinks_are_called():
    made = mutate(
        """
        def sdpa(QK, S):
            QK = torch.cat([QK, S], dim=-1)
            W = torch.softmax(QK, dim=-1)
            W = W[..., :-1]
            return W
        """,
        "F10",
    )
    assert made == [
        "\ndef sdpa(QK, S):\n    QK = QK\n    W = torch.softmax(QK, dim=-1)\n    W = W\n    return W\n"
    ]


def test_a_kernels_sink_left_out_of_the_denominator():
    assert mutate("def f(l_i, sink, m_i):\n    l_i = l_i + tl.math.exp2(sink - m_i)\n", "F10") == [
        "def f(l_i, sink, m_i):\n    l_i = l_i\n"
    ]
    assert mutate("def f(l, sinks, m):\n    l += torch.exp(sinks[h] - m)\n", "F10") == [
        "def f(l, sinks, m):\n    pass\n"
    ]


def test_a_launch_switches_its_sinks_off():
    made = mutate("def f(q, sinks):\n    _fwd[grid](q, sinks, HAS_SINKS=sinks is not None)\n", "F10")
    assert "    _fwd[grid](q, sinks, HAS_SINKS=False)\n" in [m.split("\n", 1)[1] for m in made]


def test_a_sum_of_sinks_is_no_denominator():
    assert mutate("def f(sink_a, sink_b):\n    s = sink_a + sink_b\n", "F10") == []
