"""attnspec's specification: the requirement catalogue and an independent float64 oracle.

This package never imports impl/: the oracle must stay independent of the code it grades.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

CATALOGUE = Path(__file__).with_name("requirements.toml")


@dataclass(frozen=True)
class Requirement:
    id: str
    statement: str
    source: str
    tolerance: str
    scope: str = "kit"  # "impl": a requirement on impl's own API, checked by the repository's tests/impl/


def load_requirements(path: Path = CATALOGUE) -> dict[str, Requirement]:
    """The catalogue as {id: Requirement}, in file order; duplicate ids are an error."""
    with open(path, "rb") as f:
        rows = tomllib.load(f)["requirement"]
    requirements: dict[str, Requirement] = {}
    for row in rows:
        req = Requirement(**row)
        if req.id in requirements:
            raise ValueError(f"duplicate requirement id {req.id} in {path}")
        requirements[req.id] = req
    return requirements


REQUIREMENTS = load_requirements()
