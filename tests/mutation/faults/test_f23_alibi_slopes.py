"""F23 (f23_alibi_slopes.py): ALiBi slopes with the sign flipped (m * (q - kv) rewards distant keys) or in
the wrong head order.

Its idioms: ALiBi's sign (the bias m * (q - kv)) and its heads' order, in impl's bias, a."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        # FlexAttention score_mod, an explicit bias matrix and BLOOM's key positions
        (
            "return slopes[:, None, None] * (key_pos - query_pos)",
            "F23",
            {
                "return slopes[:, None, None] * (query_pos - key_pos)",
                "return slopes.flip(-1)[:, None, None] * (key_pos - query_pos)",
            },
        ),
        (
            "return score + slopes[h] * (kv_idx - q_idx)",
            "F23",
            {
                "return score + slopes[h] * (q_idx - kv_idx)",
                "return score + slopes.flip(-1)[h] * (kv_idx - q_idx)",
            },
        ),
        (
            "bias = slopes.view(-1, 1, 1) * (pos[None, :] - pos[:, None]).float()",
            "F23",
            {
                "bias = slopes.view(-1, 1, 1) * (pos[:, None] - pos[None, :]).float()",
                "bias = slopes.flip(-1).view(-1, 1, 1) * (pos[None, :] - pos[:, None]).float()",
            },
        ),
        (
            "alibi = slopes[..., None] * arange_tensor",
            "F23",
            {
                "alibi = slopes[..., None] * -(arange_tensor)",
                "alibi = slopes.flip(-1)[..., None] * arange_tensor",
            },
        ),
        ("b = m * (j - i)", "F23", set()),  # a slope not named as one: not recognised
        ("b = slope * (j - i)", "F23", {"b = slope * (i - j)"}),  # one head's slope: no order to get wrong
        (
            "slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)",
            "F23",
            {"slopes = torch.cat([torch.pow(extra_base, extra_powers), slopes], dim=0)"},
        ),
        (
            "return get_slopes_power_of_2(p) + get_slopes(2 * p)[0::2][: n - p]",
            "F23",
            {"return get_slopes(2 * p)[0::2][: n - p] + get_slopes_power_of_2(p)"},
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("rel = key_pos - query_pos", "F23"),  # a distance without slopes (T5's buckets, RoPE)
        ("lr = lr_slope * (step - warmup)", "F23"),  # a slope of something else
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
