"""Where a failure lives when no counterfactual of the catalogue fits its output: structural checks,
each on a small deterministic case, said as a cause.  A batch (only the sequences after the first are
wrong; sequences that see each other), a module as a black box (two outputs for one input in eval mode,
earlier outputs that change with the last token or, in an encoder, do not; a left-padded sequence that
sees its pad, in one pass or decoded), a cross-attention layer's context (masked causally), and a
blocked kernel (wrong only over several key blocks, a partial last block, logits far below zero, the
decode path or half precision).  diagnosis.py runs them beside the counterfactuals."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from attnspec.kit.conventions import cache_ignored, loosely_equal
from attnspec.kit.references import cross_keywords, declared_attention, reached, run_keywords
from attnspec.kit.target_checks import KEYWORDS, impossible_specs, raised_as, raised_by_the_kit
from attnspec.protocol.declared import kit_runs
from attnspec.protocol.memory_layouts import as_given
from attnspec.protocol.targets import LayerKind, LayerSpec, Target
from attnspec.specs.mods import mask_values
from attnspec.specs.oracle import attention_layer_oracle, cross_attention_layer_oracle, pre_norm_oracle

SEED = 0


def probe_randn(*shape: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(SEED + seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


def plain_spec(target: Target, device, dtype: torch.dtype) -> LayerSpec:
    """The plain layer the diagnosis asks for: width 12, 2 heads of 4, fitted to the target."""
    return target.fitted(LayerSpec(12, 2, 2, 4, seed=SEED, dtype=dtype, device=device))


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
        "lost (a pointer or index not advanced by b * stride, or by a packed sequence's start in "
        "cu_seqlens), or heads repeated over a folded "
        "batch * heads axis with repeat instead of repeat_interleave: index each sequence's own rows"
    )


def batch_leak(layer, x: torch.Tensor, out: object, golden: torch.Tensor) -> str | None:
    """For a layer that misses the oracle on a batch of several sequences ``x``: whether the first
    sequence's outputs change when only the others change."""
    if x.shape[0] < 2 or not isinstance(out, torch.Tensor) or loosely_equal(out, golden):
        return None
    other = x.clone()
    other[1:] = probe_randn(*other[1:].shape, seed=9, dtype=x.dtype).to(x.device)
    moved = layer.forward(other, 0)
    return BATCH_LEAK if not loosely_equal(moved[:1], out[:1].detach().cpu().double()) else None


def module_inputs(target: Target, device, dtype: torch.dtype) -> tuple:
    """A module's probe: one sequence of 6 tokens (ids for a model, else vectors of ``dtype``), the same
    with its last token changed, and the dtype the module then runs in (a model's: the default)."""
    gen = torch.Generator().manual_seed(SEED)
    if target.vocab_size is not None:
        x = torch.randint(0, target.vocab_size, (1, 6), generator=gen).to(device)
        changed = x.clone()
        changed[:, -1] = (x[:, -1] + 1) % target.vocab_size
        return x, changed, torch.get_default_dtype()
    x = torch.randn(1, 6, target.d_model, generator=gen, dtype=torch.float64).to(device, dtype)
    changed = x.clone()
    changed[:, -1] += torch.randn(x.shape[-1], generator=gen, dtype=torch.float64).to(device, dtype)
    return x, changed, dtype


def module_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """What a module (a black box) shows on two sequences that differ in their last token alone: two
    outputs for one input in eval mode (dropout left on); the first rows changed in a decoder (a
    future token seen: no causal mask) or unchanged in an encoder that declares every key visible (a
    causal mask left on)."""
    x, changed, dtype = module_inputs(target, device, dtype)
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


