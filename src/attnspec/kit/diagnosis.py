"""The run's diagnosis of its target: which other convention it follows, found once on cases built for it.

A target that follows another convention fails several properties, most of which describe only the
symptom (rows that do not sum to 1, a prefix that changes, ...), and a failing case may not tell
two explanations apart (over 2 keys a window ignored looks like a window of W+1).  target_diagnosis
runs the target on a few small deterministic cases, each of which sets one convention apart from its
neighbours, and explains what it returns there (conventions.py); conftest.py appends the result to
the report of every failing property.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from attnspec.kit.conventions import (
    convention_mismatch,
    layer_convention_mismatch,
    loosely_equal,
    rope_convention_mismatch,
)
from attnspec.kit.references import declared_attention
from attnspec.kit.target_checks import KEYWORDS
from attnspec.protocol.declared import declaration
from attnspec.protocol.memory_layouts import as_given, heads_after_positions
from attnspec.protocol.targets import LayerSpec, Target
from attnspec.specs.oracle import attention_layer_oracle, rope_oracle

SEED = 0


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


def attention_probes(target: Target) -> list[Probe]:
    """One problem per convention the target's capabilities let it show, each free of the others:
    a window of 3 over 8 keys (W+1, W-1 and no window all see other keys), 4 query heads over 2 KV
    heads (tile-style GQA serves query head 1 from KV head 1), 3 queries over 7 keys (top-left
    alignment moves every query; 7 over 3 for a target that has queries which see no key instead), three
    documents (a target that ignores them sees the others), and for a target with mods a plain problem
    (a mod ignored)."""
    probes = [Probe(2, 2, 8, 8, window=3)] if target.supports("window") else []
    probes += [Probe(2, 2, 8, 8, documents=(3, 1, 4))] if target.supports("documents") else []
    if target.score_mod is not None or target.mask_mod is not None:
        probes.append(Probe(2, 2, 6, 6))
    probes += [Probe(4, 2, 6, 6)] if target.supports("gqa") else []
    if target.supports("decode"):
        probes.append(Probe(2, 2, 3, 7))
    elif target.supports("blind"):
        probes.append(Probe(2, 2, 7, 3))
    return probes


def layer_probes(target: Target) -> list[Probe]:
    """The layer's problems: one for RoPE alone, then its window and its GQA each on their own."""
    probes = [Probe(2, 2, 6, 6)]
    probes += [Probe(2, 2, 8, 8, window=3)] if target.supports("window") else []
    return probes + ([Probe(4, 2, 6, 6)] if target.supports("gqa") else [])


def _randn(*shape: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(SEED + seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


def attention_finding(target: Target, probe: Probe, device, dtype: torch.dtype) -> str | None:
    out, q, k, v, keywords = _attention_call(target, probe, device, dtype)
    return convention_mismatch(out, declared_attention(q, k, v, **keywords)[0], q, k, v, **keywords)


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
    q = _randn(1, n_heads, probe.tq, d, seed=1, dtype=dtype)
    k, v = (_randn(1, n_kv_heads, probe.tk, d, seed=seed, dtype=dtype) for seed in (2, 3))
    keywords = {**KEYWORDS, "window": probe.window}  # as the properties call it
    if probe.documents is not None:
        ids = [n for n, length in enumerate(probe.documents) for _ in range(length)]
        keywords["document_ids"] = torch.tensor([ids], dtype=torch.int64)
    moved = {name: value.to(device) for name, value in keywords.items() if torch.is_tensor(value)}
    with as_given():
        out = target.attention(q.to(device), k.to(device), v.to(device), **{**keywords, **moved})
    return out, q, k, v, keywords


def layer_finding(target: Target, probe: Probe, device, dtype: torch.dtype) -> str | None:
    spec = LayerSpec(
        12, probe.n_heads, probe.n_kv_heads, 4, probe.window, seed=SEED, dtype=dtype, device=device
    )
    spec = target.fitted(spec)
    layer = target.layer(spec)
    x = _randn(1, probe.tq, spec.d_model, seed=4, dtype=dtype)
    out = layer.forward(x.to(device), 0)
    keywords = layer.reported()
    keywords.update(
        n_heads=spec.n_heads, n_kv_heads=spec.n_kv_heads, head_dim=spec.head_dim, window=spec.window
    )
    keywords["base"] = spec.base
    return layer_convention_mismatch(out, attention_layer_oracle(x, **keywords), x, **keywords)


def rope_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    x, positions = _randn(1, 2, 5, target.head_size(8), seed=5, dtype=dtype), [0, 3, 1, 7, 12]
    base = float(target.rope_base or 10000.0)
    out = target.rope(x.to(device), torch.tensor(positions, device=device), base)
    golden = rope_oracle(x, positions, base, rotary_dim=target.rotary_dim(x.shape[-1]))
    return rope_convention_mismatch(out, golden, x, positions, base)


def target_diagnosis(target: Target, device: torch.device | str = "cpu") -> str | None:
    """What ``target`` does instead of attnspec's conventions, one line per finding, found on small
    deterministic problems within its capabilities (attention_probes, layer_probes, RoPE at a few
    positions); None when it follows them there or misses the oracle in a way no other convention
    explains.  A problem the target raises an error on tells nothing: its failing properties say why.
    A target with a declaration is told what it was checked under first."""
    dtype = torch.float64 if target.supports("float64") else torch.float32
    probes = attention_probes(target) if target.attention is not None else []  # a module has a layer only
    checks = [partial(attention_finding, target, probe) for probe in probes]
    if target.attention is not None and dtype == torch.float64:
        checks.append(partial(precision_finding, target))
    if target.attention is not None and not target.needs_contiguous:
        checks.append(partial(layout_finding, target))
    checks += [partial(rope_finding, target)] if target.supports("rope") else []
    if target.supports("layer"):
        checks += [partial(layer_finding, target, probe) for probe in layer_probes(target)]
    findings: list[str] = []
    for check in checks:
        try:
            with torch.no_grad():
                finding = check(device, dtype)
        except Exception:  # whatever the target raises: no finding on this problem
            continue
        if finding is not None and finding not in findings:
            findings.append(finding)
    if findings and declaration(target):
        findings.insert(0, f"checked under its declaration: {declaration(target)}")
    return "\n".join(findings) or None
