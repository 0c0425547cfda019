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
