"""GitHub Actions workflow commands for a campaign's survivors: ``::warning file=,line=::`` on
each surviving mutant's line (shown on the pull request's diff), ``::notice`` for triaged ones."""

from __future__ import annotations

from ..triage import untriaged
from .stryker import Mutant


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(mutants: list[Mutant], triage: dict, strict: bool, root: str = "") -> list[str]:
    """One workflow command per undetected mutant (``root``: prefix of the paths, from the
    repository's root to where the campaign ran)."""
    commands = []
    for mutant in mutants:
        undetected = mutant.status == "Survived" or (strict and mutant.status == "NoCoverage")
        if not undetected:
            continue
        file = f"{root.rstrip('/')}/{mutant.path}" if root else mutant.path
        where = (
            f"file={escape_property(file)},line={mutant.start[0]},"
            f"endLine={max(mutant.end[0], mutant.start[0])},"
            f"col={mutant.start[1]}"
        )
        what = "survived" if mutant.status == "Survived" else "is not exercised by any test"
        if untriaged(mutant, triage):
            title = escape_property(f"attnspec {mutant.operator} {what}")
            body = f"{mutant.name}: the fault {mutant.operator} {what}; no test failed with\n{mutant.diff}"
            commands.append(f"::warning {where},title={title}::{escape_data(body)}")
        else:
            title = escape_property(f"attnspec {mutant.operator} triaged equivalent")
            commands.append(f"::notice {where},title={title}::{escape_data(triage[mutant.name]['reason'])}")
    return commands
