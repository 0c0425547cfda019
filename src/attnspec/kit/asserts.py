"""Assertion helpers that say what broke in the chapter's words, not just 'tensors differ'."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from attnspec.kit.conventions import (
    convention_mismatch,
    layer_convention_mismatch,
    rope_convention_mismatch,
)
from attnspec.kit.loading import current
from attnspec.kit.references import declared_attention, declared_conditioning, declared_gradient_conditioning
from attnspec.protocol.declared import declaration, mod_name
from attnspec.specs.tolerance import golden_bound, rounded_once_bound, scoring_dtype


def _under() -> str:
    """What an oracle comparison's failure adds for a target with a declaration: what it was checked
    under."""
    declared = declaration(current())
    return f"; checked under its declaration: {declared}" if declared else ""


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


class Conditioning:
    """What rounding each logit at its magnitude lets a correct attention output (``"out"``), its
    weights (``"weights"``) and, given the upstream gradient ``d_out``, its gradients (``"dQ"``, ``"dK"``,
    ``"dV"``) be off by (specs.tolerance.attention_conditioning and gradient_conditioning under the
    target's declaration), for inputs of q's dtype scored as the target scores them.  Computed only
    when a comparison needs it: the assertions try the bound without it first, which nearly every
    passing example meets.  ``call``: the keywords of the target's call (causal, window, sinks, scale,
    document_ids)."""

    GRADIENTS = ("dQ", "dK", "dV")

    def __init__(self, q, k, v, d_out=None, **call) -> None:
        self._inputs = (q, k, v)
        self._d_out = d_out
        self._call = call
        self._terms: tuple[torch.Tensor, torch.Tensor, float] | None = None
        self._gradient_terms: tuple[torch.Tensor, ...] | None = None

    def _computed(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        if self._terms is None:
            dtype = scoring_dtype(self._inputs[0].dtype)
            self._terms = declared_conditioning(*self._inputs, dtype, **self._call)
        return self._terms

    def term(self, of: str) -> torch.Tensor:
        if of in self.GRADIENTS:
            if self._gradient_terms is None:
                dtype = scoring_dtype(self._inputs[0].dtype)
                self._gradient_terms = declared_gradient_conditioning(
                    *self._inputs, self._d_out, dtype, **self._call
                )
            return self._gradient_terms[self.GRADIENTS.index(of)]
        return self._computed()[0 if of == "out" else 1]

    def weights_rounding(self, dtype: torch.dtype) -> torch.Tensor:
        """What rounding each weight to ``dtype`` before the product with V can move the output by (the
        "weights-in-input-dtype" convention): half an ulp of each weight, eps/2 of the weighted mean of
        |V|, plus, for weights below ``dtype``'s normal range, tiny * eps / 2 of every |v|."""
        q, k, v = self._inputs
        mean_abs = declared_attention(q, k, v.abs(), **self._call)[0].detach().cpu().double()
        finfo = torch.finfo(dtype)
        subnormal = finfo.tiny * finfo.eps / 2 * v.detach().abs().double().sum(dim=-2).max().item()
        return mean_abs * (finfo.eps / 2) + subnormal

    def says(self, of: str) -> str:
        term, largest = self.term(of), self._computed()[2]
        return (
            f"; logits up to {largest:.4g} in magnitude, whose rounding in float32 the bound allows for "
            f"with up to {term.max().item() if term.numel() else 0.0:.3e}"
        )


def assert_golden(
    out: torch.Tensor,
    golden: torch.Tensor,
    ref_lowp: torch.Tensor,
    what: str,
    conditioning: Conditioning | None = None,
    of: str = "out",
) -> None:
    """The tolerance policy: max|out - golden| <= FUDGE*max|ref_lowp - golden| + conditioning + floor,
    the conditioning term of ``of`` ("out" or "weights") where the target is attention."""
    assert out.shape == golden.shape, f"{what}: shape {tuple(out.shape)} != golden {tuple(golden.shape)}"
    err = (out.detach().cpu().double() - golden.double()).abs()
    worst = err.max().item() if err.numel() else 0.0
    bound, says = golden_bound(golden, ref_lowp, out.dtype), ""
    if not worst <= bound and conditioning is not None:
        bound, says = golden_bound(golden, ref_lowp, out.dtype, conditioning.term(of)), conditioning.says(of)
    if not worst <= bound:  # also catches NaN
        ref_err = (ref_lowp.double() - golden.double()).abs().max().item()
        raise AssertionError(
            f"{what}: max |out - golden| = {worst:.3e} exceeds the {out.dtype} bound {bound:.3e} "
            f"(oracle in {out.dtype} is off by {ref_err:.3e}), "
            f"{_where(err.nan_to_num(nan=float('inf')))}{says}{_under()}"
        )


