"""F18 (f18_mask_dropped_with_cache.py): mask dropped once a cache is attached (the layer gets no mask when
decoding).

Its idioms: the mask dropped once a cache is attached."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "x = layer(x, attention_mask=mask, past_key_values=cache)",
            "F18",
            {"x = layer(x, attention_mask=None if cache is not None else mask, past_key_values=cache)"},
        ),
        (
            "kw = {'attention_mask': mask, 'cache': layer_cache}",
            "F18",
            {"kw = {'attention_mask': None if layer_cache is not None else mask, 'cache': layer_cache}"},
        ),
        (  # T5's stack: a cache handed over only when it is used, parenthesised in the test
            "x = block(x, attention_mask=mask, cache=cache if use_cache else None)",
            "F18",
            {
                "x = block(x, attention_mask=None if (cache if use_cache else None) is not None else mask, "
                "cache=cache if use_cache else None)"
            },
        ),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("x = layer(x, or_mask_function=f, cache=cache)", "F18"),  # a mask's maker, not a mask
        ("kw = {'max-len': 4, b'cache': c, 'cache': c}", "F18"),  # keys that are no names, and no mask
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
