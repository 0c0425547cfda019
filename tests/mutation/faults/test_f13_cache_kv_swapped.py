"""F13 (f13_cache_kv_swapped.py): K and V swapped when written to the KV cache.

Its idioms: the cache written with keys and values swapped."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import changed


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "k, v = cache.update(key_states, value_states, self.layer_idx)",
            "F13",
            {"k, v = cache.update(value_states, key_states, self.layer_idx)"},
        ),
        # ... or kept as a pair: GPT-2's present, NeoX's layer_past, a cache class's return
        (
            "present = (key, value) if use_cache else None",
            "F13",
            {"present = (value, key) if use_cache else None"},
        ),
        ("past_key, past_value = layer_past", "F13", {"past_value, past_key = layer_past"}),
        (
            "return self.key_cache[layer_idx], self.value_cache[layer_idx]",
            "F13",
            {"return self.value_cache[layer_idx], self.key_cache[layer_idx]"},
        ),
        # litgpt: the cache module called with the positions first
        ("k, v = self.kv_cache(input_pos, k, v)", "F13", {"k, v = self.kv_cache(input_pos, v, k)"}),
        # local-attention: the cached pair named alike
        ("ck, cv = cache", "F13", {"cv, ck = cache"}),
        ("k, v = self.kv_proj(input_pos, k, v)", "F13", set()),  # no cache
        ("return k, v", "F13", set()),  # a projection's outputs, no cache
        ("key, value = self.split(kv)", "F13", set()),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected
