"""ERR-1: malformed inputs to the attention core raise ValueError or TypeError naming the argument
and its value (the offending shape, dtype, type or number).

Each property draws a valid problem, checks that it runs, then breaks one thing about it.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnspec.impl import scaled_dot_product_attention as sdpa
from attnspec.kit.asserts import assert_exactly_equal
from attnspec.kit.messages import mentions_all, message_names, names, names_value
from attnspec.kit.strategies import attn_cases

# These properties check impl/ beyond the attention core: they run only with --impl impl.


ERRORS = (ValueError, TypeError)
small_cases = attn_cases(max_t=5)


def type_name(value: object) -> str:
    """A regex for the type of an offending non-tensor value as a whole word (``list``, ``ndarray``):
    for a TypeError the type is what names the value."""
    return names(type(value).__name__)


def valid(case, device, dtype=torch.float32):
    """The case's tensors as a dict, after checking that the unbroken call is accepted."""
    q, k, v, sinks = case.make(device, dtype)
    sdpa(q, k, v, window=case.window, sinks=sinks)
    return {"q": q, "k": k, "v": v, "sinks": sinks}


def call(args, **kwargs):
    return sdpa(args["q"], args["k"], args["v"], sinks=args["sinks"], **kwargs)


def resized(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    shape = list(t.shape)
    shape[dim] = size
    return torch.randn(shape, dtype=t.dtype, device=t.device)


qkv = st.sampled_from(["q", "k", "v"])


@pytest.mark.req("ERR-1")
@given(case=small_cases, name=qkv, kind=st.sampled_from(["list", "float", "None", "str", "numpy"]))
def test_non_tensor_input(case, name, kind, device):
    args = valid(case, device)
    t = args[name]
    args[name] = bad = {
        "list": t.tolist(),
        "float": 1.0,
        "None": None,
        "str": name,
        "numpy": t.cpu().numpy(),
    }[kind]
    with pytest.raises(ERRORS, match=mentions_all(names(name), type_name(bad))):
        call(args)


@pytest.mark.req("ERR-1")
@given(case=small_cases, name=qkv, rank=st.sampled_from([0, 1, 2, 3, 5, 6]), data=st.data())
def test_wrong_rank(case, name, rank, data, device):
    args = valid(case, device)
    shape = data.draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank), label="shape")
    args[name] = torch.randn(shape, device=device)
    # The message names the argument and its value: the shape of the wrong rank, () included.
    with pytest.raises(ERRORS, match=message_names(name, tuple(shape))):
        call(args)


@pytest.mark.req("ERR-1")
@given(case=small_cases, side=st.sampled_from(["q", "kv"]), extra=st.integers(1, 3))
def test_batch_mismatch(case, side, extra, device):
    args = valid(case, device)
    changed = ("q",) if side == "q" else ("k", "v")
    for name in changed:
        args[name] = resized(args[name], 0, case.batch + extra)
    with pytest.raises(ERRORS, match=mentions_all("(?i:batch)")) as info:
        call(args)
    # Both sides that disagree, each named with its shape: q against k, and every resized tensor.
    named = dict.fromkeys(("q", "k", *changed))
    info.match(message_names(*(part for n in named for part in (n, tuple(args[n].shape)))))


@pytest.mark.req("ERR-1")
@given(
    case=small_cases, name=st.sampled_from(["k", "v"]), dim=st.sampled_from([1, 2]), extra=st.integers(1, 3)
)
def test_k_v_length_or_head_mismatch(case, name, dim, extra, device):
    # k and v must agree in (B, Hkv, Tk); change Tk (dim 2) or Hkv (dim 1) of one of them.
    args = valid(case, device)
    args[name] = resized(args[name], dim, args[name].shape[dim] + extra)
    shapes = message_names("k", tuple(args["k"].shape), "v", tuple(args["v"].shape))
    with pytest.raises(ERRORS, match=shapes):
        call(args)


@pytest.mark.req("ERR-1")
@given(case=small_cases, name=st.sampled_from(["q", "k"]), extra=st.integers(1, 3))
def test_q_k_head_dim_mismatch(case, name, extra, device):
    args = valid(case, device)
    args[name] = resized(args[name], 3, case.head_dim + extra)
    shapes = message_names("head_dim", "q", tuple(args["q"].shape), "k", tuple(args["k"].shape))
    with pytest.raises(ERRORS, match=shapes):
        call(args)


@pytest.mark.req("ERR-1")
@given(case=small_cases, n_kv=st.integers(2, 4), data=st.data())
def test_query_heads_not_a_multiple_of_kv_heads(case, n_kv, data, device):
    n_heads = data.draw(st.integers(1, 9).filter(lambda h: h % n_kv != 0), label="Hq")
    args = valid(case, device)
    args["q"] = resized(args["q"], 1, n_heads)
    args["k"] = resized(args["k"], 1, n_kv)
    args["v"] = resized(args["v"], 1, n_kv)
    args["sinks"] = None
    with pytest.raises(ERRORS, match=mentions_all("(?i:head)", rf"\b{n_heads}\b", rf"\b{n_kv}\b")):
        call(args)


@pytest.mark.req("ERR-1")
@given(case=small_cases, data=st.data())
def test_sinks_of_the_wrong_shape(case, data, device):
    args = valid(case, device)
    shape = data.draw(
        st.one_of(
            st.integers(0, 10).filter(lambda n: n != case.n_heads).map(lambda n: (n,)),
            st.just(()),
            st.just((case.n_heads, 1)),
            st.just((1, case.n_heads)),
        ),
        label="sinks shape",
    )
    args["sinks"] = torch.zeros(shape, device=device)
    with pytest.raises(ERRORS, match=message_names("sinks", tuple(shape))):
        call(args)


