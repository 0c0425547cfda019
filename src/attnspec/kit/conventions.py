"""Other legitimate attention conventions (and one common bug), and which one a failing output follows.

When an output misses the oracle, these re-run the oracle under a neighbouring convention (a window of
W+1 or W-1 keys, tile-style GQA, top-left alignment, interleaved RoPE pairs, RoPE on part of each head
left undeclared) or with the window ignored, and name the one the output matches, so that a failure
says "convention mismatch" instead of describing a bug. One is named only when it alone explains the
output: where several do (a window ignored and a window of W+1 keys look the same over 2 keys), the
message says that the case cannot tell them apart, and the run's diagnosis of the target (diagnosis.py)
tells them apart on cases built for it."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnspec.kit.loading import current
from attnspec.kit.references import declared_attention_by_rows, declared_keywords
from attnspec.protocol.declared import half_split_order, rows_permuted, target_heads
from attnspec.specs.oracle import attention_layer_oracle, attention_oracle_by_rows, rope_oracle

# Set by the mutation campaign's runner while a mutant runs a property (one that checks a requirement):
# a failure kills the mutant whatever it says, so the oracles of the neighbouring conventions (up to
# seconds per failing example) are not run there.  Nothing else reads it.
TERSE = "ATTNSPEC_TERSE_FAILURES"

CONVENTIONS = (
    "bottom-right queries, p-W < j <= p, KV head h // r and half-split RoPE pairs "
    "(`attnspec conventions` prints them)"
)


@dataclass(frozen=True)
class Candidate:
    """An explanation of an output that misses the oracle: ``name``, what the target would do, and
    ``expected``, the oracle's output if it did.  ``bug`` is the diagnosis of an explanation that is
    a bug, not another convention (a window ignored)."""

    name: str
    expected: Callable[[], torch.Tensor]
    bug: str | None = None
    fault: str = ""  # the catalogue fault (src/attnspec/mutation/faults/) it is when not on purpose

    def diagnosis(self) -> str:
        named = f" (catalogue fault {self.fault})" if self.fault else ""
        if self.bug is not None:
            return self.bug + named
        said = f"convention mismatch: the target follows {self.name}; attnspec's convention is {CONVENTIONS}"
        declarable = DECLARES.get(self.name)
        if declarable is None:
            return said + named
        return f"{said}; if it is on purpose, declare it: conventions = {{{declarable!r}}}{named}"


def _tolerance(dtype: torch.dtype) -> float:
    """Loose: a convention changes outputs by far more than any rounding in ``dtype``."""
    return 1e-6 if dtype == torch.float64 else 1e-3 if dtype == torch.float32 else 3e-2


def _matches(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> bool:
    err = (actual.detach().cpu().double() - expected.double()).abs().max().item()
    return err <= tolerance * max(1.0, expected.abs().max().item())


def loosely_equal(actual: object, expected: torch.Tensor) -> bool:
    """Whether ``actual`` is a tensor of ``expected``'s shape that matches it within the loose
    tolerance of its dtype (a convention, a layout or a cache changes an output by far more)."""
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    return _matches(actual, expected.cpu(), _tolerance(actual.dtype))


CACHE_IGNORED = (
    "the cache was never read: each chunk came out as {alone} gives that chunk alone, attending only "
    "to its own tokens; a cache handed to a module under a keyword its forward does not name goes into "
    "its **kwargs without an error (GPT-NeoX's attention takes layer_past=, Llama's past_key_values=)"
)


def cache_ignored(
    decoded: torch.Tensor, x: torch.Tensor, chunks: list[int], alone: Callable, called: str
) -> str | None:
    """Whether ``decoded``, x decoded in ``chunks``, is each chunk run on its own, ``alone(chunk,
    start)`` (``called`` in words): a decode that never reads what it cached, which over one token
    chunks looks like a window of one key."""
    if len(chunks) < 2:
        return None
    parts, start = [], 0
    try:
        with torch.no_grad():
            for size in chunks:
                parts.append(alone(x[:, start : start + size].contiguous(), start))
                start += size
    except Exception:  # a chunk it refuses alone tells nothing
        return None
    if not loosely_equal(decoded, torch.cat(parts, dim=1)):
        return None
    return CACHE_IGNORED.format(alone=called)


def explained_by(out: torch.Tensor, golden: torch.Tensor, candidates: list[Candidate]) -> list[Candidate]:
    """The candidates whose expected output ``out`` matches, within the loose tolerance of its dtype.
    None when ``out`` has another shape than ``golden`` (the shape is the problem, whatever a
    broadcast comparison would match) or matches ``golden`` itself; a candidate that matches
    ``golden`` just as well explains nothing on this case (a window wider than the sequence)."""
    tolerance = _tolerance(out.dtype)
    if out.shape != golden.shape or _matches(out, golden, tolerance):
        return []
    found = []
    for candidate in candidates:
        expected = candidate.expected()
        if _matches(out, expected, tolerance) and not _matches(golden, expected, tolerance):
            found.append(candidate)
    return found


def explanation(out: torch.Tensor, golden: torch.Tensor, candidates: list[Candidate]) -> str | None:
    """The diagnosis of the one candidate that explains ``out``; when several do, a line saying that
    this case cannot tell them apart; None when none does (or in a campaign's mutant run: TERSE)."""
    if os.environ.get(TERSE) == "1":
        return None
    found = explained_by(out, golden, candidates)
    if len(found) == 1:
        return found[0].diagnosis()
    if found:
        names = "; or ".join(candidate.name for candidate in found)
        return f"no convention named: this case cannot tell apart {names}: each gives this output"
    return None


INCLUSIVE_WINDOW = "a window of W+1 keys (p-W <= j <= p: an inclusive bound)"
NARROW_WINDOW = "a window of W-1 keys (p-W+1 < j <= p)"
WINDOW_IGNORED = (
    "window ignored: the target attends as if window=None, to every key up to the query's position "
    "instead of the last W (a bug, not a convention: `attnspec conventions`)"
)


def window_candidates(window: int | None, oracle: Callable) -> list[Candidate]:
    """A window one key too wide, the window ignored, and a window one key too narrow."""
    if window is None:
        return []
    candidates = [
        Candidate(INCLUSIVE_WINDOW, lambda: oracle(window=window + 1), fault="F16"),
        Candidate("the window ignored (window=None)", lambda: oracle(window=None), WINDOW_IGNORED, "F8"),
    ]
    if window > 1:
        candidates.append(Candidate(NARROW_WINDOW, lambda: oracle(window=window - 1), fault="F16"))
    return candidates


INTERLEAVED = "interleaved RoPE pairs (x_2i, x_2i+1), as GPT-J and Meta's original Llama code rotate"
TILED_GQA = "tile-style GQA (query head h reads KV head h % Hkv, like k.repeat)"
NO_ROPE = (
    "no RoPE: the layer rotates neither q nor k. A layer without positions inside (absolute positions "
    "added to its input, or none) reports Layer(rope=False); one that should rotate them forgot to"
)
TOP_LEFT = "top-left alignment (query i at position i, like torch's is_causal)"
# The neighbouring conventions a target may follow on purpose, by the name it declares them under
# (src/attnspec/protocol/declared.py: DECLARABLE)
DECLARES = {
    INCLUSIVE_WINDOW: "window-inclusive",
    INTERLEAVED: "rope-interleaved",
    TILED_GQA: "gqa-tile",
    TOP_LEFT: "top-left",
}


SCORE_MOD_IGNORED = (
    "score_mod ignored: the target's logits are the plain q.k * scale, not the declared score_mod's "
    "(a bug, not a convention)"
)
MASK_MOD_IGNORED = (
    "mask_mod ignored: the target attends with the plain causal mask, not the declared mask_mod's "
    "(a causal mask left on, where the mask_mod is bidirectional: a bug, not a convention)"
)
CAUSAL_LEFT_ON = (
    "causal mask left on: the target attends causally though called with causal=False "
    "(a bug, not a convention)"
)
DOCUMENTS_IGNORED = (
    "documents ignored: the target's queries see keys of other documents, as without document_ids "
    "(a bug, not a convention)"
)
INTERLEAVED_GQA = (
    "interleaved GQA (query head h reads KV head h // r), though the target declares gqa-tile (h % Hkv)"
)
HALF_SPLIT_ROPE = (
    "half-split RoPE pairs (x_i, x_i+d/2), though the target declares rope-interleaved (x_2i, x_2i+1)"
)


def rope_pairs_candidate(oracle_of_pairs: Callable[[str], torch.Tensor], untranslated=None) -> Candidate:
    """The other pairing of RoPE than the one the kit checks: interleaved pairs for a target that
    declares none (a convention to declare); for one that declares rope-interleaved, half-split pairs of
    its own features (a bug), the oracle of ``untranslated`` (its report as it made it, the declaration's
    permutation of its rows undone), or seen through the translation where there is no report."""
    if "rope-interleaved" in current().conventions:
        half_split = untranslated or functools.partial(oracle_of_pairs, "interleaved")
        return Candidate("half-split pairs", half_split, bug=HALF_SPLIT_ROPE)
    return Candidate(INTERLEAVED, functools.partial(oracle_of_pairs, "interleaved"))


def convention_mismatch(
    out: torch.Tensor,
    golden: torch.Tensor,
    q,
    k,
    v,
    *,
    causal=True,
    window=None,
    sinks=None,
    scale=None,
    document_ids=None,
) -> str | None:
    """The explanation of an attention output ``out`` that misses ``golden`` (explanation): a window
    of W+1 or W-1 keys or none, tile-style GQA, or top-left alignment; under a declaration, also its
    score_mod, mask_mod, documents or gqa-tile ignored, or a causal mask left on a non-causal call."""
    target = current()
    tq, tk, r = q.shape[2], k.shape[2], q.shape[1] // k.shape[1]
    same = {"causal": causal, "window": window, "sinks": sinks, "scale": scale, "document_ids": document_ids}

    def oracle(q=q, k=k, v=v, **change):
        return declared_attention_by_rows(q, k, v, **{**same, **change})

    def undeclared(**change):  # the oracle with part of the declaration dropped
        keywords = {**declared_keywords(q, k, **same), **change}
        return attention_oracle_by_rows(q, k, v, **keywords)

    def top_left():  # query i at position i: the bottom-right oracle of row i over keys 0..i
        if tq < tk:  # that is the bottom-right oracle over the first Tq keys
            return oracle(k=k[:, :, :tq], v=v[:, :, :tq])
        return torch.cat(
            [oracle(q[:, :, i : i + 1], k[:, :, : i + 1], v[:, :, : i + 1]) for i in range(tq)], dim=2
        )

    masked = causal and target.mask_mod is None
    candidates = window_candidates(window, oracle) if masked else []
    if r > 1 and "gqa-tile" not in target.conventions:
        candidates.append(
            Candidate(TILED_GQA, lambda: oracle(k=k.repeat(1, r, 1, 1), v=v.repeat(1, r, 1, 1)), fault="F15")
        )
    if r > 1 and "gqa-tile" in target.conventions:  # seen through the tile translation (declared.py)
        heads = [h // r for h in target_heads(q.shape[1], k.shape[1])]
        interleaved = Candidate(INTERLEAVED_GQA, lambda: oracle(k=k[:, heads], v=v[:, heads]), fault="F15")
        candidates.append(interleaved)
    if masked and tq != tk and document_ids is None:
        candidates.append(Candidate(TOP_LEFT, top_left))
    if target.score_mod is not None:
        ignored = Candidate("no score_mod", lambda: undeclared(score_mod=None), bug=SCORE_MOD_IGNORED)
        candidates.append(ignored)
    if target.mask_mod is not None:
        plain = {"mask_mod": None, "causal": True, "window": None}
        candidates.append(Candidate("a causal mask", lambda: undeclared(**plain), MASK_MOD_IGNORED, "F25"))
    elif not causal:
        candidates.append(Candidate("a causal mask", lambda: undeclared(causal=True), CAUSAL_LEFT_ON, "F25"))
    if document_ids is not None:
        ignored = Candidate("no documents", lambda: undeclared(document_ids=None), DOCUMENTS_IGNORED, "F24")
        candidates.append(ignored)
    return explanation(out, golden, candidates)


def layer_convention_mismatch(
    out: torch.Tensor, golden: torch.Tensor, x: torch.Tensor, **layer
) -> str | None:
    """convention_mismatch for a whole layer (``layer``: the keywords of attention_layer_oracle):
    interleaved RoPE pairs or no RoPE at all, a window of W+1 or W-1 keys or none, or tile-style GQA."""

    def oracle(**change):
        return attention_layer_oracle(x, **{**layer, **change})

    def untranslated():  # the layer's own rows, in half-split pairs
        d, rotated = layer["head_dim"], layer.get("rotary_dim")
        own = rows_permuted(layer, half_split_order(d, rotated), layer["n_heads"], layer["n_kv_heads"], d)
        return oracle(**own)

    candidates = []
    if layer.get("rope", True):
        candidates += [rope_pairs_candidate(lambda pairs: oracle(pairs=pairs), untranslated)]
        candidates += [Candidate("no RoPE", lambda: oracle(rope=False), bug=NO_ROPE, fault="F7")]
        if layer.get("rotary_dim") is None:
            candidates += partial_rotary_candidates(
                layer["head_dim"], lambda rotated: oracle(rotary_dim=rotated)
            )
    candidates += window_candidates(layer["window"], oracle)
    if layer["n_heads"] != layer["n_kv_heads"]:
        candidates.append(Candidate(TILED_GQA, lambda: oracle(gqa="tiled"), fault="F15"))
    if layer.get("score_mod") is not None:
        candidates.append(Candidate("no score_mod", lambda: oracle(score_mod=None), bug=SCORE_MOD_IGNORED))
    candidates += qk_norm_candidates(layer, oracle)
    if layer.get("scale") is not None:
        said = (
            f"the attention is scaled by 1/sqrt(d), though the layer reports its scale {layer['scale']:g} "
            "(a bug, or a scale to report as it is)"
        )
        candidates.append(Candidate("1/sqrt(d)", lambda: oracle(scale=None), bug=said, fault="F3"))
    else:
        said = (
            "the logits are not scaled (scale 1), though the layer reports none, which is 1/sqrt(d) (a bug, "
            "or a scale to report: T5 adds its bias to logits it never scales)"
        )
        candidates.append(Candidate("no scale", lambda: oracle(scale=1.0), bug=said, fault="F3"))
    return explanation(out, golden, candidates)


def qk_norm_candidates(layer: dict, oracle: Callable) -> list[Candidate]:
    """A q/k norm over the other form than the layer reports: each head alone where it reports the
    whole width (its gain cut per head), or the whole width where it reports each head (a gain per head
    laid end to end)."""
    q_norm, k_norm = layer.get("q_norm"), layer.get("k_norm")
    if q_norm is None and k_norm is None:
        return []
    d = layer["head_dim"]

    def other_form(gain, heads: int):
        if gain is None:
            return None
        if layer.get("qk_norm_over", "head") == "width":
            return gain.reshape(heads, d)
        return gain.reshape(-1).repeat(heads // gain.shape[0] if gain.dim() == 2 else heads)

    over = "head" if layer.get("qk_norm_over", "head") == "width" else "width"
    change = {"qk_norm_over": over}
    for name, heads in (("q_norm", layer["n_heads"]), ("k_norm", layer["n_kv_heads"])):
        change[name] = other_form(layer.get(name), heads)
        change[f"{name}_bias"] = other_form(layer.get(f"{name}_bias"), heads)
    said = {
        "head": "the q/k norm normalises each head alone, though the layer reports it over the whole width",
        "width": "the q/k norm normalises all heads together, though the layer reports it per head",
    }[over]
    bug = f"{said} (a bug, or a form to report)"
    return [Candidate(f"q/k norm over each {over}", lambda: oracle(**change), bug=bug, fault="F27")]


def partial_rotary_candidates(head_dim: int, oracle: Callable) -> list[Candidate]:
    """RoPE on the first quarter or half of each head only (GPT-NeoX's rotary_pct 0.25, Phi's 0.5), for
    a target that declared none: a declaration to make, not a bug."""
    candidates = []
    for share in (0.25, 0.5):
        rotated = int(head_dim * share)
        if rotated >= 2 and rotated % 2 == 0:
            said = (
                f"partial rotary: the target rotates only the first {rotated} of each head's {head_dim} "
                f"features; if it is on purpose, declare it: rotary_pct = {share:g} on a rope() target "
                f"(GPT-NeoX's rotary_pct), rotary_dim = {rotated} in a Layer"
            )
            candidates.append(
                Candidate(f"partial rotary ({share:g})", functools.partial(oracle, rotated), said)
            )
    return candidates


def rope_convention_mismatch(
    out: torch.Tensor, golden: torch.Tensor, x: torch.Tensor, positions: list[int], base: float
) -> str | None:
    """convention_mismatch for RoPE alone: interleaved pairs, or partial rotary left undeclared."""
    d = x.shape[-1]
    order = half_split_order(d, current().rotary_dim(d))
    inverse = sorted(range(d), key=order.__getitem__)

    def untranslated():  # half-split pairs of the target's own features, seen through the translation
        return rope_oracle(x[..., order], positions, base, rotary_dim=current().rotary_dim(d))[..., inverse]

    candidates = [
        rope_pairs_candidate(lambda pairs: rope_oracle(x, positions, base, pairs=pairs), untranslated)
    ]
    candidates += partial_rotary_candidates(
        x.shape[-1], lambda rotated: rope_oracle(x, positions, base, rotary_dim=rotated)
    )
    return explanation(out, golden, candidates)
