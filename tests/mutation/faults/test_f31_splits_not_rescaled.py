"""F31 (f31_splits_not_rescaled.py): key splits combined without rescale.

Its idioms: flash-decoding's combine, each split weighted by exp(m_split - m_max)."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        ("w_split = tl.exp2(m_split - m_max)", "F31", {"w_split = tl.exp2(m_split - m_split)"}),
        ("scale = torch.exp(lse_parts - lse_max)", "F31", {"scale = torch.exp(lse_parts - lse_parts)"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


def test_each_product_by_a_split_weight_dropped_one_statement_at_a_time():
    made = mutate(
        """
        def combine(m_split, l_split, o_split):
            m_max = tl.max(m_split, 0)
            w = tl.exp2(m_split - m_max)
            denom = tl.sum(l_split * w, 0)
            acc = tl.sum(o_split * w[:, None], 0)
            return acc / denom
        """,
        "F31",
    )
    assert any("w = tl.exp2(m_split - m_split)" in m for m in made)
    assert any("denom = tl.sum(l_split, 0)" in m and "o_split * w[:, None]" in m for m in made)
    assert any("acc = tl.sum(o_split, 0)" in m and "l_split * w" in m for m in made)
    assert len(made) == 3


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("alpha = tl.math.exp2(m_i - m_ij)", "F31"),  # one program's rescale is F29's
        ("p = torch.exp(s - m)", "F31"),
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []


def test_a_weight_named_for_nothing_counts_where_it_weighs_a_split():
    """flash-ref's combine: factor = exp(m - top) times each part's total and accumulator."""
    made = mutate(
        """
        def combine(parts, top, total, acc):
            for m, part_total, part_acc in parts:
                factor = torch.exp(m - top)
                total = total + factor * part_total
                acc = acc + factor * part_acc
            return total, acc
        """,
        "F31",
    )
    assert len(made) == 3
    assert all(
        "factor = torch.exp(m - m)" in m
        for m in made
        if "factor * part_total" in m and "factor * part_acc" in m
    )
    assert any("total = total + part_total" in m for m in made)
    assert any("acc = acc + part_acc" in m for m in made)
    assert mutate("def f(m, top, x):\n    w = torch.exp(m - top)\n    y = w * x\n", "F31") == []


def test_inside_a_loop_over_the_splits_any_weight_counts():
    """A combine kernel's loop over the splits, its statistics named m_s, l_s, acc_s."""
    made = mutate(
        """
        def combine(M, L, Acc, n_splits, m_safe):
            for split in range(0, n_splits):
                m_s = tl.load(M + split)
                l_s = tl.load(L + split)
                acc_s = tl.load(Acc + split)
                scale = tl.exp2(m_s - m_safe)
                l_i += scale * l_s
                acc += scale[:, None] * acc_s
            return acc / l_i
        """,
        "F31",
    )
    assert any("l_i += l_s" in m and "scale[:, None] * acc_s" in m for m in made)
    assert any("acc += acc_s" in m and "scale * l_s" in m for m in made)
    assert any("scale = tl.exp2(m_s - m_s)" in m for m in made)
    assert len(made) == 3
