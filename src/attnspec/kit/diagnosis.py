"""The run's diagnosis of its target: the cause of its failures, found once on cases built for it.

A target with a bug or another convention fails several properties, most of which describe only the
symptom (rows that do not sum to 1, a prefix that changes, ...), and a failing case may not tell
two explanations apart (over 2 keys a window ignored looks like a window of W+1).  target_diagnosis
runs the target on a few small deterministic cases, each of which sets one convention or fault apart
from its neighbours, and explains what it returns there: the other convention it follows
(conventions.py), else the catalogue fault it behaves as if it had (specs/counterfactuals.py: the
oracle with each fault applied), matched within the loose tolerance of its dtype.  `attnspec check`
prints it before the broken requirements; conftest.py appends it to the report of every failing
property.
"""

from __future__ import annotations

import os
import re
import time
import traceback
from dataclasses import dataclass, replace
from functools import partial

import torch

from attnspec.kit import breaches
from attnspec.kit.conventions import (
    TERSE,
    convention_mismatch,
    layer_convention_mismatch,
    loosely_equal,
    rope_convention_mismatch,
)
from attnspec.kit.frames import raised_at
from attnspec.kit.gradient_findings import gradient_finding
from attnspec.kit.loading import running
from attnspec.kit.localisation import (
    SEED,
    batch_finding,
    batch_leak,
    cross_finding,
    kernel_finding,
    module_finding,
    plain_spec,
    probe_randn,
    refusal_finding,
    schedule_finding,
)
from attnspec.kit.recording import described
from attnspec.kit.references import declared_attention, declared_keywords, declared_layer_keywords
from attnspec.kit.target_checks import KEYWORDS, raised_as
from attnspec.protocol.declared import PRECISION_CONVENTIONS, declaration
from attnspec.protocol.memory_layouts import as_given, heads_after_positions
from attnspec.protocol.targets import Layer, LayerKind, LayerSpec, Target
from attnspec.specs.counterfactuals import (
    AttentionCase,
    Counterfactual,
    LayerCase,
    RopeCase,
    at_attention,
    at_layer,
    at_rope,
)
from attnspec.specs.oracle import Call, attention_layer_oracle, rope_oracle


@dataclass(frozen=True)
class Probe:
    """A small causal problem: attention of Tq queries over Tk keys, or a layer over T = Tq tokens;
    ``documents``: the lengths of the documents packed into its keys."""

    n_heads: int
    n_kv_heads: int
    tq: int
    tk: int
    window: int | None = None
    documents: tuple[int, ...] | None = None
    causal: bool = True
    sinks: bool = False
    scale: float | None = None
    spread: float = 1.0  # the std of q: wide enough, a soft-cap's -cap weighs like a visible key
    batch: int = 1


def attention_probes(target: Target) -> list[Probe]:
    """One problem per convention the target's capabilities let it show, each free of the others:
    a window of 3 over 8 keys (W+1, W-1 and no window all see other keys), 4 query heads over 2 KV
    heads (tile-style GQA serves query head 1 from KV head 1), 3 queries over 7 keys (top-left
    alignment moves every query; 7 over 3 for a target that has queries which see no key instead), three
    documents (a target that ignores them sees the others), a plain problem (a mask, a scale, a
    softmax axis or a mod gone wrong), and the sinks, a call that is not causal and an explicit scale
    where the target takes them."""
    probes = [Probe(2, 2, 6, 6)]
    probes += [Probe(2, 2, 8, 8, window=3)] if target.supports("window") else []
    probes += [Probe(2, 2, 8, 8, documents=(3, 1, 4))] if target.supports("documents") else []
    probes += [Probe(2, 2, 6, 6, sinks=True)] if target.supports("sinks") else []
    probes += [Probe(2, 2, 6, 6, causal=False)] if target.supports("non_causal") else []
    probes += [Probe(2, 2, 6, 6, scale=0.3)] if target.supports("scale") else []
    probes += [Probe(4, 2, 6, 6)] if target.supports("gqa") else []
    probes += [Probe(2, 2, 6, 6, spread=100.0)] if target.score_mod is not None else []
    if target.max_batch is None or target.max_batch > 1:
        probes.append(Probe(2, 2, 6, 6, batch=2))
    for length in target.switches:  # where the target changes code path (impl's tiles)
        probes.append(Probe(2, 2, length, length))
        probes += [Probe(2, 2, length, length, window=3)] if target.supports("window") else []
    if target.supports("decode"):
        probes.append(Probe(2, 2, 3, 7))
    elif target.supports("blind"):
        probes.append(Probe(2, 2, 7, 3))
    return probes


