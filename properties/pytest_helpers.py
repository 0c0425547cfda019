"""Assertion helpers that say what broke in the chapter's words, not just 'tensors differ'."""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Callable

import torch

from specs.oracle import (
    attention_block_oracle,
    attention_layer_oracle,
    attention_oracle,
    ffn_oracle,
    rms_norm_oracle,
    rope_oracle,
)
from specs.tolerance import golden_bound


def _where(diff: torch.Tensor) -> str:
    idx = torch.nonzero(diff == diff.max())[0].tolist() if diff.numel() else []
    return f"largest at index {tuple(idx)}"


def assert_exactly_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Bitwise equality (NaNs in the same places count as equal)."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if torch.equal(actual, expected):
        return
    diff = (actual.double() - expected.double()).abs().nan_to_num(nan=float("inf"))
    raise AssertionError(
        f"{what}: {int((diff != 0).sum())} of {diff.numel()} entries differ, "
        f"max |diff| = {diff.max().item():.3e}, {_where(diff)}"
    )


def assert_exactly_zero(t: torch.Tensor, what: str) -> None:
    """Every entry is exactly 0 (not small: zero)."""
    if torch.count_nonzero(t) == 0:
        return
    mag = t.double().abs()
    raise AssertionError(
        f"{what}: {int(torch.count_nonzero(t))} entries are not exactly zero, "
        f"max |value| = {mag.max().item():.3e}, {_where(mag)}"
    )


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str, **kwargs: float) -> None:
    """torch.testing.assert_close with the dtype's defaults, prefixed by ``what``."""
    expected = expected.to(device=actual.device, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, msg=lambda m: f"{what}: {m}", **kwargs)


def assert_golden(out: torch.Tensor, golden: torch.Tensor, ref_lowp: torch.Tensor, what: str) -> None:
    """The tolerance policy: max|out - golden| <= FUDGE*max|ref_lowp - golden| + floor."""
    assert out.shape == golden.shape, f"{what}: shape {tuple(out.shape)} != golden {tuple(golden.shape)}"
    bound = golden_bound(golden, ref_lowp, out.dtype)
    err = (out.detach().cpu().double() - golden.double()).abs()
    worst = err.max().item() if err.numel() else 0.0
    if not worst <= bound:  # also catches NaN
        ref_err = (ref_lowp.double() - golden.double()).abs().max().item()
        raise AssertionError(
            f"{what}: max |out - golden| = {worst:.3e} exceeds the {out.dtype} bound {bound:.3e} "
            f"(oracle in {out.dtype} is off by {ref_err:.3e}), "
            f"{_where(err.nan_to_num(nan=float('inf')))}"
        )


