"""Which laws hold for a target under its declaration: read from its score_mod and mask_mod (and for a
module, from the masks of the layers its schedule declares), not from a flag.

A law a property states may hold only for some declarations: prefix invariance needs a causal mask,
the permutation symmetries a mask that lets every query see every key and scores that ignore
positions, packed documents that each behave as if alone scores and masks that depend on q_idx -
kv_idx only, a query head computed on its own scores that ignore the head index.  Each is decided by
evaluating the target's mods (attnspec/specs/mods.py) once, on an index grid as long as the longest sequence a
property draws for it; a property marked ``@pytest.mark.law(NAME)`` runs where its law holds and is
skipped, with the reason, where it does not (conftest.py).  Without mods every law holds as it always
did for the built-in causal mask (the non-causal ones need "non_causal").
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from attnspec.kit.kernel_blocks import boundary_lengths
from attnspec.protocol.declared import mod_name
from attnspec.protocol.targets import Target
from attnspec.specs.mods import mask_values, reach, score_values

BATCH, HEADS = 2, 4
# Scores the score_mod is probed at: ordinary, large, negative, and one far beyond a soft-cap's range.
PROBE_SCORES = (0.75, -2.5, 9.0, 120.0)
TOLERANCE = 1e-9  # relative: the same float64 function of the same arguments


def probe_length(target: Target) -> int:
    """The longest sequence a property draws for the target (the kernel cases' boundary lengths), and
    a few more: a mask with chunks longer than any case looks causal, rightly, to every case drawn."""
    return max(boundary_lengths(target)) + 8


def _heads(target: Target) -> int:
    """The query heads of the probe: HEADS, or the most the target declares it takes."""
    return max(target.heads) if target.heads else HEADS


def _mask(target: Target, length: int) -> torch.Tensor | None:
    """(B, H, T, T) of the target's mask_mod over a square problem, or None without one."""
    if target.mask_mod is None:
        return None
    return mask_values(target.mask_mod, BATCH, _heads(target), length, length)


def _layer_masks(target: Target, length: int) -> list[tuple[object, torch.Tensor]]:
    """(kind, (T, T) mask) of each kind of layer a module's schedule declares, in order of appearance."""
    kinds = dict.fromkeys(target.schedule)
    return [(kind, mask_values(kind.mask_mod(), 1, 1, length, length)[0, 0]) for kind in kinds]


def _scores(target: Target, length: int) -> list[torch.Tensor]:
    """The target's score_mod at each constant score of PROBE_SCORES, (B, H, T, T) each."""
    if target.score_mod is None:
        return []
    shape = (BATCH, _heads(target), length, length)
    return [score_values(target.score_mod, torch.full(shape, s, dtype=torch.float64)) for s in PROBE_SCORES]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    scale = max(1.0, a.abs().nan_to_num(posinf=0.0, neginf=0.0).max().item()) if a.numel() else 1.0
    return bool(torch.isclose(a, b, rtol=0.0, atol=TOLERANCE * scale, equal_nan=True).all())


def _shift_free(grid: torch.Tensor) -> bool:
    """The grid (..., T, T) is constant along every diagonal: it depends on q_idx - kv_idx alone (one
    step along each diagonal is enough)."""
    return _same(grid[..., 1:, 1:], grid[..., :-1, :-1])


def _causal_problem(target: Target, length: int) -> str | None:
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    for kind, layer_mask in _layer_masks(target, length):
        seen = torch.nonzero(layer_mask & future)
        if len(seen):
            i, j = seen[0].tolist()
            return f"its layers of kind '{kind}' let query {i} see the later key {j}: it is not causal"
    mask = _mask(target, length)
    if mask is None:
        return None
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    seen = torch.nonzero(mask & future)
    if not len(seen):
        return None
    _, _, i, j = seen[0].tolist()
    return f"its mask_mod {mod_name(target.mask_mod)} lets query {i} see the later key {j}: it is not causal"


def _relative_problem(target: Target, length: int) -> str | None:
    mask = _mask(target, length)
    if mask is not None and not _shift_free(mask):
        return f"its mask_mod {mod_name(target.mask_mod)} depends on more than q_idx - kv_idx"
    if not all(_shift_free(grid) for grid in _scores(target, length)):
        return f"its score_mod {mod_name(target.score_mod)} depends on more than q_idx - kv_idx"
    return None


def _permutable_problem(target: Target, length: int) -> str | None:
    for kind, layer_mask in _layer_masks(target, length):
        if not bool(layer_mask.all()):
            return f"its layers of kind '{kind}' hide keys: the order of the tokens matters"
    mask = _mask(target, length)
    if mask is None and "non_causal" not in target.capabilities:
        return f"--impl {target.name} lacks: non_causal"
    if mask is not None and not bool(mask.all()):
        return f"its mask_mod {mod_name(target.mask_mod)} hides keys: the order of the keys matters"
    for grid in _scores(target, length):
        if not _same(grid, grid[..., :1, :1].expand_as(grid)):
            return f"its score_mod {mod_name(target.score_mod)} depends on q_idx or kv_idx"
    return None


def _bidirectional_problem(target: Target, length: int) -> str | None:
    """A declared mask_mod that lets every query see every key (an encoder's); a module without one is
    causal, whatever its attention function would do with causal=False."""
    if target.schedule:
        masks = [mask_values(kind.mask_mod(), 1, 1, length, length)[0, 0] for kind in target.schedule]
        blind = torch.nonzero(~reach(masks))
        if not len(blind):
            return None
        i, j = blind[0].tolist()
        return f"through its schedule of layers output {i} does not see input {j}"
    mask = _mask(target, length)
    if mask is None:
        return f"--impl {target.name} declares no mask_mod that shows every token every other (an encoder's)"
    if not bool(mask.all()):
        return f"its mask_mod {mod_name(target.mask_mod)} hides keys"
    return None


def _head_free_problem(target: Target, length: int) -> str | None:
    mask = _mask(target, length)
    if mask is not None and not _same(mask, mask[:, :1].expand_as(mask)):
        return f"its mask_mod {mod_name(target.mask_mod)} depends on the head h"
    for grid in _scores(target, length):
        if not _same(grid, grid[:, :1].expand_as(grid)):
            return f"its score_mod {mod_name(target.score_mod)} depends on the head h"
    return None


def _hidden_keys_problem(target: Target, length: int) -> str | None:
    """Some case the kit draws has a key no query sees: a window over a decode step, documents, or a
    mask_mod that hides keys from the last few queries (or from every query of a square problem)."""
    if target.mask_mod is None:  # every key is its own query's in a square problem: a decode step hides
        hides = target.supports("window") or target.supports("documents")
        if hides and target.supports("decode"):
            return None
        missing = ([] if hides else ["window"]) + ([] if target.supports("decode") else ["decode"])
        return f"--impl {target.name} lacks: {', '.join(missing)}"
    if target.supports("documents", "decode"):  # documents before a decode step's own
        return None
    queries = (1, 3, length) if target.supports("decode") else (length,)
    for tq in queries:
        mask = mask_values(target.mask_mod, BATCH, _heads(target), tq, length)
        if bool((~mask.any(dim=2)).any()):
            return None
    return f"its mask_mod {mod_name(target.mask_mod)} shows every key to some query"


def _plain_scores_problem(target: Target, length: int) -> str | None:
    if target.score_mod is None:
        return None
    return f"its score_mod {mod_name(target.score_mod)} changes the scaled logits"


def _additive_problem(target: Target, length: int) -> str | None:
    grids = _scores(target, length)
    if not grids:
        return None
    biases = [grid - score for grid, score in zip(grids, PROBE_SCORES, strict=True)]
    if all(_same(bias, biases[0]) for bias in biases[1:]) and bool(torch.isfinite(biases[0]).all()):
        return None
    return f"its score_mod {mod_name(target.score_mod)} is not a bias added to the logit"


LAWS: dict[str, tuple[str, Callable[[Target, int], str | None]]] = {
    "causal": ("query i sees no key after its own position", _causal_problem),
    "relative": ("scores and mask depend on q_idx - kv_idx alone", _relative_problem),
    "permutable": ("every query sees every key, with scores that ignore positions", _permutable_problem),
    "bidirectional": ("its declared mask_mod lets every query see every key", _bidirectional_problem),
    "head_free": ("scores and mask ignore the head index", _head_free_problem),
    "hidden_keys": ("some key is hidden from every query", _hidden_keys_problem),
    "plain_scores": ("the logits are q.k * scale, with no score_mod", _plain_scores_problem),
    "additive": ("the score_mod adds a bias to the logit (a float mask carries it)", _additive_problem),
}


@functools.cache
def _problem(target: Target, law: str) -> str | None:
    return LAWS[law][1](target, probe_length(target))


def law_problem(target: Target, law: str) -> str | None:
    """Why ``law`` does not hold for ``target`` under its declaration (a skip reason that names the
    mod), or None where it holds."""
    if law not in LAWS:
        raise ValueError(f"unknown law {law!r}; known: {sorted(LAWS)}")
    problem = _problem(target, law)
    if problem is None or problem.startswith("--impl"):
        return problem
    return f"--impl {target.name}: {problem} ({LAWS[law][0]} does not hold)"


def holds(target: Target, law: str) -> bool:
    return law_problem(target, law) is None
