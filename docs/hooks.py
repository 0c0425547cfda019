"""MkDocs hooks: the reference pages that the code itself states, written at build time.

A page holds a marker, ``<!-- attnspec: NAME -->``, on a line of its own; the hook replaces it with
what NAME renders from the installed package, so that these pages cannot drift from the code:

- ``requirements``: every requirement of specs/requirements.toml, with its source and tolerance;
- ``faults``: every fault of the catalogue, the requirements expected to kill it, the idioms its
  operators recognise (their docstrings) and one mutant of impl/ as an example diff;
- ``cli``: the help of each command, as ``attnspec COMMAND -h`` prints it;
- ``conventions``: CONVENTIONS.md, which ``attnspec conventions`` prints and the wheel ships.
"""

from __future__ import annotations

import functools
import re
import tomllib
from pathlib import Path

MARKER = re.compile(r"^<!-- attnspec: ([a-z]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def render(match: re.Match) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise ValueError(
                f"{page.file.src_path}: unknown marker {match.group(0)!r} (known: {sorted(RENDERERS)})"
            )
        return RENDERERS[name]()

    return MARKER.sub(render, markdown)


def requirements() -> str:
    from attnspec import specs

    table = tomllib.loads((Path(specs.__file__).parent / "requirements.toml").read_text(encoding="utf-8"))
    rows = ["| id | statement | source | tolerance |", "|---|---|---|---|"]
    for requirement in table["requirement"]:
        cells = [requirement["id"], requirement["statement"], requirement["source"], requirement["tolerance"]]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


@functools.cache
def example_diffs() -> dict[str, str]:
    """One mutant of impl/ per fault: the first in file order."""
    from attnspec import impl
    from attnspec.mutation.generators.sites import mutants_in

    found: dict[str, str] = {}
    for path in sorted(Path(impl.__file__).parent.glob("*.py")):
        for mutant in mutants_in(path.read_text(encoding="utf-8"), f"impl.{path.stem}", f"impl/{path.name}"):
            found.setdefault(mutant.fault, mutant.diff)
    return found


def faults() -> str:
    from attnspec.mutation.generators.annotations import GENERIC
    from attnspec.mutation.generators.catalogue import FAULTS

    diffs = example_diffs()
    parts = []
    for fault in FAULTS:
        idioms = []
        for _, operator in fault.operators:
            doc = " ".join((operator.__doc__ or operator.__name__).split())
            if doc not in idioms:
                idioms.append(doc)
        lines = [
            f"## {fault.id}: {fault.description}",
            "",
            f"Source: {fault.source}. Expected to be killed by: {', '.join(fault.kills)}. "
            f"What a target must expose for the kit to reach it: {fault.reached_through}.",
            "",
            "Idioms it recognises (one per operator):",
            "",
            *(f"- {idiom}" for idiom in idioms),
            "",
        ]
        generic = [
            " ".join((op.__doc__ or op.__name__).split()).rstrip(".") for op in GENERIC.get(fault.id, ())
        ]
        if generic:
            lines.append(f"On a line marked `# attnspec: site {fault.id}`, also: {'; '.join(generic)}.")
        else:
            lines.append(
                f"A line marked `# attnspec: site {fault.id}` is reported, not mutated: no generic edit."
            )
        if fault.id in diffs:
            lines += ["", "An example, in impl/:", "", "```diff", diffs[fault.id], "```"]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def cli() -> str:
    from attnspec.cli import parser

    main = parser()
    commands = next(action for action in main._actions if action.choices and "check" in action.choices)
    parts = ["## attnspec", "", "```text", main.format_help().rstrip(), "```"]
    for name, command in commands.choices.items():
        parts += ["", f"## attnspec {name}", "", "```text", command.format_help().rstrip(), "```"]
    return "\n".join(parts)


def conventions() -> str:
    """CONVENTIONS.md without its title (the page's), its sections one level below the page's."""
    import attnspec

    text = attnspec.conventions()
    lines = text.split("\n")[1:] if text.startswith("# ") else text.split("\n")
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            lines[i] = "#" + line
    return "\n".join(lines)


RENDERERS = {"requirements": requirements, "faults": faults, "cli": cli, "conventions": conventions}