def dependency_matrix(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Boolean (T_out, T_in): entry (i, j) is True iff output token i has a non-zero
    derivative with respect to input token j (x is (1, T, D), computed in float64)."""
    x = x.detach().double().requires_grad_(True)
    jac = torch.autograd.functional.jacobian(fn, x)  # (1, T, D, 1, T, D)
    return jac.abs().sum(dim=(0, 2, 3, 5)) != 0


def dot_products(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Unscaled q.k in float64, (B, Hq, Tq, Tk): query head h reads KV head h // (Hq/Hkv)."""
    group = q.shape[1] // k.shape[1]
    kv_head = torch.arange(q.shape[1], device=k.device) // group
    return q.double() @ k.double()[:, kv_head].transpose(-2, -1)


def sink_probability(q, k, sinks, allowed, scale=None) -> torch.Tensor:
    """p_sink = e^s / (e^s + sum over visible j of e^score_j), (B, Hq, Tq) in float64 on the CPU;
    zero everywhere when there are no sinks."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (dot_products(q, k) * scale).cpu()
    if sinks is None:
        return torch.zeros(scores.shape[:-1], dtype=torch.float64)
    scores = scores.masked_fill(~allowed, -math.inf)
    sink = sinks.detach().double().cpu().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.exp(sink[..., 0] - torch.logsumexp(torch.cat([scores, sink], dim=-1), dim=-1))


def scheduled_window(cfg, layer_idx: int) -> int | None:
    """MASK-4: the window on even layers (or on all layers), full attention elsewhere."""
    return cfg.window if cfg.window_layers == "all" or layer_idx % 2 == 0 else None


def block_oracle(
    block, cfg, layer_idx: int, x: torch.Tensor, offset: int = 0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """specs.oracle.attention_block_oracle for an AttentionBlock built from ``cfg`` as layer
    ``layer_idx``.  Every size and switch (eps, RoPE base, window) comes from the config and the
    schedule, only the learned parameters from the module: a module that ignored a config field
    would otherwise agree with itself."""
    return attention_block_oracle(
        x,
        norm_weight=block.norm.weight,
        eps=cfg.norm_eps,
        w_qkv=block.qkv.weight,
        w_out=block.out.weight,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim,
        window=scheduled_window(cfg, layer_idx),
        sinks=block.sinks,
        offset=offset,
        base=cfg.rope_base,
        dtype=dtype,
    )


# The oracles read every size and switch from the CONFIG (and the layer index), and only the
# learned parameters from the module: a module that ignored a config field (norm eps, RoPE base,
# FFN width or activation, the window schedule) would otherwise agree with itself.


def ffn_width(cfg) -> int:
    """FFN-1: the config's ffn_hidden, else 4D (ReLU/GELU) or 8D/3 rounded up to a multiple of 8."""
    if cfg.ffn_hidden is not None:
        return cfg.ffn_hidden
    if cfg.activation == "swiglu":
        at_least = -(-8 * cfg.d_model // 3)  # ceil(8D/3) in integers
        return -(-at_least // 8) * 8
    return 4 * cfg.d_model


def mlp_oracle(mlp, cfg, x: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """x + FFN(RMSNorm(x)) from the oracle's norm and FFN: the config's eps, activation and
    width, the block's own weights."""
    ffn = mlp.ffn
    width = ffn_width(cfg)
    assert ffn.w1.weight.shape == (width, cfg.d_model), (
        f"MLPBlock W1 is {tuple(ffn.w1.weight.shape)}, config asks for ({width}, {cfg.d_model})"
    )
    w3 = ffn.w3.weight if cfg.activation == "swiglu" else None
    normed = rms_norm_oracle(x, mlp.norm.weight, cfg.norm_eps, dtype=dtype)
    branch = ffn_oracle(normed, ffn.w1.weight, ffn.w2.weight, w3, cfg.activation, dtype)
    return x.detach().cpu().to(dtype) + branch


def stack_oracle(
    stack, cfg, x: torch.Tensor, offset: int = 0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """A TransformerStack from the oracle: per layer, the attention block (that layer's window from
    the schedule) and then the MLP block, with the stack's learned parameters."""
    for layer_idx, block in enumerate(stack.blocks):
        x = mlp_oracle(block.mlp, cfg, block_oracle(block.attn, cfg, layer_idx, x, offset, dtype), dtype)
    return x


def message_names(*parts: object) -> str:
    """A ``pytest.raises(match=...)`` regex: the message contains every one of ``parts``
    (an argument's name, its offending value, a shape) as a whole token, in any order.
    Strings are matched literally; other values by their repr (8 -> "8", (2, 6) -> "(2, 6)")."""
    tokens = [p if isinstance(p, str) else repr(p) for p in parts]
    # A token may not continue a longer word or number: "0" must not match in "10" or "0.5".
    return "(?s)^" + "".join(rf"(?=.*(?<![\w.-]){re.escape(t)}(?!\w|\.\d))" for t in tokens)


def names(word: str) -> str:
    """A regex that finds ``word`` as a whole word (q must not match 'sequence')."""
    return rf"(?<![A-Za-z_]){re.escape(word)}(?![A-Za-z_])"


def mentions_all(*words: str) -> str:
    """A regex that matches when every one of the regexes ``words`` matches somewhere in the message."""
    return "(?s)^" + "".join(rf"(?=.*{w})" for w in words)


def names_value(word: str, value: object) -> str:
    """A regex for ``word`` followed by its value (``q (2, 0, 3)``, ``window=-2``, ``tk: 0``):
    ERR-1 asks the message to name the argument *and* its value."""
    return names(word) + r"\s*[=:]?\s*" + re.escape(str(value)) + r"(?![\w.])"


@contextlib.contextmanager
def recorded_calls(module, name: str, record: Callable, **values):
    """Wrap ``module.name`` so that each call appends ``record(*args, **kwargs)`` to the list
    this yields (other attributes of ``module`` set as in module_attributes)."""
    wrapped = getattr(module, name)
    calls: list = []

    def recording(*args, **kwargs):
        calls.append(record(*args, **kwargs))
        return wrapped(*args, **kwargs)

    with module_attributes(module, **{name: recording}, **values):
        yield calls


@contextlib.contextmanager
def module_attributes(module, **values):
    """Set attributes of ``module`` (a tile size, a wrapped function) for the duration of a block."""
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def first_match(out: torch.Tensor, candidates) -> str | None:
    """The description of the first (description, expected output thunk) that ``out`` matches,
    within a loose tolerance of its dtype (a convention changes outputs by far more); None if none."""
    tolerance = 1e-6 if out.dtype == torch.float64 else 1e-3 if out.dtype == torch.float32 else 3e-2
    for description, expected_output in candidates:
        expected = expected_output()
        err = (out.detach().cpu().double() - expected).abs().max().item()
        if err <= tolerance * max(1.0, expected.abs().max().item()):
            return description
    return None


def window_candidates(window: int | None, oracle: Callable) -> list:
    """The windows one key too wide and one too narrow, as convention_mismatch candidates."""
    if window is None:
        return []
    inclusive = f"a window of W+1 = {window + 1} keys (p-W <= j <= p: an inclusive bound)"
    candidates = [(inclusive, lambda: oracle(window=window + 1))]
    if window > 1:
        candidates.append((f"a window of W-1 = {window - 1} keys", lambda: oracle(window=window - 1)))
    return candidates


INTERLEAVED = "interleaved RoPE pairs (x_2i, x_2i+1), as GPT-J and Meta's original Llama code rotate"
TILED_GQA = "tile-style GQA (query head h reads KV head h % Hkv, like k.repeat)"


def convention_mismatch(out: torch.Tensor, q, k, v, *, causal=True, window=None, sinks=None, scale=None):
    """The other, legitimate attention convention that ``out`` follows, if it follows one: a window
    of W+1 or W-1 keys, tile-style GQA, or top-left alignment; None if none explains it."""
    tq, tk, r = q.shape[2], k.shape[2], q.shape[1] // k.shape[1]
    same = {"causal": causal, "window": window, "sinks": sinks, "scale": scale}

    def oracle(q=q, k=k, v=v, **change):
        return attention_oracle(q, k, v, **{**same, **change})[0]

    def top_left():  # query i at position i: the bottom-right oracle of row i over keys 0..i
        return torch.cat(
            [oracle(q[:, :, i : i + 1], k[:, :, : i + 1], v[:, :, : i + 1]) for i in range(tq)], dim=2
        )

    candidates = window_candidates(window, oracle) if causal else []
    if r > 1:
        candidates.append((TILED_GQA, lambda: oracle(k=k.repeat(1, r, 1, 1), v=v.repeat(1, r, 1, 1))))
    if causal and tq != tk:
        candidates.append(("top-left alignment (query i at position i, like torch's is_causal)", top_left))
    return first_match(out, candidates)


def layer_convention_mismatch(out: torch.Tensor, x: torch.Tensor, **layer) -> str | None:
    """convention_mismatch for a whole layer (``layer``: the keywords of attention_layer_oracle):
    interleaved RoPE pairs, a window of W+1 or W-1 keys, or tile-style GQA."""

    def oracle(**change):
        return attention_layer_oracle(x, **{**layer, **change})

    candidates = [(INTERLEAVED, lambda: oracle(pairs="interleaved"))]
    candidates += window_candidates(layer["window"], oracle)
    if layer["n_heads"] != layer["n_kv_heads"]:
        candidates.append((TILED_GQA, lambda: oracle(gqa="tiled")))
    return first_match(out, candidates)


def rope_convention_mismatch(
    out: torch.Tensor, x: torch.Tensor, positions: list[int], base: float
) -> str | None:
    """convention_mismatch for RoPE alone: interleaved pairs."""
    candidates = [(INTERLEAVED, lambda: rope_oracle(x, positions, base, pairs="interleaved"))]
    return first_match(out, candidates)


CONVENTIONS = "bottom-right queries, p-W < j <= p, KV head h // r and half-split RoPE pairs (DESIGN.md)"


def assert_attention_golden(out, golden, ref_lowp, what: str, q, k, v, **conventions) -> None:
    """assert_golden for an attention output; when it fails and the output follows another
    legitimate convention (convention_mismatch), the message says so first."""
    mismatch = functools.partial(convention_mismatch, out, q, k, v, **conventions)
    _golden_or_convention(out, golden, ref_lowp, what, mismatch)


def assert_layer_golden(out, golden, ref_lowp, what: str, x, **layer) -> None:
    """assert_attention_golden for a whole attention layer (layer_convention_mismatch)."""
    mismatch = functools.partial(layer_convention_mismatch, out, x, **layer)
    _golden_or_convention(out, golden, ref_lowp, what, mismatch)


def assert_rope_golden(out, golden, ref_lowp, what: str, x, positions: list[int], base: float) -> None:
    """assert_attention_golden for a rotary embedding (rope_convention_mismatch)."""
    mismatch = functools.partial(rope_convention_mismatch, out, x, positions, base)
    _golden_or_convention(out, golden, ref_lowp, what, mismatch)


def assert_shift_invariant(shifted, out, golden, lowp_shifted, lowp_out, what: str) -> None:
    """|shifted - out| within the golden bounds of both: ``golden`` is the value of the law (the
    oracle is shift-invariant), so by the triangle inequality the two bounds add up.  A target
    whose angle table is in a low dtype drifts with the position, which a plain assert_close
    between the two outputs would not allow for."""
    bound = golden_bound(golden, lowp_shifted, out.dtype) + golden_bound(golden, lowp_out, out.dtype)
    worst = (shifted.detach().cpu().double() - out.detach().cpu().double()).abs().max().item()
    assert worst <= bound, f"{what}: max |diff| = {worst:.3e} exceeds the {out.dtype} bound {bound:.3e}"


def _golden_or_convention(out, golden, ref_lowp, what: str, mismatch: Callable[[], str | None]) -> None:
    try:
        assert_golden(out, golden, ref_lowp, what)
    except AssertionError as failure:
        other = mismatch()
        if other is None:
            raise
        raise AssertionError(
            f"convention mismatch: the target follows {other}; attnspec's convention is {CONVENTIONS}"
            f"\n{failure}"
        ) from None