def layer_probes(target: Target) -> list[tuple[Probe, LayerKind | None]]:
    """The layer's problems: one for RoPE alone, then its window and its GQA each on their own, and a
    batch of two sequences; for a module that declares a schedule, each kind of layer it declares."""
    probes = [Probe(2, 2, 6, 6)]
    probes += [Probe(2, 2, 8, 8, window=3)] if target.supports("window") else []
    probes += [Probe(4, 2, 6, 6)] if target.supports("gqa") else []
    probes += [Probe(2, 2, 6, 6, sinks=True)] if target.supports("sinks") else []
    probes.append(Probe(2, 2, 6, 6, batch=2))
    kinds = list(dict.fromkeys(target.schedule)) or [None]
    return [(probe, kind) for kind in kinds for probe in probes if kind is None or probe.window is None]


def behaves_as_if(
    out: object, golden: torch.Tensor, counterfactuals: list[Counterfactual], explained
) -> str | None:
    """The catalogue faults whose counterfactual output ``out`` matches (``explained(c)``: the
    counterfactual's output on the case, None where it cannot show there), within the loose tolerance
    of its dtype, each one that differs from the oracle's; None when ``out`` has another shape,
    matches ``golden`` or none of them."""
    if not isinstance(out, torch.Tensor) or out.shape != golden.shape or loosely_equal(out, golden):
        return None
    if not out.detach().abs().amax().item():  # all zeros: nothing computed, no fault to match it with
        return None
    found: list[Counterfactual] = []
    for counterfactual in counterfactuals:
        try:
            expected = explained(counterfactual)
        except Exception:  # a fault the case cannot express (a mod that takes no such index)
            continue
        if expected is None or loosely_equal(expected, golden.double()):
            continue
        if loosely_equal(out, expected) and all(c.says() != counterfactual.says() for c in found):
            found.append(counterfactual)
    if not found:
        return None
    if len(found) == 1:
        return f"behaves as if: {found[0].says()}"
    return "behaves as if one of (this case cannot tell them apart): " + "; or ".join(c.says() for c in found)


def attention_finding(target: Target, probe: Probe, device, dtype: torch.dtype) -> str | None:
    """The other convention the output on ``probe`` follows, else the fault it behaves as if it had."""
    out, q, k, v, keywords = _attention_call(target, probe, device, dtype)
    golden = declared_attention(q, k, v, **keywords)[0]
    # (logits a hundred times wider make a mod's bias negligible: there only a mod's misplacement shows)
    convention = convention_mismatch(out, golden, q, k, v, **keywords) if probe.spread == 1.0 else None
    if convention is not None:
        return convention
    case = AttentionCase(q, k, v, Call(**declared_keywords(q, k, **keywords)))
    found = behaves_as_if(out, golden, at_attention(), lambda c: c.attention(case))
    return found or batch_finding(out, golden)


def case_finding(target: Target, q, k, v, keywords: dict, device="cpu") -> str | None:
    """A failing property's own smallest failing call (reproducers.failing_call) replayed against the
    conventions and the counterfactuals: the one its output follows, or None."""
    moved = {name: value.to(device) if torch.is_tensor(value) else value for name, value in keywords.items()}
    with torch.no_grad(), as_given():
        out = target.attention(q.to(device), k.to(device), v.to(device), **moved)
    out = out[0] if isinstance(out, tuple) else out
    golden = declared_attention(q, k, v, **keywords)[0]
    convention = convention_mismatch(out, golden, q, k, v, **keywords)
    if convention is not None:
        return convention
    case = AttentionCase(q, k, v, Call(**declared_keywords(q, k, **keywords)))
    return behaves_as_if(out, golden, at_attention(), lambda c: c.attention(case))


# errors against the float64 oracle of a target that rounds float64 inputs to float32 somewhere: far
# above float64's rounding (about 1e-15 here), at or below float32's (about 1e-7, 1e-4 after a sum)
FLOAT32_SIZED = (1e-10, 1e-4)


def precision_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """For a target that declares float64: whether it computes float64 inputs in float32 (a softmax,
    a matmul or the whole call), seen in its errors against the oracle on a plain problem: float32's
    size, not float64's."""
    out, q, k, v, keywords = _attention_call(target, Probe(2, 2, 6, 6), device, dtype)
    error = (out.double().cpu() - declared_attention(q, k, v, **keywords)[0].double()).abs().max().item()
    low, high = FLOAT32_SIZED
    if out.dtype != torch.float64 or not low < error <= high:
        return None
    return (
        f"precision: float64 inputs are computed in float32 somewhere (errors of {error:.1e} against the "
        "float64 oracle: float32's rounding, where float64's is about 1e-15); compute in float64 "
        "throughout, or drop the capability 'float64'"
    )