def left_padded(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` after a pad (a copy of its first token), and the attention_mask that marks the pad 0."""
    padded = torch.cat([x[:, :1].clone(), x], dim=1)
    mask = torch.ones(padded.shape[:2], dtype=torch.long, device=x.device)
    mask[:, 0] = 0
    return padded, mask


def padded_pass_finding(module, x: torch.Tensor) -> str | None:
    """What the module's one pass over ``x`` left-padded by one token under its attention_mask gives
    against ``x`` alone: the same (None), a refusal, NaN, the pad seen."""
    padded, mask = left_padded(x)
    alone, unmasked = module(x), module(padded)
    try:
        masked = module(padded, attention_mask=mask)
    except Exception as error:  # it runs without the mask: the mask is what it refuses
        return PADDING_REFUSED.format(error=raised_as(error)[:120])
    if not loosely_equal(masked[:, 1:], alone.detach().cpu().double()):
        if not masked[:, 1:].isfinite().all() and alone.isfinite().all():
            return PADDING_NAN
        return PADDING_IGNORED if loosely_equal(masked, unmasked.detach().cpu().double()) else PADDING_SEEN
    return None


def padding_finding(target: Target, module, x: torch.Tensor) -> str | None:
    """Whether the module gives a sequence, left-padded by one token under its attention_mask, the
    outputs it gives that sequence alone (also as long as each length where the target switches code
    path); where it does not, whether it gave what the pad seen gives; then the same decoded."""
    longest = math.inf if target.max_len is None else target.max_len - 1
    for length in (x.shape[1], *(n for n in target.switches if n <= longest)):
        longer = x.repeat(1, math.ceil(length / x.shape[1]), *[1] * (x.dim() - 2))[:, :length]
        found = padded_pass_finding(module, longer)
        if found is not None:
            return found
    if not (target.supports("chunks") and target.decode is not None):
        return None
    padded, mask = left_padded(x)
    unmasked, masked = module(padded), module(padded, attention_mask=mask)
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


PADDING_REFUSED = (
    "a left-padded call with an attention_mask of 1s and a 0 for the pad raises ({error}), though the "
    "target declares padding and runs without the mask (F17: the mask's check or its use rejects a valid "
    "mask): accept 0/1 masks and hide the pads' keys"
)
PADDING_NAN = (
    "a left-padded sequence's outputs are NaN: the pad's query sees no key, its softmax over nothing but "
    "-inf is NaN, and the layers after read it as a key or value (0 * NaN) (F1: a row with every key "
    "masked is not set to 0): zero the weights of a query that sees no key"
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


def _kernel_call(
    target: Target, tq: int, tk: int, dtype: torch.dtype, device, low: bool = False, sinks: bool = False
) -> bool:
    """Whether the target gives the oracle's output (loosely) on Tq queries over Tk keys; ``low``: every
    logit the same, far below zero (-1e6: the weights uniform, whatever the rounding of a logit of that
    size, which is the same for every key); with ``sinks`` where the target takes them."""
    q = probe_randn(1, 2, tq, 4, seed=1, dtype=torch.float64)
    k, v = (probe_randn(1, 2, tk, 4, seed=seed, dtype=torch.float64) for seed in (2, 3))
    if low:
        q, k = torch.zeros_like(q), torch.zeros_like(k)
        q[..., 0], k[..., 0] = 1000.0, -2000.0
    q, k, v = (t.to(dtype) for t in (q, k, v))
    keywords = dict(KEYWORDS, sinks=torch.linspace(-1.0, 1.5, 2, dtype=dtype) if sinks else None)
    moved = {name: value.to(device) if torch.is_tensor(value) else value for name, value in keywords.items()}
    with as_given():
        out = target.attention(q.to(device), k.to(device), v.to(device), **moved)
    return loosely_equal(out, declared_attention(q, k, v, **keywords)[0])


KERNEL_CAUSES = {
    "several": "only when the keys span several key blocks (one whole block is right): the online softmax's "
    "rescale (F29): multiply the accumulator and the running sum by exp(m_old - m_new) when the max grows",
    "partial": "only when the last key or query block is partial (whole blocks are right): the last partial "
    "block dropped (a block count rounded down, F32) or its padding not masked (F1)",
    "diagonal": "only where a query's own key is the first of a key block (Tq whole blocks over one key "
    "more; whole blocks and partial ones are right): the causal bound of the block walk one key short, so "
    "the block that starts on the diagonal is skipped (F32): walk the key blocks up to the last query's "
    "position + 1",
    "low": "only at logits far below zero (-1e6 at every key; ordinary logits are right): a running max that "
    "starts at 0 or at a finite sentinel, or none: start it at -inf and subtract it before exp (F28)",
    "decode": "only on the decode path (a few queries over more keys than its switch lengths; the square "
    "problems are right): combine the key splits rescaled by each split's max (F31)",
    "decode sinks": "only on the decode path with sinks (without them it is right): the sink counted once "
    "per key split: add it to the merged sum once, after the splits are combined",
    "half": "only at fp16/bf16 (float32 is right): the scores or the accumulator kept in half precision: "
    "score and accumulate in float32, round the result once",
}


def kernel_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """Structural localisation for a blocked kernel (one that declares its block sizes): which of
    one whole key block, several whole blocks, a partial last block, a causal diagonal on a key block's
    first key, logits far below zero, the decode path and half precision it gets wrong, said as the
    cause: the first of them wrong where one whole block is right (several blocks before a partial one,
    which spans several too; the decode path over whole blocks)."""
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
        "diagonal": not target.supports("decode") or _kernel_call(target, size, size + 1, dtype, device),
        "low": _kernel_call(target, size, size, dtype, device, low=True),
    }
    if target.supports("decode"):
        right["decode"] = _kernel_call(target, 1, longest, dtype, device)
        if target.supports("sinks"):
            right["decode sinks"] = _kernel_call(target, 1, longest, dtype, device, sinks=True)
    if target.supports("float16"):
        right["half"] = _kernel_call(target, 2 * size + 3, 2 * size + 3, torch.float16, device)
    if not right["one"]:
        return None  # wrong on a single whole block: no boundary or path to blame
    wrong = [name for name, fine in right.items() if not fine]  # in order: what the others build on first
    return KERNEL_CAUSES[wrong[0]] if wrong else None


def cross_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """What a cross-attention layer does with its context: leaves its first queries with no context token
    (NaN) where the context is shorter than x; projects its keys and values from x instead; or its first
    query ignores the context's last token (a causal mask on the context, which has no order)."""
    spec = plain_spec(target, device, dtype)
    layer = target.layer(spec)
    x = probe_randn(1, 5, spec.d_model, seed=4, dtype=dtype).to(device)
    short = probe_randn(1, 3, spec.d_model, seed=5, dtype=dtype).to(device)
    out = layer.forward(x, 0, context=short)
    if isinstance(out, torch.Tensor) and out.shape == x.shape:
        blind = [i for i in range(x.shape[1]) if not out[:, i].isfinite().all()]
        if blind:
            return CROSS_NO_KEY.format(queries=_spans(blind), tq=x.shape[1], tc=short.shape[1])
        keywords = cross_keywords(layer, spec)
        normed = pre_norm_oracle(x, *(keywords[name] for name in ("norm", "norm_weight", "norm_bias", "eps")))
        golden, *from_x = (cross_attention_layer_oracle(x, c, **keywords) for c in (short, x, normed))
        if not loosely_equal(out, golden) and any(loosely_equal(out, keys) for keys in from_x):
            return CROSS_FROM_X
    spec = target.fitted(replace(spec, context_dim=10))
    layer = target.layer(spec)
    context = probe_randn(1, 6, spec.context_dim or spec.d_model, seed=5, dtype=dtype).to(device)
    moved = context.clone()
    moved[:, -1] = probe_randn(moved.shape[-1], seed=6, dtype=dtype).to(device)
    out, out_moved = layer.forward(x, 0, context=context), layer.forward(x, 0, context=moved)
    if not all(isinstance(t, torch.Tensor) and t.shape == x.shape for t in (out, out_moved)):
        return None
    if torch.equal(out[:, 0].nan_to_num(), out_moved[:, 0].nan_to_num()):
        return CROSS_CAUSAL
    return None


def _spans(indices: list[int]) -> str:
    return f"{indices[0]}" if len(indices) == 1 else f"{indices[0]}..{indices[-1]}"


CROSS_NO_KEY = (
    "queries {queries} of {tq} return NaN over a context of {tc} tokens: they see no context token, as a "
    "causal mask aligned bottom-right (query i at position Tc - Tq + i) leaves them (F25: a decoder's mask "
    "reused on the encoder's tokens): cross-attention sees every context token, with no mask but the "
    "context's padding"
)
CROSS_FROM_X = (
    "behaves as if: the keys and values are projected from the layer's own input x (or x after the "
    "pre-norm), not from the context: a self-attention path left in the cross-attention layer: project k "
    "and v from the context (the encoder's output)"
)
CROSS_CAUSAL = (
    "behaves as if: a causal mask is applied to the context: query 0 ignores every context token but "
    "the first (a decoder's mask reused on the encoder's tokens) (F25): cross-attention sees every "
    "context token, with no mask but the context's padding"
)


def schedule_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """For a module that declares layers of several kinds: the layers that run as another declared kind
    than the schedule's (a window on the odd layers, on every layer, or on none; global layers counted
    from 1), read from its own layers' runs against the oracle layer of each kind ("layer_runs"), else
    from which inputs each layer's output depends on ("hidden_states") against each kind's reach."""
    kinds = target.schedule
    if len(set(kinds)) < 2:
        return None
    x, _, dtype = module_inputs(target, device, dtype)
    if target.supports("layer_runs"):
        with torch.no_grad():
            runs = kit_runs(target, target.module_method("layer_runs", dtype, x.device)(x))
        if len(runs) != len(kinds):
            return None

        def runs_as(i: int, kind: LayerKind, seen: list[LayerKind]) -> bool:
            keywords = run_keywords(target, runs[i], kind)
            expected = attention_layer_oracle(runs[i].input.double().cpu(), **keywords)
            return loosely_equal(runs[i].output, expected)

        def said(kind: LayerKind) -> str:
            return str(kind)

    elif target.supports("hidden_states") and not target.rows_round_together:
        x = torch.cat([x] * 2, dim=1)  # 12 tokens: past a small window's reach
        depends = dependencies(target.module_method("hidden_states", dtype, x.device), x, target.vocab_size)
        if len(depends) != len(kinds):
            return None

        def runs_as(i: int, kind: LayerKind, seen: list[LayerKind]) -> bool:
            return torch.equal(reached([*seen, kind], x.shape[1]), depends[i])

        def said(kind: LayerKind) -> str:  # its mask: what a layer's reach shows (not its RoPE)
            return str(replace(kind, rope=None, base=None))

    else:
        return None
    misplaced, seen = [], []
    for i, kind in enumerate(kinds):
        if runs_as(i, kind, seen):
            seen.append(kind)
            continue
        others = [other for other in dict.fromkeys(kinds) if other != kind and runs_as(i, other, seen)]
        if not others:
            return None  # wrong in some other way: the properties say how
        misplaced.append(f"layer {i} runs as {said(others[0])}, declared {said(kind)}")
        seen.append(others[0])
    if not misplaced:
        return None
    return (
        f"behaves as if: the layers' kinds are misplaced: {'; '.join(misplaced)} (F8: the sliding window "
        "on the wrong layers, e.g. layer_idx % 2 flipped, every layer windowed, global layers counted "
        "from 1): give each layer the window (or mask) the schedule declares for it"
    )


def dependencies(hidden_states, x: torch.Tensor, vocab_size: int | None) -> list[torch.Tensor]:
    """Each layer's (T, T) bool: which inputs its outputs depend on, one input changed at a time."""
    with torch.no_grad():
        before = list(hidden_states(x))
        depends = [torch.zeros(x.shape[1], x.shape[1], dtype=torch.bool) for _ in before]
        for j in range(x.shape[1]):
            changed = x.clone()
            other = probe_randn(*x[:, j].shape, seed=10 + j, dtype=x.dtype).to(x.device)
            changed[:, j] = (x[:, j] + 1) % vocab_size if vocab_size else other
            for layer, (out, moved) in enumerate(zip(before, hidden_states(changed), strict=True)):
                depends[layer][:, j] = (out != moved).flatten(2).any(-1).any(0).cpu()
    return depends


def refusal_finding(target: Target, device, dtype: torch.dtype) -> str | None:
    """For a target that declares the sizes a layer refuses: the impossible layer it builds without an
    error (a check of its sizes removed)."""
    spec = plain_spec(target, device, dtype)
    for what, impossible in impossible_specs(target, spec, target.layer(spec).rope).items():
        try:
            target.layer(impossible)
        except Exception as error:  # refused, unless the kit raised it reading what was built
            if not raised_by_the_kit(error):
                continue
        return (
            f"builds a layer for {what} without an error, though no layer can compute it (F9: the check that "
            "Hq is a multiple of Hkv, or that the head size is even under RoPE, removed): refuse such sizes "
            "when the layer is built (raise a ValueError)"
        )
    return None
