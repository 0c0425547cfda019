"""F9 (f09_head_checks.py): n_heads % n_kv_heads and even head_dim checks removed.

Its idioms: a constructor's divisibility check on configuration fields, in Hugging Face's and
nanoGPT's spellings; a check on a call's tensor sizes is ERR-1's, not F9's."""

from __future__ import annotations

import pytest

from tests.fixtures.mutation import body, changed, mutate


@pytest.mark.parametrize(
    ("code", "fault", "expected"),
    [
        (
            "if self.num_heads % self.num_key_value_heads != 0:\n        raise ValueError('heads')",
            "F9",
            {"if False:"},
        ),
        ("if config.n_embd % config.n_head != 0:\n        raise ValueError('n_embd')", "F9", {"if False:"}),
        ("if self.head_dim % 2 != 0:\n        raise ValueError('rotary')", "F9", {"if False:"}),
    ],
)
def test_its_operators_recognise_real_idioms(code, fault, expected):
    assert set(changed(code, fault)) == expected


@pytest.mark.parametrize(
    ("code", "fault"),
    [
        ("if q.shape[1] % k.shape[1] != 0:\n        raise ValueError('heads')", "F9"),  # a call's sizes
        ("if self.n_heads % self.n_kv_heads != 0:\n        warnings.warn('heads')", "F9"),  # no raise
        ("if self.n_heads % self.n_kv_heads == 0:\n        raise ValueError('x')", "F9"),  # not a check
    ],
)
def test_its_operators_leave_look_alikes_alone(code, fault):
    assert mutate(body(code), fault) == []