def rounded_once_excess(
    out: torch.Tensor, golden: torch.Tensor, ref32: torch.Tensor, conditioning: Conditioning | None, of: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(|out - golden| - the rounded-once bound, the bound), elementwise; the conditioning term of
    ``of`` joins the bound only where an entry exceeds the bound without it."""
    err = (out.detach().cpu().double() - golden.detach().cpu().double()).abs()
    bound = rounded_once_bound(golden, ref32, out.dtype)
    if conditioning is not None and not bool((err <= bound).all()):
        bound = rounded_once_bound(golden, ref32, out.dtype, conditioning.term(of))
    if conditioning is not None and of == "out" and WEIGHTS_ROUNDED in current().conventions:
        if not bool((err <= bound).all()):
            bound = bound + conditioning.weights_rounding(out.dtype)
    return (err - bound).nan_to_num(nan=float("inf")), bound


WEIGHTS_ROUNDED = "weights-in-input-dtype"


def weights_rounded_hint(
    out: torch.Tensor, golden: torch.Tensor, bound: torch.Tensor, conditioning: Conditioning | None, of: str
) -> str:
    """For a target that does not declare "weights-in-input-dtype", whose half-precision output lies
    within that convention's bound: what it does, and how to declare it."""
    if conditioning is None or of != "out" or WEIGHTS_ROUNDED in current().conventions:
        return ""
    err = (out.detach().cpu().double() - golden.detach().cpu().double()).abs()
    if not bool((err <= bound + conditioning.weights_rounding(out.dtype)).all()):
        return ""
    return (
        f"; every entry lies within what rounding the weights to {out.dtype} before the product with V "
        f"gives (FlashAttention-style kernels do, to feed their matrix units): if on purpose, declare it: "
        f"conventions = {{{WEIGHTS_ROUNDED!r}}}"
    )


def assert_rounded_once(
    out: torch.Tensor,
    golden: torch.Tensor,
    ref32: torch.Tensor,
    what: str,
    conditioning: Conditioning | None = None,
    of: str = "out",
) -> None:
    """A half-precision ``out`` is the float32 result rounded once to its dtype: every entry within
    half an ulp of that dtype plus the float32 bound (specs.tolerance.rounded_once_bound)."""
    assert out.shape == golden.shape, f"{what}: shape {tuple(out.shape)} != golden {tuple(golden.shape)}"
    over, bound = rounded_once_excess(out, golden, ref32, conditioning, of)
    if bool((over <= 0).all()):
        return
    err = (out.detach().cpu().double() - golden.detach().cpu().double()).abs()
    idx = tuple(torch.nonzero(over == over.max())[0].tolist())
    float32_err = (ref32[idx].double() - golden[idx].double()).abs().item()
    says = conditioning.says(of) if conditioning is not None else ""
    says += weights_rounded_hint(out, golden, bound, conditioning, of)
    raise AssertionError(
        f"{what}: not the float32 result rounded once to {out.dtype}: {int((over > 0).sum())} of "
        f"{over.numel()} entries exceed half an ulp plus the float32 bound; at index {idx} "
        f"out = {out[idx].item():.6g}, golden = {golden[idx].item():.6g}, |diff| = {err[idx].item():.3e} "
        f"> {bound[idx].item():.3e} (the oracle in float32 is off by {float32_err:.3e} there){says}{_under()}"
    )


def assert_attention_golden(out, golden, ref_lowp, what: str, q, k, v, **conventions) -> None:
    """assert_golden for an attention output, with its conditioning; when it fails and another
    legitimate convention (or the window ignored) explains the output (convention_mismatch), the
    message says so first."""
    mismatch = functools.partial(convention_mismatch, out, golden, q, k, v, **conventions)
    check = functools.partial(assert_golden, conditioning=Conditioning(q, k, v, **conventions))
    _golden_or_convention(out, golden, ref_lowp, what, mismatch, check)


def assert_layer_golden(
    out, golden, ref_lowp, what: str, x, explain: Callable[[], str | None] | None = None, **layer
) -> None:
    """assert_attention_golden for a whole attention layer (layer_convention_mismatch, after
    ``explain``'s explanation where it has one)."""
    mismatch = functools.partial(layer_convention_mismatch, out, golden, x, **layer)
    _golden_or_convention(out, golden, ref_lowp, what, mismatch, first=explain)


def assert_rope_golden(out, golden, ref_lowp, what: str, x, positions: list[int], base: float) -> None:
    """assert_attention_golden for a rotary embedding (rope_convention_mismatch)."""
    mismatch = functools.partial(rope_convention_mismatch, out, golden, x, positions, base)
    _golden_or_convention(out, golden, ref_lowp, what, mismatch)


def assert_equal_within_golden(a, b, golden, lowp_a, lowp_b, what: str) -> None:
    """|a - b| within the golden bounds of both, for two outputs a law says are equal (a shift of every
    position, a permutation of the context): ``golden`` is the value of the law, both sides' oracle in
    float64, so by the triangle inequality the two bounds add up (``lowp_a``, ``lowp_b``: the oracle of
    each side in the tested dtype).  A target whose angle table is in a low dtype drifts with the
    position, and one that sums in another order for another layout rounds otherwise, which a plain
    assert_close between the two outputs would not allow for."""
    bound = golden_bound(golden, lowp_a, a.dtype) + golden_bound(golden, lowp_b, a.dtype)
    worst = (a.detach().cpu().double() - b.detach().cpu().double()).abs().max().item() if a.numel() else 0.0
    assert worst <= bound, f"{what}: max |diff| = {worst:.3e} exceeds the {a.dtype} bound {bound:.3e}"


# A declared score_mod is applied when the output sits this close to the oracle with it, as a share of how
# far the mod moves the oracle's output: above the rounding of logits in the hundreds (BLOOM's ALiBi,
# added as slope * j and shifted by the row, moves a float32 output by ~1% of its effect there), far
# below any mod left out (which sits at the whole of it).
APPLIED = 0.1


def assert_score_mod_applied(out, golden, unmodified, what: str, mod) -> None:
    """``out`` follows the oracle with the declared score_mod ``mod`` (``golden``), not the oracle without it
    (``unmodified``): within APPLIED of the mod's effect, max|golden - unmodified|.  A target whose output
    is the oracle's without the mod is told that it ignores it."""
    out = out.detach().cpu().double()
    golden, unmodified = golden.double(), unmodified.double()
    effect = (golden - unmodified).abs().max().item()
    with_mod = (out - golden).abs().nan_to_num(nan=float("inf")).max().item()
    without = (out - unmodified).abs().nan_to_num(nan=float("inf")).max().item()
    if with_mod <= APPLIED * effect:
        return
    said = (
        f"the declared score_mod {mod_name(mod)} moves the output by up to {effect:.3e} here; max |out - "
        f"oracle with it| = {with_mod:.3e}, without it {without:.3e}"
    )
    if without <= APPLIED * effect:
        raise AssertionError(f"{what}: the target ignores its declared score_mod: {said}{_under()}")
    neither = "the output follows neither the oracle with the score_mod nor the one without it"
    raise AssertionError(f"{what}: {neither}: {said}")


def _golden_or_convention(
    out,
    golden,
    ref_lowp,
    what: str,
    mismatch: Callable[[], str | None],
    check: Callable = assert_golden,
    first: Callable[[], str | None] | None = None,
) -> None:
    """``check``, whose failure leads with the explanation of ``first`` (where it has one), else of
    ``mismatch`` (a neighbouring convention)."""
    try:
        check(out, golden, ref_lowp, what)
    except AssertionError as failure:
        explained = (first() if first is not None else None) or mismatch()
        if explained is None:
            raise
        raise AssertionError(f"{explained}\n{failure}") from None
