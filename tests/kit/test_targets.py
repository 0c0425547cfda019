"""What --impl accepts as a target (src/attnspec/protocol/targets.py), without running the properties."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

from attnspec.kit import loading
from attnspec.kit.strategies import AttnCase, fit_to_target, within_length
from attnspec.kit.target_checks import target_problems
from attnspec.protocol import targets


def user_attention(q, k, v, *, causal=True, window=None):
    return q


def test_a_bare_function_is_a_target_with_the_capabilities_it_carries(monkeypatch):
    monkeypatch.setattr(user_attention, "capabilities", {"window", "gqa"}, raising=False)
    target = loading.load(f"{__name__}:user_attention")
    # the function itself, behind the wrapper that keeps its last calls for a failure's reproducer
    assert inspect.unwrap(target.attention) is user_attention and target.name == f"{__name__}:user_attention"
    assert target.supports("window", "gqa") and not target.supports("sinks")
    assert target.layer is None and target.rope is None


def test_an_unknown_capability_is_refused_by_name():
    with pytest.raises(ValueError, match="windows"):
        targets.Target("mine", user_attention, frozenset({"windows"}))


@pytest.mark.parametrize("method", ["layer", "rope"])
def test_a_capability_without_its_method_is_refused(method):
    with pytest.raises(TypeError, match=method):
        targets.Target("mine", user_attention, frozenset({method}))


def test_a_module_capability_without_its_method_names_the_capability():
    with pytest.raises(TypeError, match="claims the 'chunks' capability but has no callable decode"):
        targets.Target("mine", None, frozenset({"module", "chunks"}), module=lambda x: x, d_model=4)


class Block(torch.nn.Module):
    """A block whose attention layer is a submodule named ``attention``, as GPT-NeoX's and BERT's."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.attention(x)


class KernelModule(torch.nn.Module):
    def attention(self, q, k, v, **kwargs):
        return q


def test_a_submodule_named_attention_leaves_a_module_a_module_target():
    assert targets.as_target("block", Block()).module is not None
    assert targets.as_target("kernel", KernelModule()).attention is not None  # a method: a kernel


def test_declared_head_sizes_are_the_only_ones_drawn(monkeypatch):
    monkeypatch.setattr(user_attention, "capabilities", {"value_dim"}, raising=False)
    monkeypatch.setattr(user_attention, "head_dims", (64, 16), raising=False)
    target = loading.load(f"{__name__}:user_attention")
    assert target.head_dims == (64, 16)
    assert {target.head_size(n) for n in range(1, 9)} == {16, 64} and target.head_size(64) == 64
    monkeypatch.setattr(loading, "_current", target)
    monkeypatch.setenv(targets.ENV, target.name)
    case = fit_to_target(AttnCase(1, 2, 2, 3, 3, 5, 3, None, False, seed=0))
    assert case.head_dim in (16, 64) and case.dv in (16, 64)
    assert targets.Target("any", user_attention, frozenset()).head_size(5) == 5
    with pytest.raises(ValueError, match="head_dims"):
        targets.Target("mine", user_attention, frozenset(), head_dims=(0, 16))


def test_a_built_in_adapter_keeps_the_name_it_was_chosen_by():
    assert loading.load("torch").name == "torch"
    with pytest.raises(ValueError, match="built-in adapter"):
        loading.load("no-such-adapter")


# --- the check at load time (src/attnspec/kit/target_checks.py) -------------------------------------


def correct(q, k, v, *, causal=True, window=None, sinks=None, scale=None, return_weights=False):
    from attnspec.impl import scaled_dot_product_attention

    return scaled_dot_product_attention(q, k, v, causal=causal, return_weights=return_weights)


def needs_a_mask(q, k, v, mask):
    return correct(q, k, v)


def positional_only(q, k, v, causal=True, window=None, sinks=None, scale=None, /):
    return correct(q, k, v)


def output_only(q, k, v, **kwargs):
    return correct(q, k, v)


def heads_last(q, k, v, **kwargs):
    return correct(q, k, v).transpose(1, 2)  # (B, T, H, d)


def nan_rows(q, k, v, **kwargs):
    return correct(q, k, v) * float("nan")


