"""Gradients: the backward pass of any attention target that declares "grad", whatever else it does.

A training kernel's backward is usually written by hand: P recomputed from the saved log-sum-exp,
D = rowsum(dO * O), dS = P * (dP - D), GQA gradients summed over each group, a sink's gradient from its
own probability.  Its bugs sit where the forward's do (block boundaries, a window cutting a block, a
decode step, GQA groups, rows that see one key or none) and in the recomputation itself.  So the
properties are: dQ, dK, dV and dsinks against the oracle's gradients on the kernel cases (GRAD-2), zero
gradients where nothing is seen (GRAD-3), gradients that ignore the upstream gradients of queries that
cannot see a key (GRAD-4), and gradcheck for a float64 target with whatever capabilities it has
(GRAD-1).  None needs the attention weights.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from attnspec.kit.asserts import (
    Conditioning,
    assert_exactly_equal,
    assert_exactly_zero,
    assert_golden,
)
from attnspec.kit.kernel_blocks import block_sizes, where_in_blocks, where_keys_in_blocks
from attnspec.kit.kernel_cases import kernel_cases
from attnspec.kit.laws import holds, law_problem
from attnspec.kit.loading import current
from attnspec.kit.references import declared_gradients, declared_mask
from attnspec.kit.run_report import lacks
from attnspec.kit.skips import require_dtype
from attnspec.kit.strategies import (
    FULL_PRECISION,
    LOW_PRECISION,
    AttnCase,
    fit_to_target,
    noise_like,
    seeded_randn,
    seeds,
)
from attnspec.protocol import interpreted
from attnspec.specs.tolerance import golden_bound

TARGET = current()
pytestmark = pytest.mark.needs("grad")
# impl's explicit and tiled paths each run GRAD-1 and GRAD-2 (conftest.py's attention_path fixture)
both_paths = pytest.mark.usefixtures("attention_path")
SIZES = block_sizes(TARGET)
NAMES = ("dQ", "dK", "dV", "dsinks")
B = SIZES[0]
# Explicit examples, run first in every profile: one block plus one with GQA 4 over 2, a window of a
# block less one and sinks; one query over three blocks of keys with sinks (a decode step).
BLOCK_PLUS_ONE = fit_to_target(AttnCase(1, 4, 2, B + 1, B + 1, 4, 3, B - 1, True, seed=7))
DECODE = fit_to_target(AttnCase(1, 4, 2, 1, 3 * B + 1, 4, 4, None, True, seed=9))


def leaves(case: AttnCase, device, dtype: torch.dtype):
    """(q, k, v, sinks) of ``case`` in ``dtype``, each requiring its gradient (sinks None without)."""
    return tuple(None if t is None else t.requires_grad_(True) for t in case.make(device, dtype))


def backward(q, k, v, d_out: torch.Tensor, **call) -> tuple:
    """(dQ, dK, dV, dsinks) of sum(out * d_out) for the target's causal attention (``call``: the keywords
    of the call, its sinks included); dsinks is None without sinks, and a gradient autograd does not
    reach is zeros (a key no query sees may get no gradient)."""
    sinks = call.get("sinks")
    out = TARGET.attention(q, k, v, **call)
    inputs = [t for t in (q, k, v, sinks) if t is not None]
    grads = torch.autograd.grad(out, inputs, d_out, allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for t, g in zip(inputs, grads, strict=True)]
    return (*grads, None) if sinks is None else tuple(grads)


def upstream(case: AttnCase, seed: int, device, dtype: torch.dtype) -> torch.Tensor:
    """A random upstream gradient dO (B, Hq, Tq, dv)."""
    return seeded_randn(seed, case.batch, case.n_heads, case.tq, case.dv, device=device, dtype=dtype)


def where_wrong(name: str, wrong: torch.Tensor, case: AttnCase) -> str:
    """Which rows of a gradient are wrong and where they sit in the kernel's blocks: query rows for dQ,
    key rows for dK and dV, heads for dsinks."""
    if name == "dsinks":
        return f"the sinks of heads {torch.nonzero(wrong.flatten()).flatten().tolist()} are wrong"
    rows = wrong.flatten(0, 1).any(dim=0).any(dim=-1)  # (T,)
    if name == "dQ":
        return where_in_blocks(rows, case.tq, case.tk, case.window, True, SIZES)
    return where_keys_in_blocks(rows, case.tk, SIZES)


def assert_gradients_golden(grads, golden, reference, case: AttnCase, what: str, conditioning) -> None:
    """Each gradient within the golden bound of its own (specs/tolerance.py), with the conditioning term of
    dQ, dK and dV (``conditioning``: asserts.Conditioning with the upstream gradient) where the bound
    without it fails; a failure names every wrong gradient and where its wrong rows sit in the kernel's
    blocks."""
    wrong = []
    for name, grad, gold, ref in zip(NAMES, grads, golden, reference, strict=True):
        if gold is None:
            continue
        of = name if name in Conditioning.GRADIENTS else None
        try:
            assert_golden(grad, gold, ref, f"{name} {what}", conditioning if of else None, of or "out")
        except AssertionError as failure:
            err = (grad.detach().cpu().double() - gold).abs().nan_to_num(nan=float("inf"))
            term = conditioning.term(of) if of else None
            rows = where_wrong(name, err > golden_bound(gold, ref, grad.dtype, term), case)
            wrong.append(f"{failure}; {rows}")
    if wrong:
        names = ", ".join(line.split(" ", 1)[0] for line in wrong)
        raise AssertionError(f"wrong gradients: {names}\n" + "\n".join(wrong))


def shape_of(case: AttnCase) -> str:
    return (
        f"B={case.batch} Hq={case.n_heads} Hkv={case.n_kv_heads} Tq={case.tq} Tk={case.tk} "
        f"d={case.head_dim} dv={case.dv} W={case.window} sinks={case.use_sinks}"
    )


# --- GRAD-2: dQ, dK, dV and dsinks against the oracle -------------------------------------------


def grad_dtypes() -> list[torch.dtype]:
    low = list(LOW_PRECISION) if TARGET.supports("float16") else []
    return [d for d in FULL_PRECISION if d != torch.float64 or TARGET.supports("float64")] + low


@st.composite
def backward_cases(draw: st.DrawFn) -> AttnCase:
    """The kernel cases (a full pass or a decode step), with "blind" some queries that see no key."""
    case = draw(st.one_of(kernel_cases(), kernel_cases(few_queries=True)))
    if TARGET.supports("blind") and draw(st.integers(0, 5)) == 0:
        case = fit_to_target(replace(case, tq=case.tk + draw(st.integers(1, 3))))  # within max_len
    return case


@pytest.mark.req("GRAD-2")
@both_paths
@pytest.mark.parametrize("dtype", grad_dtypes(), ids=str)
@example(case=BLOCK_PLUS_ONE, seed=1, sink_shift=0.0)
@example(case=DECODE, seed=2, sink_shift=12.0)
@given(case=backward_cases(), seed=seeds, sink_shift=st.sampled_from([0.0, 0.0, 12.0, -12.0]))
def test_gradients_match_the_oracle(dtype, case, seed, sink_shift, device):
    """The tolerance is the outputs' policy, per gradient: the error of the oracle's own gradients in the
    tested dtype, times FUDGE, plus the dtype's floor (PyTorch's and FlashAttention's recipe: a
    low-precision reference's error as the yardstick).  Sinks may sit far above the logits (the keys
    then get little probability) or far below them (the sink gets little)."""
    require_dtype(dtype, device)
    q, k, v, sinks = leaves(case, device, dtype)
    if sinks is not None:
        sinks = (sinks.detach() + sink_shift).requires_grad_(True)
    d_out = upstream(case, seed, device, dtype)
    kwargs = case.keywords(sinks, device)
    grads = backward(q, k, v, d_out, **kwargs)
    golden = declared_gradients(q, k, v, d_out, **kwargs)
    low = dtype != torch.float64
    reference = declared_gradients(q, k, v, d_out, dtype=dtype, **kwargs) if low else golden
    what = f"vs the oracle's ({dtype}, {shape_of(case)}, sinks shifted by {sink_shift})"
    conditioning = Conditioning(q, k, v, d_out, **kwargs)
    assert_gradients_golden(grads, golden, reference, case, what, conditioning)


# --- GRAD-3: where nothing is seen, nothing flows back ------------------------------------------


@st.composite
def unseen_cases(draw: st.DrawFn) -> AttnCase:
    """Cases with keys no query sees (a window behind a few queries) or, with "blind", queries that see
    no key (Tq > Tk)."""
    case = draw(kernel_cases(few_queries=True))
    if TARGET.supports("window"):
        case = replace(case, window=draw(st.integers(1, max(1, case.tk // 2))))
    if TARGET.supports("blind") and draw(st.booleans()):
        case = fit_to_target(replace(case, tq=case.tk + draw(st.integers(1, 3))))  # within max_len
    return case


@pytest.mark.req("GRAD-3")
@example(case=fit_to_target(AttnCase(1, 4, 2, 2, 2 * B + 1, 4, 3, 3, True, seed=5)), seed=3)
@given(case=unseen_cases(), seed=seeds)
def test_what_no_query_sees_gets_exactly_zero_gradient(case, seed, device):
    """dK and dV of a key no query may see, and dQ of a query that sees no key, are exactly 0 (not small:
    a recomputation that forgot the mask leaks into them)."""
    if not holds(TARGET, "hidden_keys") and not TARGET.supports("blind"):
        if TARGET.mask_mod is None:
            pytest.skip(lacks(TARGET, "window", "decode", "blind"))
        pytest.skip(f"{law_problem(TARGET, 'hidden_keys')}; and it lacks: blind")
    dtype = torch.float32
    q, k, v, sinks = leaves(case, device, dtype)
    kwargs = case.keywords(sinks, device)
    seen = declared_mask(q, k, **kwargs)  # (B, Hq, Tq, Tk)
    unseen_keys = ~seen.any(dim=2).view(case.batch, case.n_kv_heads, case.group, case.tk).any(dim=2)
    blind_queries = ~seen.any(dim=-1)  # (B, Hq, Tq)
    assume(bool(unseen_keys.any() or blind_queries.any()))
    dq, dk, dv, _ = backward(q, k, v, upstream(case, seed, device, dtype), **kwargs)
    what = f"({shape_of(case)})"
    keys = torch.nonzero(unseen_keys.any(dim=(0, 1))).flatten().tolist()
    unseen = unseen_keys.to(dk.device)
    assert_exactly_zero(dk[unseen], f"dK of keys {keys} that no query sees {what}")
    assert_exactly_zero(dv[unseen], f"dV of keys {keys} that no query sees {what}")
    queries = torch.nonzero(blind_queries.any(dim=(0, 1))).flatten().tolist()
    assert_exactly_zero(dq[blind_queries.to(dq.device)], f"dQ of queries {queries} that see no key {what}")


# --- GRAD-4: causality of the gradients --------------------------------------------------------


@pytest.mark.req("GRAD-4")
@example(case=BLOCK_PLUS_ONE, seed=4, split=0.5)
@given(case=kernel_cases(), seed=seeds, split=st.floats(0, 1))
def test_gradients_ignore_the_upstream_of_queries_that_cannot_see(case, seed, split, device):
    """Change dO of the first c queries: dQ of every later query (dQ_i depends on dO_i alone), and dK and
    dV of every key none of the first c queries may see, stay bitwise the same."""
    dtype = torch.float32
    cut = min(case.tq - 1, int(split * case.tq))
    assume(cut > 0)  # one query or none changed: nothing to compare
    q, k, v, sinks = leaves(case, device, dtype)
    kwargs = case.keywords(sinks, device)
    d_out = upstream(case, seed, device, dtype)
    changed = d_out.clone()
    changed[:, :, :cut] = noise_like(changed[:, :, :cut], seed + 1)
    before = backward(q, k, v, d_out, **kwargs)
    after = backward(q, k, v, changed, **kwargs)
    seen = declared_mask(q, k, **kwargs)[:, :, :cut].any(dim=2)  # (B, Hq, Tk): seen by the first `cut`
    group = seen.view(case.batch, case.n_kv_heads, case.group, case.tk).any(dim=2)
    untouched = (~group).to(device)  # (B, Hkv, Tk): keys none of the first `cut` queries of a group sees
    what = f"after dO of queries 0..{cut - 1} changed ({shape_of(case)})"
    assert_exactly_equal(after[0][:, :, cut:], before[0][:, :, cut:], f"dQ of queries {cut}.. {what}")
    keys = torch.nonzero(untouched.any(dim=(0, 1))).flatten().tolist()
    for name, i in (("dK", 1), ("dV", 2)):
        assert_exactly_equal(after[i][untouched], before[i][untouched], f"{name} of keys {keys} {what}")


# --- GRAD-1: gradcheck, with whatever the target supports ----------------------------------------


@pytest.mark.req("GRAD-1")
@both_paths
@pytest.mark.needs("float64")
@example(seed=0, window=2, tq=6, use_sinks=True, scale=None)
@example(seed=1, window=None, tq=4, use_sinks=False, scale=None)
@given(
    seed=seeds,
    window=st.one_of(st.none(), st.integers(1, 4)),
    tq=st.integers(1, 6),
    use_sinks=st.booleans(),
    scale=st.one_of(st.none(), st.floats(0.2, 1.5)),
)
def test_gradcheck(seed, window, tq, use_sinks, scale, device):
    """Finite differences against the target's own gradients in float64, over Tk = 4 keys: 4 query heads
    on 2 KV heads with "gqa", Tq < 4 with "decode", Tq > 4 (queries that see no key) with "blind",
    dv != d with "value_dim", a window, sinks and a scale where the target takes them."""
    tq = tq if (tq < 4 and TARGET.supports("decode")) or (tq > 4 and TARGET.supports("blind")) else 4
    case = fit_to_target(AttnCase(1, 4, 2, tq, 4, 3, 2, window, use_sinks, seed=seed))
    q, k, v, sinks = leaves(case, device, torch.float64)
    scale = scale if TARGET.supports("scale") else None

    def attention(q, k, v, *sink):
        return TARGET.attention(q, k, v, **case.keywords(sink[0] if sink else None, device, scale=scale))

    inputs = (q, k, v) if sinks is None else (q, k, v, sinks)
    # An interpreted Triton kernel takes ~0.1 s a call, and a full gradcheck ~300 calls an example: torch's
    # fast mode checks random projections of the Jacobian instead of each entry, in a few calls
    fast = interpreted.active()
    assert torch.autograd.gradcheck(attention, inputs, fast_mode=fast), (
        f"gradcheck{' (fast mode)' if fast else ''} failed ({shape_of(case)}, scale={scale})"
    )