@pytest.mark.req("ERR-1")
@given(case=small_cases, kind=st.sampled_from(["list", "float", "numpy"]))
def test_sinks_not_a_tensor(case, kind, device):
    args = valid(case, device)
    bad = {"list": [0.0] * case.n_heads, "float": 0.0, "numpy": torch.zeros(case.n_heads).numpy()}[kind]
    args["sinks"] = bad
    with pytest.raises(ERRORS, match=mentions_all(names("sinks"), type_name(bad))):
        call(args)


@pytest.mark.req("ERR-1")
@given(
    case=small_cases,
    name=qkv,
    dtype=st.sampled_from([torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool, torch.complex64]),
)
def test_non_floating_dtype(case, name, dtype, device):
    args = valid(case, device)
    args[name] = args[name].to(dtype)
    with pytest.raises(ERRORS, match=message_names(name, str(dtype))):
        call(args)


@pytest.mark.req("ERR-1")
@given(case=small_cases, name=qkv, odd=st.sampled_from([torch.float64, torch.float16, torch.bfloat16]))
def test_mixed_dtypes(case, name, odd, device):
    args = valid(case, device)
    args[name] = args[name].to(odd)
    with pytest.raises(ERRORS, match=mentions_all("dtype", names(name), re.escape(str(odd)))):
        call(args)


@pytest.mark.req("ERR-1", "MASK-2")
@given(case=small_cases, window=st.integers(-5, 0))
def test_window_below_one(case, window, device):
    # CONVENTIONS.md: W < 1 is a ValueError; the message names the window and its value.
    args = valid(case, device)
    with pytest.raises(ValueError, match=names_value("window", window)):
        call(args, window=window)


@pytest.mark.req("ERR-1")
@given(case=small_cases, window=st.sampled_from([2.0, 1.5, "3", True, False, [2]]))
def test_window_not_an_int(case, window, device):
    # bool is an int subclass but not a window; the message names the window, its type and value.
    args = valid(case, device)
    with pytest.raises(
        ERRORS, match=mentions_all(names("window"), type_name(window), re.escape(repr(window)))
    ):
        call(args, window=window)


@pytest.mark.req("ERR-1", "MASK-2")
@given(case=small_cases, window=st.integers(1, 6))
def test_window_without_the_causal_mask(case, window, device):
    # A sliding window is causal by definition; asking for one without the causal mask is an error.
    # The message names both arguments with their values.
    args = valid(case, device)
    with pytest.raises(ERRORS, match=mentions_all(rf"\bwindow={window}\b", r"\bcausal=False\b")):
        call(args, causal=False, window=window)


@pytest.mark.req("ERR-1")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="mixed devices need a CUDA device besides the CPU")
@given(case=small_cases, name=st.sampled_from(["q", "k", "v", "sinks"]))
def test_mixed_devices(case, name):
    # One of q, k, v, sinks on the GPU, the rest on the CPU: the message names it and its device.
    args = valid(replace(case, use_sinks=True), torch.device("cpu"))
    args[name] = args[name].to("cuda")
    with pytest.raises(ERRORS, match=mentions_all(names(name), "cuda")):
        call(args)


@pytest.mark.req("ERR-1")
@given(case=small_cases, name=st.sampled_from(["q", "k", "v", "sinks"]))
def test_mixed_devices_meta(case, name, device):
    # The "meta" device exists in every torch build, so a second device is always at hand:
    # one of q, k, v, sinks on it, the rest on the test device.  The message names the
    # argument and the odd device.
    args = valid(replace(case, use_sinks=True), device)
    args[name] = args[name].to("meta")
    with pytest.raises(ERRORS, match=mentions_all(names(name), names("meta"))):
        call(args)


# Zero-size dimensions, each alone: (what, {argument: axis set to 0}).  One empty tensor among
# valid ones must raise just as well as all three empty.
EMPTY_AXES = [
    ("B", {"q": 0, "k": 0, "v": 0}),
    ("Hq", {"q": 1}),
    ("Tq", {"q": 2}),
    ("d", {"q": 3, "k": 3}),
    ("Hkv", {"k": 1, "v": 1}),
    ("Tk", {"k": 2, "v": 2}),
    ("dv", {"v": 3}),
]


@pytest.mark.req("ERR-1")
@pytest.mark.parametrize("axes", [a for _, a in EMPTY_AXES], ids=[w for w, _ in EMPTY_AXES])
@given(case=small_cases)
def test_empty_dimension(axes, case, device):
    args = valid(replace(case, use_sinks=False), device)
    for name, axis in axes.items():
        args[name] = resized(args[name], axis, 0)
    shapes = [names_value(name, tuple(args[name].shape)) for name in axes]
    with pytest.raises(ERRORS, match=mentions_all(*shapes)):
        call(args)


@pytest.mark.req("ERR-1", "ATTN-1")
@pytest.mark.parametrize("causal, window", [(True, None), (True, 1), (False, None)])
def test_smallest_valid_input_is_accepted(causal, window, device):
    # Nothing narrower is refused: B = Hq = Hkv = Tq = Tk = d = dv = 1 runs, and the one key
    # takes all the weight, so the output is v itself.
    q, k, v = (torch.randn(1, 1, 1, 1, device=device) for _ in range(3))
    out, w = sdpa(q, k, v, causal=causal, window=window, return_weights=True)
    assert_exactly_equal(w, torch.ones_like(w), f"weight of the only key (causal={causal}, W={window})")
    assert_exactly_equal(out, v, f"output over one key (causal={causal}, W={window})")