class Kernel:
    def attention(self, q, k, v, **kwargs):
        return correct(q, k, v, **kwargs)


@pytest.mark.parametrize(
    "capabilities",
    [set(), {"weights", "gqa", "decode", "value_dim"}],
    ids=lambda c: "+".join(sorted(c)) or "none",
)
def test_a_correct_target_has_no_problem(capabilities):
    assert target_problems(targets.Target("mine", correct, frozenset(capabilities))) == []
    assert target_problems(loading.load("impl")) == []
    assert target_problems(loading.load("torch")) == []


@pytest.mark.parametrize(
    "attention, capabilities, line",
    [
        (needs_a_mask, set(), r"attention\(q, k, v, causal=True, .*\) raised TypeError: .*mask"),
        (positional_only, set(), r"raised TypeError: .*positional-only"),
        (output_only, {"weights"}, r"return_weights=True\) returned a tensor, not \(output, weights\)"),
        (heads_last, {"gqa"}, r"returned shape \(1, 3, 6, 4\), expected \(B, Hq, Tq, dv\) = \(1, 6, 3, 4\)"),
    ],
    ids=["signature", "positional-only", "no weights", "layout"],
)
def test_a_target_that_cannot_be_checked_gets_one_line(attention, capabilities, line):
    # gqa with decode: Hq = 6 and Tq = 3 differ, so a (B, T, H, d) result cannot have the right shape.
    capabilities = capabilities | ({"decode"} if "gqa" in capabilities else set())
    problems = target_problems(targets.Target("mine", attention, frozenset(capabilities)))
    assert len(problems) == 1, problems
    assert re.search(line, problems[0]), problems[0]


def crashes_inside(q, k, v, **kwargs):
    return correct(q, k, v) @ q  # (B, H, Tq, d) @ (B, H, Tq, d): d != Tq


@pytest.mark.parametrize("attention", [nan_rows, crashes_inside])
def test_nan_or_a_crash_inside_the_target_on_the_plain_problem_is_no_set_up_problem(attention):
    # the properties fail it (FAIL, with the diagnosis), where a set-up problem ends NOT CHECKED
    assert target_problems(targets.Target("mine", attention, frozenset())) == []


def test_a_class_is_refused_with_a_hint_to_name_an_instance():
    with pytest.raises(TypeError, match="Kernel is a class: name an instance"):
        loading.load(f"{__name__}:Kernel")
    assert targets.as_target("mine", Kernel()).attention is not None



@pytest.mark.parametrize(
    "tq, tk, longest, fitted",
    [
        (5, 9, None, (5, 9)),  # nothing declared
        (5, 9, 9, (5, 9)),  # within it
        (49, 49, 40, (40, 40)),  # as many queries as keys
        (30, 60, 40, (30, 40)),  # fewer queries than keys, still fewer
        (40, 60, 40, (39, 40)),
        (60, 20, 40, (40, 20)),  # more queries than keys (blind queries), still more
        (60, 50, 40, (40, 39)),
        (3, 5, 1, (1, 1)),  # no room left for fewer
    ],
)
def test_a_declared_max_len_shortens_a_case_keeping_its_shape(tq, tk, longest, fitted):
    assert within_length(tq, tk, longest) == fitted


def test_a_declared_max_batch_and_max_len_bound_every_case(monkeypatch):
    monkeypatch.setattr(user_attention, "capabilities", {"documents", "decode"}, raising=False)
    monkeypatch.setattr(user_attention, "max_batch", 2, raising=False)
    monkeypatch.setattr(user_attention, "max_len", 6, raising=False)
    target = loading.load(f"{__name__}:user_attention")
    monkeypatch.setattr(loading, "_current", target)
    monkeypatch.setenv(targets.ENV, target.name)
    documents = ((2, 8), (10,), (4, 6), (5, 5))  # one row of document lengths per batch row
    case = fit_to_target(AttnCase(4, 2, 2, 3, 10, 4, 4, None, False, seed=0, documents=documents))
    assert (case.batch, case.tq, case.tk, case.documents) == (2, 3, 6, documents[:2])
    for wrong in (0, 1.5, True):
        with pytest.raises(ValueError, match="max_batch"):
            targets.Target("mine", user_attention, frozenset(), max_batch=wrong)
