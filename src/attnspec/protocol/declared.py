"""A target's declaration: the neighbouring conventions it follows on purpose, what its attention computes
beyond the plain causal softmax (FlexAttention's score_mod and mask_mod), and the packed sequences it
takes (the "documents" capability).  The kit checks it under its declaration with every property.

Conventions are exact translations at the target's boundary, so that no property, oracle or strategy
needs to know about them: the kit calls the translated target with attnspec's conventions
(CONVENTIONS.md), and the translation calls the user's code with the problem restated in theirs.

- ``rope-interleaved``: RoPE rotates the pairs (x_2i, x_2i+1), as GPT-J and Meta's original Llama code
  (through complex numbers) do.  The kit's half-split feature i is the target's 2i, its i + d/2 the
  target's 2i + 1: rope() permutes the features in and out, and a layer's reported q and k rows are
  permuted the same way within each head (the attention scores do not change under a permutation of
  the features shared by q and k).  With partial rotary (``rotary_pct``, a layer's ``rotary_dim``),
  the pairs are interleaved within the rotated features only, as GPT-J's are.
- ``window-inclusive``: window W means keys p-W <= j <= p (W + 1 keys), as FlashAttention's
  ``window_size=(W, 0)``: the kit's window W is the target's W - 1 (so the target's 0 is one key).
- ``top-left``: with fewer queries than keys, query i sits at position i (torch's ``is_causal``).  The
  kit's bottom-right problem of Tq queries over Tk keys is the target's problem with Tk - Tq queries
  put before them, whose rows are dropped: the target sees only square causal problems, so a path it
  takes only for Tq < Tk is not exercised.  It cannot take queries that see no key ("blind").
- ``weights-in-input-dtype``: with fp16/bf16 inputs, the softmax weights are rounded to that dtype
  before the product with V (FlashAttention's kernels and their Triton descendants do, to feed the
  matrix units), the scores, running max and sums staying float32: the output may be off by one more
  rounding of each weight, eps/2 of the weighted mean of |V|, beyond the float32 result rounded once
  (ATTN-11's bound).  Not a translation: the bound of the half-precision properties is widened by it.
- ``gqa-tile``: query head h reads KV head h % Hkv (``k.repeat``, x-transformers), not h // r.  The
  kit's query head g·r + j is the target's head j·Hkv + g, which reads the same KV head g: the query
  heads (and the sinks) are permuted on the way in and the output heads back; a layer reports its
  query rows, output columns and sinks in the kit's head order; the target's mods are called with its
  own head numbers (kit_mods).

score_mod and mask_mod change what the attention computes, so they are not translated away: the oracle
applies them (references.py), the laws that hold for them decide which properties run (laws.py), and
the strategies draw what the declaration allows (no window, non-causal call or query before the keys
for a mask_mod, which is the whole mask).  A target with "documents" is handed ``document_ids`` on
every call: the drawn documents, or one document where a property draws none.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnspec.protocol.targets import Layer, LayerRun, LayerSpec, Target
from attnspec.specs.mods import ModError, mask_values, score_values

DECLARABLE = {
    "rope-interleaved": "RoPE pairs (x_2i, x_2i+1), as GPT-J and Meta's original Llama code rotate",
    "window-inclusive": "window W sees p-W <= j <= p, W + 1 keys (FlashAttention's window_size=(W, 0))",
    "top-left": "query i at position i when Tq < Tk (torch's is_causal=True)",
    "gqa-tile": "query head h reads KV head h % Hkv (k.repeat, x-transformers), not h // r",
    "weights-in-input-dtype": "fp16/bf16: the weights rounded to the input dtype before the product with V "
    "(FlashAttention-style kernels feed their matrix units so)",
}
# Conventions of precision, not of what is computed: nothing to translate, a bound widened (kit/asserts.py)
PRECISION_CONVENTIONS = frozenset({"weights-in-input-dtype"})
# What a mask_mod decides for itself: the capabilities and conventions of the built-in causal mask.
BUILT_IN_MASK = ("window", "non_causal", "blind", "window-inclusive", "top-left")


def half_split_order(d: int, rotary_dim: int | None = None) -> list[int]:
    """Feature f of the interleaved layout is feature order[f] of the half-split one: 2i -> i,
    2i + 1 -> i + r/2 over the first r = ``rotary_dim`` features (all d by default), which partial
    rotary rotates (GPT-J pairs (x_2i, x_2i+1) within its rotary_dim); the others stay where they are."""
    r = d if rotary_dim is None else rotary_dim
    return [f // 2 + (r // 2 if f % 2 else 0) for f in range(r)] + list(range(r, d))


def tile_order(n_heads: int, n_kv_heads: int) -> list[int]:
    """The kit's query head of each of the target's under gqa-tile: the target's head j·Hkv + g reads KV
    head g, as the kit's head g·r + j does."""
    group = n_heads // n_kv_heads
    return [(head % n_kv_heads) * group + head // n_kv_heads for head in range(n_heads)]


def target_heads(n_heads: int, n_kv_heads: int) -> list[int]:
    """The target's query head of each of the kit's under gqa-tile (tile_order inverted)."""
    group = n_heads // n_kv_heads
    return [(head % group) * n_kv_heads + head // group for head in range(n_heads)]


def problems(target: Target) -> list[str]:
    """What is wrong with a declaration: unknown conventions, a convention or capability that excludes
    another, or a mod that cannot be evaluated on an index grid."""
    declared, capabilities = target.conventions, target.capabilities
    unknown = sorted(declared - set(DECLARABLE))
    found = [f"unknown convention {name!r}; declarable: {sorted(DECLARABLE)}" for name in unknown]
    if "top-left" in declared and "blind" in capabilities:
        found.append("'top-left' and 'blind' exclude each other: top-left queries past Tk see every key")
    if "gqa-tile" in declared and "gqa" not in capabilities:
        found.append("'gqa-tile' without the 'gqa' capability: with Hq = Hkv both groupings are the same")
    if "weights-in-input-dtype" in declared and "float16" not in capabilities:
        found.append("'weights-in-input-dtype' without the 'float16' capability: it is of fp16/bf16 inputs")
    if target.mask_mod is not None:
        clash = sorted((capabilities | declared) & set(BUILT_IN_MASK))
        if clash:
            found.append(
                f"a mask_mod is the whole mask: {', '.join(clash)} cannot be declared beside it "
                "(the target is called with causal=True, which it may ignore, and no window)"
            )
    found += _mod_problems(target)
    return found + _unused(target)


def _unused(target: Target) -> list[str]:
    """Declarations the properties of this kind of target would drop: a module or a layer has no
    attention call for the conventions of one (its layers report their own windows), a module checked
    as a black box has no heads, head sizes, rotary share, score_mod or head grouping to use them on,
    and a padded batch has two sequences.  One line each: none is dropped silently."""
    found = []
    function_only = [name for name in ("window-inclusive", "top-left") if name in target.conventions]
    if target.attention is None and function_only:
        found.append(
            f"{' and '.join(map(repr, function_only))} are conventions of an attention function's call, and "
            "this target has none: its layers are checked as they report themselves (declare a window "
            "as attnspec counts it, W + 1 keys for a window that sees p - W <= j <= p)"
        )
    if target.attention is None and target.needs_contiguous:
        found.append("needs_contiguous is an attention function's: this target has none")
    white_box = target.layer is not None or target.layer_runs is not None or target.rope is not None
    if target.attention is None and not white_box:
        declared = [
            name
            for name, value in (
                ("heads", target.heads),
                ("kv_heads", target.kv_heads),
                ("head_dims", target.head_dims),
                ("rotary_pct", target.rotary_pct),
                ("score_mod", target.score_mod),
                ("'rope-interleaved'", "rope-interleaved" in target.conventions),
                ("'gqa-tile'", "gqa-tile" in target.conventions),
            )
            if value
        ]
        if declared:
            found.append(
                f"it declares {', '.join(declared)}, which only its layers use, and it reports none: "
                "a module is then checked as a black box (add layer() or layer_runs(), or drop them)"
            )
    if target.module is not None and target.max_batch == 1 and "padding" in target.capabilities:
        found.append("'padding' with max_batch = 1: a padded batch holds two sequences or more")
    return found


# The most query heads a property draws (GQA groups of up to 3 KV heads and 3 or 4 query heads each).
MOST_HEADS = 12


def _mod_problems(target: Target) -> list[str]:
    """A mod that raises on a small index grid, whatever form it is called in (specs/mods.py), or on as
    many heads as the kit may hand the target (a per-head table too short: declare ``heads``)."""
    for n_heads in (2, max(target.heads) if target.heads else MOST_HEADS):
        for kind, mod in (("mask_mod", target.mask_mod), ("score_mod", target.score_mod)):
            try:
                if kind == "mask_mod" and mod is not None:
                    mask_values(mod, 1, n_heads, 3, 4)
                elif mod is not None:
                    score_values(mod, torch.zeros(1, n_heads, 3, 4, dtype=torch.float64))
            except ModError as error:
                if n_heads == 2:
                    return [f"its {kind} {error}"]
                return [
                    f"its {kind} {error}, with {n_heads} query heads: mods that read a per-head table "
                    "declare the query head counts the target takes (OBJ.heads = (8,), say)"
                ]
    return []


def translated(target: Target) -> Target:
    """The target as attnspec's conventions see it: its declared conventions translated away, and with
    "documents" one document filled in where a call gives none."""
    declared = target.conventions
    attention, rope, layer = target.attention, target.rope, target.layer
    if attention is not None:
        if "window-inclusive" in declared:
            attention = _inclusive_window(attention)
        if "top-left" in declared:
            attention = _top_left(attention)
        if "gqa-tile" in declared:
            attention = _tiled_heads(attention)
        if "documents" in target.capabilities:
            attention = _one_document_unless_given(attention)
    if "rope-interleaved" in declared:
        rope = None if rope is None else _interleaved_rope(rope, target)
        layer = None if layer is None else _interleaved_layer(layer)
    if "gqa-tile" in declared and layer is not None:
        layer = _tiled_layer(layer)
    return replace(target, attention=attention, rope=rope, layer=layer)


def kit_mods(target: Target, n_heads: int, n_kv_heads: int, layer_score_mod=None):
    """(score_mod, mask_mod) of ``target`` as the kit's head numbers see them: under gqa-tile the kit's
    head h is the target's target_heads(...)[h], which the target's own mods are called with.  A layer's
    own score_mod (``layer_score_mod``: Layer.score_mod, read from its parameters) replaces the
    target's."""
    score_mod, mask_mod = layer_score_mod or target.score_mod, target.mask_mod
    if "gqa-tile" not in target.conventions or n_heads == n_kv_heads:
        return score_mod, mask_mod
    heads = torch.tensor(target_heads(n_heads, n_kv_heads))

    def in_kit_heads(mod, with_score: bool):
        if mod is None:
            return None
        if with_score:
            return lambda score, b, h, q_idx, kv_idx: mod(score, b, heads[h], q_idx, kv_idx)
        return lambda b, h, q_idx, kv_idx: mod(b, heads[h], q_idx, kv_idx)

    return in_kit_heads(score_mod, True), in_kit_heads(mask_mod, False)


def mod_name(mod) -> str:
    """How a message names a declared mod: its function's name."""
    return getattr(mod, "__qualname__", None) or getattr(mod, "__name__", None) or type(mod).__name__


def declaration(target: Target) -> str:
    """The declaration a target is checked under, in a few words ("" for none): its conventions and its
    mods by name (its capabilities, "documents" among them, have a table of their own)."""
    parts = [f"conventions {', '.join(sorted(target.conventions))}"] if target.conventions else []
    parts += [f"score_mod {mod_name(target.score_mod)}"] if target.score_mod is not None else []
    parts += [f"mask_mod {mod_name(target.mask_mod)}"] if target.mask_mod is not None else []
    return "; ".join(parts)


def _inclusive_window(attention):
    def call(q, k, v, *, window=None, **kwargs):
        return attention(q, k, v, window=None if window is None else window - 1, **kwargs)

    return call


def _top_left(attention):
    def call(q, k, v, *, causal=True, **kwargs):
        before = k.shape[2] - q.shape[2]
        if not causal or before <= 0:
            return attention(q, k, v, causal=causal, **kwargs)
        padded = torch.cat([q.new_zeros(*q.shape[:2], before, q.shape[3]), q], dim=2)
        result = attention(padded, k, v, causal=causal, **kwargs)
        if isinstance(result, tuple):
            return tuple(part[:, :, before:] for part in result)
        return result[:, :, before:]

    return call


def _tiled_heads(attention):
    def call(q, k, v, *, sinks=None, **kwargs):
        order = tile_order(q.shape[1], k.shape[1])
        back = torch.tensor(target_heads(q.shape[1], k.shape[1]), device=q.device)
        index = torch.tensor(order, device=q.device)
        tiled_sinks = None if sinks is None else sinks[index.to(sinks.device)]
        result = attention(q[:, index], k, v, sinks=tiled_sinks, **kwargs)
        if isinstance(result, tuple):
            return tuple(part[:, back] for part in result)
        return result[:, back]

    return call


def _one_document_unless_given(attention):
    def call(q, k, v, *, document_ids=None, **kwargs):
        if document_ids is None:
            document_ids = torch.zeros(k.shape[0], k.shape[2], dtype=torch.int64, device=k.device)
        return attention(q, k, v, document_ids=document_ids, **kwargs)

    return call


def _interleaved_rope(rope, target: Target):
    def call(x, positions, base=10000.0):
        d = x.shape[-1]
        order = torch.tensor(half_split_order(d, target.rotary_dim(d)), device=x.device)
        return rope(x[..., order], positions, base)[..., torch.argsort(order)]

    return call


def rows_permuted(fields: dict, within_head: list[int], n_heads: int, n_kv_heads: int, head_dim: int) -> dict:
    """The q and k rows of a layer's ``fields`` (wq, wk, their biases, q/k norms: those present), each
    head's features put in the order ``within_head``: the fields to replace."""
    d = head_dim

    def rows(heads: int) -> list[int]:
        return [head * d + f for head in range(heads) for f in within_head]

    permuted = {}
    for name, heads in (("q", n_heads), ("k", n_kv_heads)):
        for part in (f"w{name}", f"b{name}"):
            if fields.get(part) is not None:
                permuted[part] = fields[part][rows(heads)]
        for part in (f"{name}_norm", f"{name}_norm_bias"):  # a q/k norm's features move with q's and k's
            value = fields.get(part)
            if value is not None:
                whole_width = value.dim() == 1 and value.shape[0] > d
                permuted[part] = value[..., rows(heads) if whole_width else within_head]
    return permuted


def interleaved_report(built: Layer, n_heads: int, n_kv_heads: int, head_dim: int) -> Layer:
    """A layer that rotates interleaved pairs as the kit's half-split oracle sees it: its q and k rows
    (biases, q/k norms) permuted within each head, over its rotary share."""
    order = half_split_order(head_dim, built.rotary_dim)
    inverse = sorted(range(head_dim), key=order.__getitem__)
    return replace(built, **rows_permuted(vars(built), inverse, n_heads, n_kv_heads, head_dim))


def tiled_report(built: Layer, n_heads: int, n_kv_heads: int, head_dim: int) -> Layer:
    """A layer whose query head h reads KV head h % Hkv as the kit sees it: its query rows, output
    columns, q norms and sinks in the kit's head order."""
    heads = target_heads(n_heads, n_kv_heads)
    features = [head * head_dim + f for head in heads for f in range(head_dim)]
    permuted = {"wq": built.wq[features], "wo": built.wo[:, features]}
    if built.bq is not None:
        permuted["bq"] = built.bq[features]
    for part in ("q_norm", "q_norm_bias"):  # a per-head or whole-width q norm moves with q's heads
        value = getattr(built, part)
        if value is not None and value.dim() == 2:
            permuted[part] = value[heads]
        elif value is not None and value.shape[0] > head_dim:
            permuted[part] = value[features]
    if built.sinks is not None:
        permuted["sinks"] = built.sinks[heads]
    return replace(built, **permuted)


def _interleaved_layer(layer):
    def build(spec: LayerSpec) -> Layer:
        return interleaved_report(layer(spec), spec.n_heads, spec.n_kv_heads, spec.head_dim)

    return build


def _tiled_layer(layer):
    def build(spec: LayerSpec) -> Layer:
        return tiled_report(layer(spec), spec.n_heads, spec.n_kv_heads, spec.head_dim)

    return build


def kit_runs(target: Target, runs: list[LayerRun]) -> list[LayerRun]:
    """A module's own layer runs (LayerRun) as the kit's conventions see them, its declared conventions
    translated in each run's report as in its white box's."""
    translated_runs = []
    for run in runs:
        layer, sizes = run.layer, (run.n_heads, run.n_kv_heads, run.head_dim)
        if "rope-interleaved" in target.conventions:
            layer = interleaved_report(layer, *sizes)
        if "gqa-tile" in target.conventions and run.n_heads != run.n_kv_heads:
            layer = tiled_report(layer, *sizes)
        translated_runs.append(replace(run, layer=layer))
    return translated_runs
