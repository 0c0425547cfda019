"""Modules, blocks and models as black boxes: x (B, T, D) -> (B, T, D), or tokens (B, T) -> logits
(B, T, V) for a model (one that declares its ``vocab_size``), whatever is inside.

A module target (an nn.Module, or a callable that declares "module") is checked for what every module
owes its users, with no knowledge of its internals: batch independence with its shape, dtype and device
(MOD-3), determinism in eval mode (MOD-4), and with a declared schedule of its layers (windows, chunks,
local windows: Target.schedule) the exact receptive field it gives, layer by layer when the module
returns each layer's output (MOD-5); a causal one (no ``mask_mod``, or a causal one, and causal layers)
also for causality (MOD-1), prefix invariance (MOD-2), chunked decoding (MOD-7) and blindness to the
order of the past when it adds no positions (MOD-8); an encoder
(``OBJ.mask_mod`` that lets every token see every other) for permutation equivariance when it adds no
positions (MOD-11) and outputs that each depend on every token (MOD-12), the causal ones skipped with
the reason (src/attnspec/kit/laws.py). Any module: an error past its maximum length (MOD-6) and, with a
padding mask, padded batches whose real tokens get what each sequence gets alone, in a full pass
(MOD-9) and, causal, decoded in chunks from a left-padded prompt (MOD-10). A black box cannot see a
wrong scale or a wrong head split that keeps causality: the layer properties (test_attention_layer.py)
read a layer's parameters for that. A model's inputs are token ids: "other values" are other ids.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnspec.kit import relations
from attnspec.kit.asserts import assert_exactly_equal, assert_layer_golden
from attnspec.kit.conventions import cache_ignored
from attnspec.kit.loading import current
from attnspec.kit.references import declared_kinds, reached, run_keywords
from attnspec.kit.strategies import full_precision, seeded_randn, seeds
from attnspec.protocol.declared import kit_runs
from attnspec.specs.oracle import attention_layer_oracle

TARGET = current()
pytestmark = pytest.mark.needs("module")
LONGEST = 12  # tokens drawn, or the declared maximum length if shorter


MODEL = TARGET.vocab_size is not None  # its inputs are token ids


@dataclass(frozen=True)
class ModuleCase:
    """An input (batch, seq, D) of the module, or tokens (batch, seq) of a model, built from ``seed``;
    the module runs in ``dtype``."""

    batch: int
    seq: int
    seed: int
    dtype: torch.dtype

    def make(self, device) -> torch.Tensor:
        return inputs(self.seed, self.batch, self.seq, device=device, dtype=self.dtype)


def inputs(seed: int, *shape: int, device, dtype: torch.dtype) -> torch.Tensor:
    """Inputs of the given leading shape ((B, T) or (B,)): features of width D in ``dtype``, or a model's
    token ids, drawn from ``seed``."""
    if not MODEL:
        return seeded_randn(seed, *shape, TARGET.d_model, device=device, dtype=dtype)
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, TARGET.vocab_size, shape, generator=generator).to(device)


def other_values(x: torch.Tensor, seed: int) -> torch.Tensor:
    """Inputs of x's shape that differ from x everywhere: other token ids, or other features (not a
    shift or a scale of them, which a norm would remove)."""
    if not MODEL:
        return seeded_randn(seed, *x.shape, device=x.device, dtype=x.dtype) * 3 + 1
    step = torch.randint(1, TARGET.vocab_size, x.shape, generator=torch.Generator().manual_seed(seed))
    return (x + step.to(x.device)) % TARGET.vocab_size


def output_shape(x: torch.Tensor) -> tuple[int, ...]:
    return (*x.shape[:2], TARGET.vocab_size) if MODEL else tuple(x.shape)


@st.composite
def module_cases(draw: st.DrawFn, min_seq: int = 1, max_seq: int = LONGEST) -> ModuleCase:
    longest = min(max_seq, TARGET.max_len or max_seq)
    seq = draw(st.integers(min(min_seq, longest), longest))
    batch = draw(st.integers(1, min(3, TARGET.max_batch or 3)))
    return ModuleCase(batch, seq, draw(seeds), draw(st.sampled_from(full_precision())))


def run(x: torch.Tensor, dtype: torch.dtype | None = None, **kwargs) -> torch.Tensor:
    """The module's output for x, the module copied to x's dtype (``dtype`` for a model's tokens)."""
    with torch.no_grad():
        return TARGET.module_in(dtype or x.dtype, x.device)(x, **kwargs)


def at(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in ``dtype`` (a model's token ids as they are): the same input, converted exactly, for a replay."""
    return x if MODEL else x.to(dtype)


def assert_same_rows(runs, dtype: torch.dtype, what: str) -> None:
    """The two runs ``runs(dtype)`` gives agree within the rounding ``dtype`` explains, replayed in float64
    where the module can be (relations.py); a failure names the (batch, position) rows that differ."""
    relations.assert_same_rows(runs, dtype, what, TARGET)


def unchanged(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Where an output did not change: bitwise, or within the bound of its dtype, depth and width for a
    module whose kernels round a row differently when other rows change (rows_round_together)."""
    return ~relations.changed(actual, expected, TARGET)


# --- MOD-1: causality -------------------------------------------------------------------------------


@pytest.mark.req("MOD-1")
@pytest.mark.law("causal")
@given(case=module_cases(min_seq=2), data=st.data())
def test_later_tokens_change_no_earlier_output(case, data, device):
    x = case.make(device)
    t = data.draw(st.integers(0, case.seq - 2), label="last kept")
    changed = x.clone()
    changed[:, t + 1 :] = other_values(x[:, t + 1 :], case.seed + 1)
    what = f"outputs 0..{t} after tokens {t + 1}..{case.seq - 1} changed ({case})"
    if TARGET.rows_round_together:

        def runs(dtype):
            return run(at(changed, dtype), dtype)[:, : t + 1], run(at(x, dtype), dtype)[:, : t + 1]

        assert_same_rows(runs, case.dtype, what)
    else:
        out, out_changed = run(x, case.dtype), run(changed, case.dtype)
        assert_exactly_equal(out_changed[:, : t + 1], out[:, : t + 1], what)


# --- MOD-2: prefix invariance -----------------------------------------------------------------------


@pytest.mark.req("MOD-2")
@pytest.mark.law("causal")
@given(case=module_cases(min_seq=2), data=st.data())
def test_a_prefix_alone_gives_the_first_rows(case, data, device):
    x = case.make(device)
    t = data.draw(st.integers(1, case.seq - 1), label="prefix")

    def runs(dtype):
        return run(at(x[:, :t].contiguous(), dtype), dtype), run(at(x, dtype), dtype)[:, :t]

    assert_same_rows(runs, case.dtype, f"the first {t} of {case.seq} tokens alone ({case})")


# --- MOD-3: batch independence, shape, dtype, device ------------------------------------------------


@pytest.mark.req("MOD-3")
@given(case=module_cases())
def test_each_sequence_alone_gives_its_rows_of_the_batch(case, device):
    x = case.make(device)
    batch = functools.cache(lambda dtype: run(at(x, dtype), dtype))
    out = batch(case.dtype)
    assert isinstance(out, torch.Tensor), f"the module returned a {type(out).__name__}, not a tensor"
    shape = output_shape(x)
    assert tuple(out.shape) == shape, (
        f"output shape {tuple(out.shape)} for input {tuple(x.shape)}, not {shape}"
    )
    assert out.dtype == case.dtype, f"output dtype {out.dtype} for a module in {case.dtype}"
    assert out.device == x.device, f"output on {out.device} for an input on {x.device}"
    for b in range(case.batch):

        def runs(dtype, b=b):
            return run(at(x[b : b + 1].contiguous(), dtype), dtype), batch(dtype)[b : b + 1]

        assert_same_rows(runs, case.dtype, f"sequence {b} alone vs its rows of the batch ({case})")


@pytest.mark.req("MOD-3")
@pytest.mark.needs("float64")
@given(case=module_cases())
def test_a_float64_module_sees_changes_below_float32s_resolution(case, device):
    """A module that declares float64 computes in it: inputs that float32 cannot tell apart (float32
    values, each nudged by a part in 1e12) give other outputs.  A module that rounds its input to
    float32 (a `.float()` inside, a float32 buffer it casts to) returns the same output for both."""
    if MODEL:
        pytest.skip("a model's inputs are token ids: there is nothing below float32's resolution to change")
    x = inputs(case.seed, case.batch, case.seq, device=device, dtype=torch.float32).double()
    signs = seeded_randn(case.seed + 1, *x.shape, device=device, dtype=torch.float64).sign()
    nudged = x * (1 + 1e-12 * signs)  # each entry rounds back to x's own in float32
    assert bool((nudged.float() == x.float()).all()) and not bool((nudged == x).all())
    assert not bool((run(nudged, torch.float64) == run(x, torch.float64)).all()), (
        f"the module declares float64 yet gives the same output for inputs that differ only below "
        f"float32's resolution ({case}): it computes in float32 somewhere (its input cast to float32?)"
    )


# --- MOD-4: determinism -----------------------------------------------------------------------------


@pytest.mark.req("MOD-4")
@given(case=module_cases())
def test_two_calls_in_eval_mode_agree_bitwise(case, device):
    x = case.make(device)
    assert_exactly_equal(
        run(x, case.dtype),
        run(x, case.dtype),
        f"a second call on the same input in eval mode ({case}: dropout left on?)",
    )


# --- MOD-5: the receptive field of the declared schedule ------------------------------------------


@pytest.mark.req("MOD-5")
@given(case=module_cases(min_seq=2, max_seq=LONGEST + 4), data=st.data())
def test_each_output_depends_on_exactly_its_declared_inputs(case, data, device):
    """Through the last layer, or through every layer when the module returns each one's output
    ("hidden_states"): layer l's output i sees the inputs its position reaches through the masks of
    layers 0..l (for windows, i - sum_(m <= l) (W_m - 1) .. i), so a window, a chunk or a local window on
    the wrong layers shows even where the stack's field, the whole prefix, does not."""
    if not TARGET.schedule:
        pytest.skip(
            f"--impl {TARGET.name} declares no schedule of its layers (OBJ.schedule = (LayerKind(...), ...), "
            "or OBJ.windows = (W_0, W_1, ...))"
        )
    x = case.make(device)
    j = data.draw(st.integers(0, case.seq - 1), label="changed input")
    changed = x.clone()
    changed[:, j] = other_values(x[:, j], case.seed + 2)
    layers = list(range(len(TARGET.schedule))) if TARGET.supports("hidden_states") else [None]
    before, after = layer_outputs(x, case.dtype), layer_outputs(changed, case.dtype)
    for layer in layers:
        out, out_changed = (before[-1], after[-1]) if layer is None else (before[layer], after[layer])
        kinds = TARGET.schedule if layer is None else TARGET.schedule[: layer + 1]
        moved = (~unchanged(out_changed, out)).flatten(2).any(-1).any(0)  # (T,): which outputs changed
        expected = reached(kinds, case.seq)[:, j].tolist()
        if any(bool(moved[i]) != expected[i] for i in range(case.seq)):
            whose = "outputs" if layer is None else f"layer {layer}'s outputs"
            said = ", ".join(str(kind) for kind in kinds)
            found = torch.nonzero(moved).flatten().tolist()
            raise AssertionError(
                f"changing input {j} changed {whose} {found}; through layers of kinds ({said}) {whose} "
                f"{[i for i, e in enumerate(expected) if e]} depend on it and no other ({case})"
            )


def layer_outputs(x: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    """Each layer's output (hidden_states), one per declared layer, or the module's output alone."""
    if not TARGET.supports("hidden_states"):
        return [run(x, dtype)]
    with torch.no_grad():
        outputs = list(TARGET.module_method("hidden_states", dtype, x.device)(x))
    assert len(outputs) == len(TARGET.schedule), (
        f"hidden_states returned {len(outputs)} layer outputs for the {len(TARGET.schedule)} declared layers"
    )
    return outputs


# --- MOD-6: the maximum length ----------------------------------------------------------------------


@pytest.mark.req("MOD-6")
def test_an_input_past_the_maximum_length_is_an_error(device):
    if TARGET.max_len is None:
        pytest.skip(f"--impl {TARGET.name} declares no maximum length (OBJ.max_len = T_max)")
    dtype = full_precision()[-1]
    fits = inputs(0, 1, TARGET.max_len, device=device, dtype=dtype)
    assert tuple(run(fits, dtype).shape) == output_shape(fits), "an input of exactly max_len tokens"
    longer = inputs(1, 1, TARGET.max_len + 1, device=device, dtype=dtype)
    try:
        out = run(longer, dtype)
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


def windowed_longest() -> int:
    """Sequences long enough to wrap every windowed layer's cache at least once, and to cross every
    chunk's boundary (twice its window or chunk and more), within the declared maximum length."""
    widest = max((kind.size for kind in TARGET.schedule if kind.mask in ("window", "chunk")), default=0)
    return max(LONGEST, 2 * widest + 2)


@pytest.mark.req("MOD-7")
@pytest.mark.law("causal")
@pytest.mark.needs("chunks")
@given(case=module_cases(max_seq=windowed_longest()), data=st.data())
def test_decoding_in_chunks_equals_the_full_pass(case, data, device):
    x = case.make(device)
    chunks = data.draw(chunkings(case.seq), label="chunks")

    @functools.cache
    def runs(dtype):
        with torch.no_grad():
            decoded = TARGET.module_method("decode", dtype, device)(at(x, dtype), chunks)
        return decoded, run(at(x, dtype), dtype)

    what = f"decoding in chunks {chunks} vs the full pass ({case})"
    try:
        assert_same_rows(runs, case.dtype, what)
    except AssertionError as failure:
        decoded = runs(case.dtype)[0]
        ignored = cache_ignored(decoded, x, chunks, lambda chunk, start: run(chunk, case.dtype), "the module")
        if ignored is None:
            raise
        raise AssertionError(f"{ignored}\n{failure}") from None


# --- MOD-8: no positions ---------------------------------------------------------------------------


@pytest.mark.req("MOD-8")
@pytest.mark.law("causal")
@pytest.mark.needs("no_positions")
@given(case=module_cases(min_seq=3), data=st.data())
def test_without_positions_the_order_of_the_past_does_not_matter(case, data, device):
    x = case.make(device)
    i = data.draw(st.integers(2, case.seq - 1), label="output")
    order = data.draw(st.permutations(range(i)), label="order of tokens 0..i-1")
    shuffled = x.clone()
    shuffled[:, :i] = x[:, list(order)]
    what = f"output {i} after tokens 0..{i - 1} were put in the order {list(order)} ({case})"

    def runs(dtype):
        return run(at(shuffled, dtype), dtype)[:, i : i + 1], run(at(x, dtype), dtype)[:, i : i + 1]

    assert_same_rows(runs, case.dtype, what)


@pytest.mark.req("MOD-12")
@pytest.mark.law("bidirectional")
@given(case=module_cases(min_seq=2), data=st.data())
def test_every_output_depends_on_every_token_of_an_encoder(case, data, device):
    """An encoder (a mask_mod that lets every token see every other): changing one token changes the
    output at every position, the earlier ones too, which a causal mask left on would keep."""
    x = case.make(device)
    j = data.draw(st.integers(0, case.seq - 1), label="changed token")
    changed = x.clone()
    changed[:, j] = other_values(x[:, j], case.seed + 3)
    kept = unchanged(run(changed, case.dtype), run(x, case.dtype)).flatten(2).all(-1)  # (B, T)
    assert not bool(kept.any()), (
        f"changing token {j} left the outputs at (batch, position) {torch.nonzero(kept).tolist()[:8]} as "
        f"they were: with its bidirectional mask_mod every output sees token {j} (a causal mask left on?) "
        f"({case})"
    )


@pytest.mark.req("MOD-11")
@pytest.mark.law("bidirectional", "permutable")
@pytest.mark.needs("no_positions")
@given(case=module_cases(min_seq=2), data=st.data())
def test_without_positions_or_a_mask_permuting_the_tokens_permutes_the_outputs(case, data, device):
    """A module whose mask_mod lets every token see every other (an encoder) and that adds no positions
    cannot tell where a token is: its outputs follow the tokens wherever they are put."""
    x = case.make(device)
    order = list(data.draw(st.permutations(range(case.seq)), label="order of the tokens"))
    what = f"outputs of the tokens put in the order {order} vs the outputs put in that order ({case})"

    def runs(dtype):
        return run(at(x[:, order], dtype), dtype), run(at(x, dtype), dtype)[:, order]

    assert_same_rows(runs, case.dtype, what)


# --- MOD-9, MOD-10: padding -------------------------------------------------------------------------


@dataclass(frozen=True)
class PaddedCase:
    """Sequences of ``lengths`` (the longest is T) padded to T on the ``side`` given, the pads of any
    values (random token ids, or features): a masked pad must not matter, whatever it holds."""

    lengths: tuple[int, ...]
    side: str
    seed: int
    dtype: torch.dtype

    def make(self, device) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The padded batch, its mask (B, T): 1 for a real token, 0 for a pad, and each sequence alone."""
        seq = max(self.lengths)
        padded = inputs(self.seed + 7, len(self.lengths), seq, device=device, dtype=self.dtype)
        mask = torch.zeros(len(self.lengths), seq, dtype=torch.long, device=device)
        alone = []
        for b, length in enumerate(self.lengths):
            sequence = inputs(self.seed + b, 1, length, device=device, dtype=self.dtype)
            real = slice(seq - length, seq) if self.side == "left" else slice(0, length)
            padded[b : b + 1, real] = sequence
            mask[b, real] = 1
            alone.append(sequence)
        return padded, mask, alone

    def real(self, b: int) -> slice:
        seq = max(self.lengths)
        return slice(seq - self.lengths[b], seq) if self.side == "left" else slice(0, self.lengths[b])


@st.composite
def padded_cases(draw: st.DrawFn, sides=("left", "right"), max_seq: int = LONGEST) -> PaddedCase:
    longest = min(max_seq, TARGET.max_len or max_seq)
    lengths = draw(st.lists(st.integers(1, longest), min_size=2, max_size=min(3, TARGET.max_batch or 3)))
    side = draw(st.sampled_from(sides))
    return PaddedCase(tuple(lengths), side, draw(seeds), draw(st.sampled_from(full_precision())))


@pytest.mark.req("MOD-9")
@pytest.mark.needs("padding")
@given(case=padded_cases())
def test_a_padded_batch_gives_each_sequence_its_own_outputs(case, device):
    """Positions included: a left-padded sequence's first real token is at position 0, as alone."""
    padded, mask, alone = case.make(device)
    batch = functools.cache(lambda dtype: run(at(padded, dtype), dtype, attention_mask=mask))
    for b, sequence in enumerate(alone):
        what = f"sequence {b} ({case.lengths[b]} tokens, {case.side}-padded to {padded.shape[1]}) vs alone"
        what += f" ({case})"

        def runs(dtype, b=b, sequence=sequence):
            return batch(dtype)[b : b + 1, case.real(b)], run(at(sequence, dtype), dtype)

        assert_same_rows(runs, case.dtype, what)


@pytest.mark.req("MOD-10")
@pytest.mark.law("causal")
@pytest.mark.needs("padding", "chunks")
@given(case=padded_cases(sides=("left",), max_seq=windowed_longest()), data=st.data())
def test_a_left_padded_batch_decodes_as_each_sequence_alone(case, data, device):
    """The prompt is the padded batch's first tokens, every pad among them (left padding lives in the
    prompt, as generate gets it), then chunks of any sizes: each sequence's cache positions start at
    its own first real token, not at the batch's."""
    padded, mask, alone = case.make(device)
    seq, pads = padded.shape[1], padded.shape[1] - min(case.lengths)
    prompt = data.draw(st.integers(max(1, pads), seq), label="prompt")
    chunks = [prompt, *data.draw(chunkings(seq - prompt), label="chunks after the prompt")]

    @functools.cache
    def decoded(dtype):
        with torch.no_grad():
            decode = TARGET.module_method("decode", dtype, device)
            return decode(at(padded, dtype), chunks, attention_mask=mask)

    for b, sequence in enumerate(alone):
        what = f"sequence {b} ({case.lengths[b]} tokens, left-padded) decoded in chunks {chunks} vs alone"
        what += f" ({case})"

        def runs(dtype, b=b, sequence=sequence):
            return decoded(dtype)[b : b + 1, case.real(b)], run(at(sequence, dtype), dtype)

        assert_same_rows(runs, case.dtype, what)


# --- MOD-13: the module's own layers, each of its declared kind --------------------------------------


@pytest.mark.req("MOD-13")
@pytest.mark.needs("layer_runs")
@given(case=module_cases(min_seq=2, max_seq=windowed_longest()))
def test_each_of_the_modules_own_layers_is_the_oracle_layer_of_its_kind(case, device):
    """The module's own layers, as its forward runs them (their inputs, masks and rotary tables the
    module's own), each against the oracle layer built from its parameters as the kind its schedule
    declares: a layer handed another kind's mask or RoPE table, or a schedule that misstates the model,
    shows here where the white box, built as each kind on its own, cannot see it."""
    x = case.make(device)
    with torch.no_grad():
        runs = kit_runs(TARGET, TARGET.module_method("layer_runs", case.dtype, device)(x))
    kinds = declared_kinds(TARGET, len(runs))
    assert len(runs) == len(kinds), f"layer_runs reported {len(runs)} layers for the {len(kinds)} declared"
    for i, (run, kind) in enumerate(zip(runs, kinds, strict=True)):
        keywords = run_keywords(TARGET, run, kind)
        golden = attention_layer_oracle(run.input, **keywords)
        ref_lowp = attention_layer_oracle(run.input, **keywords, dtype=case.dtype, angles_in_dtype=True)
        what = f"the module's layer {i} ({kind}) vs the oracle layer of its kind ({case})"
        assert_layer_golden(run.output, golden, ref_lowp, what, run.input, **keywords)