LAYOUT = (
    "layout: the target reads its inputs as if they were contiguous: on contiguous copies it gives the "
    "oracle's output, on q, k, v laid out (B, T, H, d) and transposed, as model code hands them, it does "
    "not; read the inputs' strides (or call .contiguous() on them), or declare "
    "attention.needs_contiguous = True"
)


def layout_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """Whether the target gives the oracle's output on contiguous inputs and not on the same values in
    the layout model code hands attention (memory_layouts.py)."""
    out, q, k, v, keywords = _attention_call(target, Probe(2, 2, 6, 6), device, dtype)
    expected = declared_attention(q, k, v, **keywords)[0]
    strided = (heads_after_positions(t.to(device)) for t in (q, k, v))
    moved = {name: value.to(device) for name, value in keywords.items() if torch.is_tensor(value)}
    on_views = target.attention(*strided, **{**keywords, **moved})
    return LAYOUT if loosely_equal(out, expected) and not loosely_equal(on_views, expected) else None


def _attention_call(target: Target, probe: Probe, device, dtype: torch.dtype):
    """The target's output on ``probe`` (contiguous inputs, as given: memory_layouts.as_given), with
    the inputs and keywords it was called with."""
    d = target.head_size(4)
    n_heads, n_kv_heads = target.head_counts(probe.n_heads, probe.n_kv_heads)
    n_kv_heads = n_kv_heads if target.supports("gqa") else n_heads  # as the properties draw them
    q = (
        probe_randn(probe.batch, n_heads, probe.tq, d, seed=1, dtype=torch.float64)
        .mul(probe.spread)
        .to(dtype)
    )
    k, v = (probe_randn(probe.batch, n_kv_heads, probe.tk, d, seed=seed, dtype=dtype) for seed in (2, 3))
    keywords = {**KEYWORDS, "window": probe.window, "causal": probe.causal, "scale": probe.scale}
    if probe.sinks:
        keywords["sinks"] = torch.linspace(-1.0, 1.5, n_heads, dtype=dtype)
    if probe.documents is not None:
        ids = [n for n, length in enumerate(probe.documents) for _ in range(length)]
        keywords["document_ids"] = torch.tensor([ids] * probe.batch, dtype=torch.int64)
    moved = {name: value.to(device) for name, value in keywords.items() if torch.is_tensor(value)}
    with as_given():
        out = target.attention(q.to(device), k.to(device), v.to(device), **{**keywords, **moved})
    return out, q, k, v, keywords


def layer_finding(
    target: Target, probe: Probe, kind: LayerKind | None, device, dtype: torch.dtype
) -> str | None:
    spec = LayerSpec(
        12,
        probe.n_heads,
        probe.n_kv_heads,
        4,
        probe.window,
        probe.sinks,
        seed=SEED,
        dtype=dtype,
        device=device,
    )
    if kind is not None:  # a kind of layer its schedule declares, as the properties ask for one
        spec = replace(spec, kind=kind, window=kind.size if kind.mask == "window" else None)
        spec = replace(spec, base=kind.base or spec.base)
    spec = target.fitted(spec)
    layer = target.layer(spec)
    x = probe_randn(probe.batch, probe.tq, spec.d_model, seed=4, dtype=dtype)
    out = layer.forward(x.to(device), 0)
    keywords = declared_layer_keywords(target, layer, spec)
    golden = attention_layer_oracle(x, **keywords)
    convention = layer_convention_mismatch(out, golden, x, **keywords)
    if convention is not None:
        return convention
    found = behaves_as_if(out, golden, at_layer(), lambda c: c.layer(LayerCase(x, keywords)))
    found = found or batch_finding(out, golden) or batch_leak(layer, x.to(device), out, golden)
    if found is not None or layer.decode is None or not target.supports("cache"):
        return found
    return decode_finding(target, layer, spec, probe.batch, device, dtype)


# a prompt of two, two tokens, one and three: into an empty cache and past a window of 3, several tokens
# and one, each read back by a later chunk
DECODED = (2, 2, 1, 3)


