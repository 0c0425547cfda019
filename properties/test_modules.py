"""Modules and blocks as black boxes: x (B, T, D) -> (B, T, D), whatever is inside.

A module target (an nn.Module, or a callable that declares "module") is checked for what every causal
module owes its users, with no knowledge of its internals: causality (MOD-1), prefix invariance
(MOD-2), batch independence with its shape, dtype and device (MOD-3), determinism in eval mode
(MOD-4); with its declarations, the exact receptive field of its windowed layers (MOD-5), an error
past its maximum length (MOD-6), chunked decoding (MOD-7), and blindness to the order of the past
when it adds no positions (MOD-8).  A black box cannot see a wrong scale or a wrong head split that
keeps causality: the layer properties (test_attention_layer.py) read a layer's parameters for that.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnspec.properties.hypothesis_helpers import full_precision, seeded_randn, seeds
from attnspec.properties.pytest_helpers import assert_exactly_equal
from attnspec.properties.targets import current

TARGET = current()
pytestmark = pytest.mark.needs("module")
LONGEST = 12  # tokens drawn, or the declared maximum length if shorter


@dataclass(frozen=True)
class ModuleCase:
    """An input (batch, seq, D) of the module, built from ``seed`` in ``dtype``."""

    batch: int
    seq: int
    seed: int
    dtype: torch.dtype

    def make(self, device) -> torch.Tensor:
        return seeded_randn(self.seed, self.batch, self.seq, TARGET.d_model, device=device, dtype=self.dtype)


@st.composite
def module_cases(draw: st.DrawFn, min_seq: int = 1, max_seq: int = LONGEST) -> ModuleCase:
    longest = min(max_seq, TARGET.max_len or max_seq)
    seq = draw(st.integers(min(min_seq, longest), longest))
    return ModuleCase(draw(st.integers(1, 3)), seq, draw(seeds), draw(st.sampled_from(full_precision())))


def run(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return TARGET.module_in(x.dtype, x.device)(x)


def assert_same_rows(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """torch.testing.assert_close with the dtype's defaults; a failure names the (batch, position) rows
    that differ and by how much."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    rtol, atol = {torch.float64: (1e-7, 1e-7)}.get(actual.dtype, (1.3e-6, 1e-5))
    close = torch.isclose(actual, expected, rtol=rtol, atol=atol)
    if bool(close.all()):
        return
    rows = (~close).flatten(2).any(-1) if actual.dim() > 2 else ~close  # (B, T)
    diff = (actual.double() - expected.double()).abs().nan_to_num(nan=float("inf")).max().item()
    raise AssertionError(
        f"{what}: rows (batch, position) {torch.nonzero(rows).tolist()[:8]} differ, max |diff| = {diff:.3e}"
    )


def reach() -> int | None:
    """How far back an output sees through the declared windows (None: the whole prefix)."""
    if any(w is None for w in TARGET.windows):
        return None
    return sum(w - 1 for w in TARGET.windows)


# --- MOD-1: causality -------------------------------------------------------------------------------


@pytest.mark.req("MOD-1")
@given(case=module_cases(min_seq=2), data=st.data())
def test_later_tokens_change_no_earlier_output(case, data, device):
    x = case.make(device)
    t = data.draw(st.integers(0, case.seq - 2), label="last kept")
    changed = x.clone()
    later = seeded_randn(
        case.seed + 1, case.batch, case.seq - t - 1, TARGET.d_model, device=device, dtype=case.dtype
    )
    changed[:, t + 1 :] = later * 3 + 1  # other values, not a shift or a scale that a norm would remove
    out, out_changed = run(x), run(changed)
    what = f"outputs 0..{t} after tokens {t + 1}..{case.seq - 1} changed ({case})"
    assert_exactly_equal(out_changed[:, : t + 1], out[:, : t + 1], what)


# --- MOD-2: prefix invariance -----------------------------------------------------------------------


@pytest.mark.req("MOD-2")
@given(case=module_cases(min_seq=2), data=st.data())
def test_a_prefix_alone_gives_the_first_rows(case, data, device):
    x = case.make(device)
    t = data.draw(st.integers(1, case.seq - 1), label="prefix")
    assert_same_rows(
        run(x[:, :t].contiguous()), run(x)[:, :t], f"the first {t} of {case.seq} tokens alone ({case})"
    )


# --- MOD-3: batch independence, shape, dtype, device ------------------------------------------------


@pytest.mark.req("MOD-3")
@given(case=module_cases())
def test_each_sequence_alone_gives_its_rows_of_the_batch(case, device):
    x = case.make(device)
    out = run(x)
    assert isinstance(out, torch.Tensor), f"the module returned a {type(out).__name__}, not a tensor"
    assert tuple(out.shape) == tuple(x.shape), f"output shape {tuple(out.shape)} for input {tuple(x.shape)}"
    assert out.dtype == x.dtype, f"output dtype {out.dtype} for {x.dtype} input"
    assert out.device == x.device, f"output on {out.device} for an input on {x.device}"
    for b in range(case.batch):
        alone = run(x[b : b + 1].contiguous())
        assert_same_rows(alone, out[b : b + 1], f"sequence {b} alone vs its rows of the batch ({case})")


