"""A declared score_mod that is the user's own code is trusted as the specification: the kit checks the
target against it, so a bug shared by the target and its declaration (one buggy slopes helper used by
both) would pass.  declared_mod_note compares such a mod with the family it resembles, ALiBi (a bias
slope_h * (j - p) per head), and says where its slopes are not ALiBi's for the declared heads, and how
they differ, on every run: a note, not a failure (a model may mean other slopes: Falcon divides them by
sqrt(d))."""

from __future__ import annotations

import math

import torch

from attnspec.protocol.declared import mod_name
from attnspec.protocol.targets import Target
from attnspec.specs.counterfactuals.calls import next_power_of_two_slopes, power_of_two_slopes
from attnspec.specs.mods import alibi_slopes, score_values

POSITIONS = 8


def bias_slopes(mod, n_heads: int) -> list[float] | None:
    """The slopes m_h of a mod that adds m_h * (j - p) to the logit of key j at position p (j <= p),
    read from its values at score 0; None for a mod that is no such bias."""
    scores = torch.zeros(1, n_heads, POSITIONS, POSITIONS, dtype=torch.float64)
    try:
        with torch.no_grad():
            bias = score_values(mod, scores)
    except Exception:  # a mod the grid cannot evaluate: no claim on it
        return None
    if bias.shape != scores.shape or not torch.isfinite(bias).all():
        return None
    distance = torch.arange(POSITIONS)[None, :] - torch.arange(POSITIONS)[:, None]  # j - p
    seen = distance <= 0
    relative = bias - bias.diagonal(dim1=-2, dim2=-1)[..., :, None]  # bias(p, j) - bias(p, p)
    slopes = [-relative[0, h, POSITIONS - 1, POSITIONS - 2].item() for h in range(n_heads)]
    for h, slope in enumerate(slopes):
        expected = slope * distance.to(torch.float64)
        if not torch.allclose(relative[0, h][seen], expected[seen], rtol=1e-6, atol=1e-9):
            return None
    return slopes if any(abs(slope) > 1e-12 for slope in slopes) else None


def _alike(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-12) for x, y in zip(a, b, strict=True)
    )


def declared_mod_note(target: Target) -> str | None:
    """For a target whose declared score_mod is its own code (not one of attnspec's mods) and adds an
    ALiBi-like bias: where its slopes are not ALiBi's for the heads it declares, what they are."""
    mod = target.score_mod
    if mod is None or getattr(mod, "__module__", "").startswith("attnspec.") or not target.heads:
        return None
    heads = max(target.heads)
    slopes = bias_slopes(mod, heads)
    if slopes is None:
        return None
    formula = alibi_slopes(heads)
    if _alike(slopes, formula):
        return None
    how = "they are not ALiBi's formula's"
    if _alike(slopes, [-s for s in formula]):
        how = "their sign is flipped"
    elif _alike(slopes, power_of_two_slopes(heads)):
        how = "they are the power-of-two formula's, though the head count is not a power of two"
    elif _alike(slopes, next_power_of_two_slopes(heads)[:heads]):
        how = f"they are those of {2 ** math.ceil(math.log2(heads))} heads"
    elif _alike(sorted(slopes), sorted(formula)):
        how = "they are ALiBi's in another head order"
    elif (
        slopes[0]
        and formula[0]
        and _alike([s / slopes[0] for s in slopes], [f / formula[0] for f in formula])
    ):
        how = f"they are ALiBi's times {slopes[0] / formula[0]:.4g}"
    shown = ", ".join(f"{s:.4g}" for s in slopes[:4]) + (", ..." if heads > 4 else "")
    return (
        f"note: the declared score_mod {mod_name(mod)} is your own code, trusted as the specification: "
        f"it adds slope_h * (j - p) with slopes {shown}, and for {heads} heads {how} "
        f"(attnspec.alibi_slopes({heads})): if the target shares a helper with its declaration, a bug in it "
        "passes unseen"
    )