def decode_finding(
    target: Target, layer: Layer, spec: LayerSpec, batch: int, device, dtype: torch.dtype
) -> str | None:
    """What ``layer``, right in one pass, does wrong decoded in the chunks of DECODED through its cache:
    the fault it behaves as if it had, else (for a windowed layer whose twin without the window decodes
    right) its windowed cache."""
    length = min(sum(DECODED), target.max_len or sum(DECODED))
    chunks = [
        size for size in (min(size, length - sum(DECODED[:i])) for i, size in enumerate(DECODED)) if size > 0
    ]
    x = probe_randn(batch, length, spec.d_model, seed=4, dtype=dtype)

    def run(spec: LayerSpec, layer: Layer) -> tuple[object, torch.Tensor, dict]:
        keywords = declared_layer_keywords(target, layer, spec)
        return layer.decode(x.to(device), chunks), attention_layer_oracle(x, **keywords), keywords

    decoded, golden, keywords = run(spec, layer)
    case = LayerCase(x, keywords, tuple(chunks))
    found = behaves_as_if(decoded, golden, at_layer(), lambda c: c.layer(case))
    if found is not None or spec.window is None or loosely_equal(decoded, golden):
        return found
    full = replace(spec, window=None)
    unwindowed, golden, _ = run(full, target.layer(full))
    return WINDOWED_CACHE if loosely_equal(unwindowed, golden) else None


WINDOWED_CACHE = (
    "decoded in chunks, a windowed layer's outputs differ from its one pass once the window fills, though "
    "the same layer without the window decodes right: its windowed cache keeps, hands over or writes the "
    "wrong positions (F11: eviction off by one, W+1 or W-1 held; F20: trimmed to the last W before the "
    "chunk's first queries attend; or F13: K and V swapped on one of its write paths): keep the last W "
    "positions as they came, and hand a chunk every key its first query sees"
)


AXES = (
    "shapes: it raises on {seq} positions over {heads} heads ({error}) and runs when the positions are as "
    "many as the heads: the heads and positions axes are confused in a view or reshape (F4; or F15 where "
    "it groups the query heads by KV head): split (B, T, H*d) as view(B, T, H, d).transpose(1, 2), and "
    "group q (B, Hq, T, d) as (B, Hkv, r*T, d)"
)


SAME_CALLS = 200  # calls of one problem: a target that answers otherwise 1 call in 50 shows in 98% of runs
SAME_CALLS_S = 3.0  # seconds they may take in all (a slow target makes fewer)
SAME = {torch.float64: 1e-10, torch.float32: 1e-5}  # tolerance of a repeated call (float16 and others: 1e-2)
NONDETERMINISTIC = (
    "nondeterministic: the same inputs gave different outputs on two calls (calls 1 and {n} of {call}: the "
    "outputs differ by up to {diff:.3g}); every failure below may be this one: the properties take a target "
    "to be a function of its inputs"
)


def determinism_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """Whether the same plain problem, called again and again (up to SAME_CALLS times within
    SAME_CALLS_S seconds), gives the first call's output each time."""
    if target.attention is None:
        return None
    probe = Probe(2, 2, 6, 6)
    first, q, k, v, keywords = _attention_call(target, probe, device, dtype)
    tolerance = SAME.get(first.dtype, 1e-2)
    started = time.monotonic()
    for n in range(2, SAME_CALLS + 1):
        out = _attention_call(target, probe, device, dtype)[0]
        if not torch.allclose(out, first, rtol=tolerance, atol=tolerance, equal_nan=True):
            diff = (out.double() - first.double()).abs().nan_to_num(float("inf")).max().item()
            call = described({"q": q, "k": k, "v": v, "keywords": keywords})
            return NONDETERMINISTIC.format(n=n, call=call, diff=diff)
        if time.monotonic() - started > SAME_CALLS_S:
            return None
    return None


def shapes_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """For a target that raises on the plain problem (6 positions over 2 heads, as attention or as a
    layer): whether the same problem runs with 2 positions, as many as the heads (a view or reshape
    that takes one axis for the other); else where in its own code it raises."""

    def attention(seq: int) -> None:
        _attention_call(target, Probe(2, 2, seq, seq), device, dtype)

    def layer(seq: int) -> None:
        spec = plain_spec(target, device, dtype)
        target.layer(spec).forward(probe_randn(1, seq, spec.d_model, seed=4, dtype=dtype).to(device), 0)

    def raised(call, seq: int) -> Exception | None:
        try:
            call(seq)
        except breaches.Breach:  # not an error of its own code: the run says what it did
            raise
        except Exception as error:  # what the target raises is the evidence
            return error
        return None

    levels = [attention] if target.attention is not None else []
    levels += [layer] if target.supports("layer") else []
    for call in levels:
        error = raised(call, 6)
        if error is None:
            continue
        if raised(call, 2) is None:
            return AXES.format(seq=6, heads=2, error=raised_as(error)[:120])
        where = raised_at(traceback.extract_tb(error.__traceback__))
        return CRASH.format(
            level=call.__name__, error=raised_as(error)[:120], where=f" ({where})" if where else ""
        )
    return None