# --- MOD-4: determinism -----------------------------------------------------------------------------


@pytest.mark.req("MOD-4")
@given(case=module_cases())
def test_two_calls_in_eval_mode_agree_bitwise(case, device):
    x = case.make(device)
    assert_exactly_equal(
        run(x), run(x), f"a second call on the same input in eval mode ({case}: dropout left on?)"
    )


# --- MOD-5: the receptive field of declared windows -------------------------------------------------


@pytest.mark.req("MOD-5")
@given(case=module_cases(min_seq=2, max_seq=LONGEST + 4), data=st.data())
def test_each_output_depends_on_exactly_its_declared_inputs(case, data, device):
    if not TARGET.windows:
        pytest.skip(f"--impl {TARGET.name} declares no windows per layer (OBJ.windows = (W_0, W_1, ...))")
    x = case.make(device)
    out = run(x)
    j = data.draw(st.integers(0, case.seq - 1), label="changed input")
    changed = x.clone()
    changed[:, j] = (
        seeded_randn(case.seed + 2, case.batch, TARGET.d_model, device=device, dtype=case.dtype) + 2
    )
    moved = (run(changed) != out).flatten(2).any(-1).any(0)  # (T,): which outputs changed
    back = reach()
    expected = [j <= i and (back is None or i - back <= j) for i in range(case.seq)]
    wrong = [i for i in range(case.seq) if bool(moved[i]) != expected[i]]
    if wrong:
        field = "the whole prefix" if back is None else f"inputs i-{back}..i"
        raise AssertionError(
            f"changing input {j} changed outputs {torch.nonzero(moved).flatten().tolist()}; with windows "
            f"{TARGET.windows} output i sees {field}, so outputs {[i for i, e in enumerate(expected) if e]} "
            f"should change and no other ({case})"
        )


# --- MOD-6: the maximum length ----------------------------------------------------------------------


@pytest.mark.req("MOD-6")
def test_an_input_past_the_maximum_length_is_an_error(device):
    if TARGET.max_len is None:
        pytest.skip(f"--impl {TARGET.name} declares no maximum length (OBJ.max_len = T_max)")
    dtype = full_precision()[-1]
    fits = seeded_randn(0, 1, TARGET.max_len, TARGET.d_model, device=device, dtype=dtype)
    assert tuple(run(fits).shape) == tuple(fits.shape), "an input of exactly max_len tokens"
    longer = seeded_randn(1, 1, TARGET.max_len + 1, TARGET.d_model, device=device, dtype=dtype)
    try:
        out = run(longer)
    except Exception:  # any error that stops it is what the requirement asks for
        return
    raise AssertionError(
        f"an input of max_len + 1 = {TARGET.max_len + 1} tokens returned {tuple(out.shape)} without an error"
    )


# --- MOD-7: chunked decoding -----------------------------------------------------------------------


@st.composite
def chunkings(draw: st.DrawFn, seq: int) -> list[int]:
    sizes, left = [], seq
    while left:
        size = draw(st.integers(1, left))
        sizes.append(size)
        left -= size
    return sizes


@pytest.mark.req("MOD-7")
@pytest.mark.needs("chunks")
@given(case=module_cases(), data=st.data())
def test_decoding_in_chunks_equals_the_full_pass(case, data, device):
    x = case.make(device)
    chunks = data.draw(chunkings(case.seq), label="chunks")
    module = TARGET.module_in(case.dtype, device)
    decode = module.decode if isinstance(module, torch.nn.Module) else TARGET.decode
    with torch.no_grad():
        decoded = decode(x, chunks)
    assert_same_rows(decoded, run(x), f"decoding in chunks {chunks} vs the full pass ({case})")


# --- MOD-8: no positions ---------------------------------------------------------------------------


@pytest.mark.req("MOD-8")
@pytest.mark.needs("no_positions")
@given(case=module_cases(min_seq=3), data=st.data())
def test_without_positions_the_order_of_the_past_does_not_matter(case, data, device):
    x = case.make(device)
    i = data.draw(st.integers(2, case.seq - 1), label="output")
    order = data.draw(st.permutations(range(i)), label="order of tokens 0..i-1")
    shuffled = x.clone()
    shuffled[:, :i] = x[:, list(order)]
    what = f"output {i} after tokens 0..{i - 1} were put in the order {list(order)} ({case})"
    assert_same_rows(run(shuffled)[:, i : i + 1], run(x)[:, i : i + 1], what)
