"""What --impl accepts as a target (properties/targets.py), without running the properties."""

from __future__ import annotations

import pytest

from properties import targets


def user_attention(q, k, v, *, causal=True, window=None):
    return q


def test_a_bare_function_is_a_target_with_the_capabilities_it_carries(monkeypatch):
    monkeypatch.setattr(user_attention, "capabilities", {"window", "gqa"}, raising=False)
    target = targets.load(f"{__name__}:user_attention")
    assert target.attention is user_attention and target.name == f"{__name__}:user_attention"
    assert target.supports("window", "gqa") and not target.supports("sinks")
    assert target.layer is None and target.rope is None


def test_an_unknown_capability_is_refused_by_name():
    with pytest.raises(ValueError, match="windows"):
        targets.Target("mine", user_attention, frozenset({"windows"}))


@pytest.mark.parametrize("method", ["layer", "rope"])
def test_a_capability_without_its_method_is_refused(method):
    with pytest.raises(TypeError, match=method):
        targets.Target("mine", user_attention, frozenset({method}))


def test_a_built_in_adapter_keeps_the_name_it_was_chosen_by():
    assert targets.load("torch").name == "torch"
    with pytest.raises(ValueError, match="built-in adapter"):
        targets.load("no-such-adapter")