CRASH = (
    "crash: the {level} raises on a plain problem it declares (6 positions over 2 heads): {error}{where}: a "
    "failure of its own code, not an input it may refuse"
)


def rope_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    x, positions = probe_randn(1, 2, 5, target.head_size(8), seed=5, dtype=dtype), [0, 3, 1, 7, 12]
    base = float(target.rope_base or 10000.0)
    out = target.rope(x.to(device), torch.tensor(positions, device=device), base)
    rotary_dim = target.rotary_dim(x.shape[-1])
    golden = rope_oracle(x, positions, base, rotary_dim=rotary_dim)
    convention = rope_convention_mismatch(out, golden, x, positions, base)
    case = RopeCase(x, positions, base, rotary_dim)
    return convention or behaves_as_if(out, golden, at_rope(), lambda c: c.rope(case))


def named_faults(*targets: Target) -> list[str]:
    """The catalogue faults (F1, F22, ...) the diagnosis of each of ``targets`` names (the run's target,
    then the same code declared with more of its features on): what a mutation campaign records for
    each catalogue mutant it kills, to grade the diagnosis (the campaign's terse failures switched off
    for it)."""
    terse = os.environ.pop(TERSE, None)
    said = []
    try:
        for target in targets:
            with running(target):
                said.append(target_diagnosis(target) or "")
    finally:
        if terse is not None:
            os.environ[TERSE] = terse
    named = set(re.findall(r"\bF\d+\b", "\n".join(said)))
    return sorted(named, key=lambda fault: int(fault[1:]))


def target_diagnosis(target: Target, device: torch.device | str = "cpu") -> str | None:
    """What is wrong with ``target``, one line per finding, found on small deterministic problems within
    its capabilities (attention_probes, layer_probes, RoPE at a few positions, and localisation.py's
    structural cases): the other convention it follows, the catalogue fault it behaves as if it had,
    or where its failure lives; None when it matches the oracle there or misses it in a way none of
    these explains.  A problem the target raises an error on tells nothing: its failing properties
    say why.  A target with a declaration is told what it was checked under first."""
    dtype = torch.float64 if target.supports("float64") else torch.float32
    probes = attention_probes(target) if target.attention is not None else []  # a module has a layer only
    checks = [partial(shapes_finding, target)]
    checks += [partial(attention_finding, target, probe) for probe in probes]
    if target.attention is not None and dtype == torch.float64:
        checks.append(partial(precision_finding, target))
    if target.attention is not None and not target.needs_contiguous:
        checks.append(partial(layout_finding, target))
    checks += [partial(rope_finding, target)] if target.supports("rope") else []
    if target.supports("layer"):
        checks += [partial(layer_finding, target, probe, kind) for probe, kind in layer_probes(target)]
    if target.supports("layer") and target.supports("sizes"):
        checks.append(partial(refusal_finding, target))
    if target.supports("module") and target.module is not None:
        checks += [partial(module_finding, target), partial(schedule_finding, target)]
    checks += [partial(cross_finding, target)] if target.supports("cross") else []
    if target.attention is not None and target.blocks:
        checks.append(partial(kernel_finding, target))
    checks.append(partial(gradient_finding, target))  # a target with "grad" whose output is right
    try:  # first: a target that answers otherwise to the same call explains every failure at once
        with torch.no_grad():
            nondeterministic = determinism_finding(target, device, dtype)
    except Exception:
        nondeterministic = None
    if nondeterministic is not None:
        return nondeterministic
    findings: list[str] = []
    for check in checks:
        try:
            with torch.no_grad():
                finding = check(device, dtype)
        except Exception:  # whatever the target raises: no finding on this problem
            continue
        if finding is not None and finding not in findings:
            findings.append(finding)
    # (a convention of precision changes no case the findings are about: not said here)
    declared = declaration(replace(target, conventions=target.conventions - PRECISION_CONVENTIONS))
    if findings and declared:
        findings.insert(0, f"checked under its declaration: {declared}")
    return "\n".join(findings) or None
