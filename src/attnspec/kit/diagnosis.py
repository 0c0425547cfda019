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

import math
import os
import re
from dataclasses import dataclass, replace
from functools import partial

import torch

from attnspec.kit.conventions import (
    TERSE,
    cache_ignored,
    convention_mismatch,
    layer_convention_mismatch,
    loosely_equal,
    rope_convention_mismatch,
)
from attnspec.kit.loading import current, running
from attnspec.kit.references import declared_attention, declared_keywords, declared_layer_keywords
from attnspec.kit.target_checks import KEYWORDS
from attnspec.protocol.declared import declaration
from attnspec.protocol.memory_layouts import as_given, heads_after_positions
from attnspec.protocol.targets import LayerKind, LayerSpec, Target
from attnspec.specs.counterfactuals import AttentionCase, Counterfactual, LayerCase, at_attention, at_layer
from attnspec.specs.mods import mask_values
from attnspec.specs.oracle import Call, attention_layer_oracle, rope_oracle

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


def _randn(*shape: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(SEED + seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


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


BATCH_LEAK = (
    "sequences of a batch see each other: the first sequence's outputs change when only the second "
    "changes (keys or values repeated over a folded batch * heads axis with repeat instead of "
    "repeat_interleave, or a view that mixes the batch and head axes): keep each sequence's rows its own"
)


def batch_finding(out: object, golden: torch.Tensor) -> str | None:
    """Structural localisation on a batch of several sequences: only the rows of the sequences after the
    first are wrong."""
    if not isinstance(out, torch.Tensor) or out.shape != golden.shape or golden.shape[0] < 2:
        return None
    if not loosely_equal(out[:1], golden[:1]) or loosely_equal(out, golden):
        return None
    return (
        "only the sequences after the first of a batch are wrong (the first is right): a batch offset "
        "lost (a pointer or index not advanced by b * stride), or heads repeated over a folded "
        "batch * heads axis with repeat instead of repeat_interleave: index each sequence's own rows"
    )


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
    q = _randn(probe.batch, n_heads, probe.tq, d, seed=1, dtype=torch.float64).mul(probe.spread).to(dtype)
    k, v = (_randn(probe.batch, n_kv_heads, probe.tk, d, seed=seed, dtype=dtype) for seed in (2, 3))
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
    x = _randn(probe.batch, probe.tq, spec.d_model, seed=4, dtype=dtype)
    out = layer.forward(x.to(device), 0)
    keywords = declared_layer_keywords(target, layer, spec)
    golden = attention_layer_oracle(x, **keywords)
    convention = layer_convention_mismatch(out, golden, x, **keywords)
    if convention is not None:
        return convention
    found = behaves_as_if(out, golden, at_layer(), lambda c: c.layer(LayerCase(x, keywords)))
    found = found or batch_finding(out, golden)
    if found is None and probe.batch > 1 and not loosely_equal(out, golden):
        other = x.clone()
        other[1:] = _randn(probe.batch - 1, probe.tq, spec.d_model, seed=9, dtype=dtype)
        moved = layer.forward(other.to(device), 0)
        if not loosely_equal(moved[:1], out[:1].detach().cpu().double()):
            return BATCH_LEAK
    if found is not None or layer.decode is None or not target.supports("cache"):
        return found
    chunks = (3, 1, 2)  # a prompt, then one token, then two
    decoded = layer.decode(x.to(device), list(chunks))
    case = LayerCase(x, keywords, chunks)
    return behaves_as_if(decoded, golden, at_layer(), lambda c: c.layer(case))


def module_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """What a module (a black box) shows on two sequences that differ in their last token alone: two
    outputs for one input in eval mode (dropout left on); the first rows changed in a decoder (a
    future token seen: no causal mask) or unchanged in an encoder that declares every key visible (a
    causal mask left on)."""
    gen = torch.Generator().manual_seed(SEED)
    if target.vocab_size is not None:
        x = torch.randint(0, target.vocab_size, (1, 6), generator=gen).to(device)
        changed = x.clone()
        changed[:, -1] = (x[:, -1] + 1) % target.vocab_size
        module = target.module_in(torch.get_default_dtype(), x.device)
    else:
        x = torch.randn(1, 6, target.d_model, generator=gen, dtype=torch.float64).to(device, dtype)
        changed = x.clone()
        changed[:, -1] += torch.randn(x.shape[-1], generator=gen, dtype=torch.float64).to(device, dtype)
        module = target.module_in(dtype, x.device)
    first, second, moved = module(x), module(x), module(changed)
    if not all(
        isinstance(out, torch.Tensor) and out.shape[:2] == x.shape[:2] for out in (first, second, moved)
    ):
        return None
    if not torch.equal(first.nan_to_num(), second.nan_to_num()):
        return MODULE_DROPOUT
    early_rows_moved = not loosely_equal(moved[:, :-1], first[:, :-1].detach().cpu().double())
    if bidirectional_mod(target) is not None and not early_rows_moved:
        return MODULE_CAUSAL_ON
    if target.mask_mod is None and target.score_mod is None and not target.schedule and early_rows_moved:
        rows = (moved[:, :-1] - first[:, :-1]).detach().abs().flatten(2).amax(-1).amax(0).cpu()
        changed = [i for i, change in enumerate(rows.tolist()) if change > 1e-9]
        return MODULE_ONE_AHEAD if changed == [x.shape[1] - 2] else MODULE_FUTURE_SEEN
    if target.supports("chunks") and target.decode is not None:
        decoded = target.module_method("decode", dtype, x.device)(x, [3, 1, 2])
        if not loosely_equal(decoded, first.detach().cpu().double()):
            ignored = cache_ignored(decoded, x, [3, 1, 2], lambda chunk, start: module(chunk), "the module")
            if ignored is not None:
                return ignored
    if target.vocab_size is None and target.supports("float64") and dtype == torch.float64:
        nudged = module(x * (1 + 1e-12))
        if torch.equal(nudged, first):
            return MODULE_FLOAT32
    return padding_finding(target, module, x) if target.supports("padding") else None


def padding_finding(target: Target, module, x: torch.Tensor) -> str | None:
    """Whether the module gives a sequence, left-padded by one token under its attention_mask, the
    outputs it gives that sequence alone; where it does not, whether it gave what the pad seen gives."""
    pad = x[:, :1].clone()
    padded = torch.cat([pad, x], dim=1)
    mask = torch.ones(padded.shape[:2], dtype=torch.long, device=x.device)
    mask[:, 0] = 0
    alone, masked, unmasked = module(x), module(padded, attention_mask=mask), module(padded)
    if not loosely_equal(masked[:, 1:], alone.detach().cpu().double()):
        return PADDING_IGNORED if loosely_equal(masked, unmasked.detach().cpu().double()) else PADDING_SEEN
    if not (target.supports("chunks") and target.decode is not None):
        return None
    dtype = torch.get_default_dtype() if target.vocab_size else x.dtype
    decode = target.module_method("decode", dtype, x.device)
    chunks = [3, padded.shape[1] - 3]
    decoded = decode(padded, chunks, attention_mask=mask)
    if loosely_equal(decoded[:, 1:], masked[:, 1:].detach().cpu().double()):  # the pad's own row is any
        return None
    plain = decode(padded, chunks)
    if not loosely_equal(plain, unmasked.detach().cpu().double()):
        return None  # the decode is wrong without padding too: its own finding says how
    dropped = loosely_equal(decoded[:, 1:], plain[:, 1:].detach().cpu().double())
    return PADDING_DROPPED_IN_DECODE if dropped else PADDED_DECODE


MODULE_DROPOUT = (
    "behaves as if: dropout is active in eval mode: two calls on one input give different outputs (F21): "
    "gate dropout on self.training (F.dropout(x, p, training=self.training))"
)
MODULE_CAUSAL_ON = (
    "behaves as if: a causal mask is left on an encoder: no earlier output changes with the last token, "
    "though the target declares every key visible (F25): drop the causal mask (is_causal=False)"
)
MODULE_FUTURE_SEEN = (
    "a future token is seen: every earlier output changes with the last token alone (F1 or F19: a mask "
    "that adds 0, is_causal lost on the way to attention; or a statistic taken over the whole sequence): "
    "mask the keys after each query"
)
MODULE_ONE_AHEAD = (
    "the causal mask is off by one: each query also sees the one token after it (only the output just "
    "before the last token changes with it) (F2: triu(diagonal=2) for diagonal=1, j <= i + 1): keep "
    "the keys j <= i"
)


MODULE_FLOAT32 = (
    "precision: the float64 module computes in float32 somewhere: an input changed by one part in 1e12 "
    "gives the very same output (a norm, a softmax or RoPE's angles cast to float32): compute in the "
    "input's dtype, or drop the capability 'float64'"
)
PADDING_IGNORED = (
    "behaves as if: the padding mask is ignored: a left-padded sequence's outputs see its pad, as without "
    "the attention_mask (F17): hide the pads' keys (pass the mask on, and combine it with the causal one)"
)


PADDING_SEEN = (
    "a left-padded sequence's outputs differ from the sequence's alone, though the attention_mask marks "
    "the pad (F17: the pad's key seen, the mask inverted or dropped on the way, or positions counted from "
    "the pad): hide the pads' keys and number each sequence's positions from its first real token"
)
PADDED_DECODE = (
    "decoded in chunks, a left-padded sequence's outputs differ from its one pass, though without padding "
    "the decode is right (F18: the padding mask dropped once a cache is attached, or the cached positions "
    "not offset by the pads): hand the mask to every chunk's attention"
)
PADDING_DROPPED_IN_DECODE = (
    "behaves as if: the padding mask is dropped once a cache is attached: decoded in chunks, a padded "
    "sequence's outputs are those without its attention_mask (F18): hand the mask to every chunk's "
    "attention, the cached positions' columns included"
)


def bidirectional_mod(target: Target):
    """The target's mask_mod where it lets every query see every key (an encoder's), else None."""
    mod = target.mask_mod
    if mod is None:
        return None
    try:
        seen = mask_values(mod, 1, 1, 4, 4)
    except Exception:  # a mod the grid cannot evaluate: no claim on it
        return None
    return mod if bool(seen.all()) else None


def rope_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    x, positions = _randn(1, 2, 5, target.head_size(8), seed=5, dtype=dtype), [0, 3, 1, 7, 12]
    base = float(target.rope_base or 10000.0)
    out = target.rope(x.to(device), torch.tensor(positions, device=device), base)
    golden = rope_oracle(x, positions, base, rotary_dim=target.rotary_dim(x.shape[-1]))
    return rope_convention_mismatch(out, golden, x, positions, base)


def _kernel_call(
    target: Target, tq: int, tk: int, dtype: torch.dtype, device, low: bool = False, sinks: bool = False
) -> bool:
    """Whether the target gives the oracle's output (loosely) on Tq queries over Tk keys; ``low``: every
    logit far below zero (about -1e6), the rest as usual; with ``sinks`` where the target takes them."""
    q = _randn(1, 2, tq, 4, seed=1, dtype=torch.float64)
    k, v = (_randn(1, 2, tk, 4, seed=seed, dtype=torch.float64) for seed in (2, 3))
    if low:
        q[..., 0], k[..., 0] = 1000.0, -2000.0
    q, k, v = (t.to(dtype) for t in (q, k, v))
    keywords = dict(KEYWORDS, sinks=torch.linspace(-1.0, 1.5, 2, dtype=dtype) if sinks else None)
    moved = {name: value.to(device) if torch.is_tensor(value) else value for name, value in keywords.items()}
    with as_given():
        out = target.attention(q.to(device), k.to(device), v.to(device), **moved)
    out = out[0] if isinstance(out, tuple) else out
    return loosely_equal(out, declared_attention(q, k, v, **keywords)[0])


KERNEL_CAUSES = {
    "several": "only when the keys span several key blocks (one whole block is right): the online softmax's "
    "rescale: multiply the accumulator and the running sum by exp(m_old - m_new) whenever the max grows",
    "partial": "only when the last key or query block is partial (whole blocks are right): the last partial "
    "block dropped (a block count rounded down) or its padding not masked",
    "low": "only at logits far below zero (about -1e6; ordinary logits are right): a running max that "
    "starts at 0 or at a finite sentinel, or none: start it at -inf and subtract it before exp",
    "decode": "only on the decode path (a few queries over more keys than its switch lengths; the square "
    "problems are right): combine the key splits rescaled by each split's max, the sink counted once",
    "half": "only at fp16/bf16 (float32 is right): the scores or the accumulator kept in half precision: "
    "score and accumulate in float32, round the result once",
}


def kernel_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """Structural localisation for a blocked kernel (one that declares its block sizes): which of
    one whole key block, several whole blocks, a partial last block, logits far below zero, the decode
    path and half precision it gets wrong, said as the cause: the first of them wrong where one whole
    block is right (several blocks before a partial one, which spans several too; the decode path
    over whole blocks)."""
    size = min(target.blocks)
    if target.max_len is not None and target.max_len < 2 * size + 3:
        return None
    whole = math.lcm(*target.blocks)  # a length of whole blocks of every size
    longest = -(-(max([*target.switches, 2 * size + 3]) + 1) // whole) * whole
    if target.max_len is not None and longest > target.max_len:
        longest = target.max_len
    right = {
        "one": _kernel_call(target, size, size, dtype, device),
        "several": _kernel_call(target, 2 * size, 2 * size, dtype, device),
        "partial": _kernel_call(target, 2 * size + 3, 2 * size + 3, dtype, device),
        "low": _kernel_call(target, size, size, dtype, device, low=True),
    }
    if target.supports("decode"):
        right["decode"] = _kernel_call(target, 1, longest, dtype, device, sinks=target.supports("sinks"))
    if target.supports("float16"):
        right["half"] = _kernel_call(target, 2 * size + 3, 2 * size + 3, torch.float16, device)
    if not right["one"]:
        return None  # wrong on a single whole block: no boundary or path to blame
    wrong = [name for name, fine in right.items() if not fine]  # in order: what the others build on first
    return KERNEL_CAUSES[wrong[0]] if wrong else None


def cross_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """Whether a cross-attention layer's first query ignores the context's last token: a causal mask on
    the context, which has no order."""
    spec = target.fitted(LayerSpec(12, 2, 2, 4, seed=SEED, dtype=dtype, device=device, context_dim=10))
    layer = target.layer(spec)
    x = _randn(1, 5, spec.d_model, seed=4, dtype=dtype).to(device)
    context = _randn(1, 6, spec.context_dim or spec.d_model, seed=5, dtype=dtype).to(device)
    moved = context.clone()
    moved[:, -1] = _randn(moved.shape[-1], seed=6, dtype=dtype).to(device)
    out, out_moved = layer.forward(x, 0, context=context), layer.forward(x, 0, context=moved)
    if not all(isinstance(t, torch.Tensor) and t.shape == x.shape for t in (out, out_moved)):
        return None
    if torch.equal(out[:, 0].nan_to_num(), out_moved[:, 0].nan_to_num()):
        return CROSS_CAUSAL
    return None


CROSS_CAUSAL = (
    "behaves as if: a causal mask is applied to the context: query 0 ignores every context token but "
    "the first (a decoder's mask reused on the encoder's tokens) (F25): cross-attention sees every "
    "context token, with no mask but the context's padding"
)


def named_faults(*variants: Target) -> list[str]:
    """The catalogue faults (F1, F22, ...) the diagnosis of the run's target names, and of each of its
    ``variants`` (the same code declared with more of its features on): what a mutation campaign
    records for each catalogue mutant it kills, to grade the diagnosis (the campaign's terse failures
    switched off for it)."""
    terse = os.environ.pop(TERSE, None)
    said = []
    try:
        for target in (current(), *variants):
            with running(target):
                said.append(target_diagnosis(target) or "")
    finally:
        if terse is not None:
            os.environ[TERSE] = terse
    named = set(re.findall(r"\bF\d+\b", "\n".join(said)))
    return sorted(named, key=lambda fault: int(fault[1:]))


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
        checks += [partial(layer_finding, target, probe, kind) for probe, kind in layer_probes(target)]
    if target.supports("module") and target.module is not None:
        checks.append(partial(module_finding, target))
    checks += [partial(cross_finding, target)] if target.supports("cross") else []
    if target.attention is not None and target.blocks:
        checks.append(partial(kernel_finding, target))
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
