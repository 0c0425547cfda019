"""MkDocs hooks: the reference pages that the code itself states, written at build time.

A page holds a marker, ``<!-- attnspec: NAME -->``, on a line of its own; the hook replaces it with
what NAME renders from the installed package, so that these pages cannot drift from the code:

- ``requirements``: every requirement of src/attnspec/specs/requirements.toml, with its source and tolerance;
- ``faults``: every fault of the catalogue, the requirements expected to kill it, the idioms its
  operators recognise (their docstrings) and one mutant of impl/ as an example diff;
- ``cli``: the help of each command, as ``attnspec COMMAND -h`` prints it;
- ``conventions``: src/attnspec/CONVENTIONS.md, which ``attnspec conventions`` prints and the wheel ships;
- ``layout``: the repository's folders, each with its lines of Python and what it is (the first
  sentence of its package's docstring);
- ``capabilities``: every capability a target may declare (attnspec/protocol/targets.py);
- ``api``: the public names of ``attnspec``, each with the module that defines it and its summary.
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
    from attnspec.mutation.faults import FAULTS, GENERIC

    diffs = example_diffs()
    parts = []
    for fault in FAULTS:
        idioms = []
        for _, operator in fault.operators:
            # (a Triton launch, kernel[grid](...), is code, not a Markdown link)
            doc = " ".join((operator.__doc__ or operator.__name__).split()).replace("](", "]\\(")
            if doc not in idioms:
                idioms.append(doc)
        module = fault.operators[0][1].__module__.rpartition(".")[2]
        lines = [
            f"## {fault.id}: {fault.description}",
            "",
            f"Source: {fault.source}. Expected to be killed by: {', '.join(fault.kills)}. "
            f"What a target must expose for the kit to reach it: {fault.reached_through}.",
            "",
            f"Its module: `src/attnspec/mutation/faults/{module}.py`; its idiom tests: "
            f"`tests/mutation/faults/test_{module}.py`.",
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
                f"No generic edit: a line marked `# attnspec: site {fault.id}` stops the campaign before it "
                "runs (no annotation can place the fault; a test of your own guards it)."
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
    """src/attnspec/CONVENTIONS.md without its title (the page's), its sections one level below the page's."""
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


REPO = Path(__file__).resolve().parents[1]
# the folders the layout lists, in order: the package's subpackages, then the repository's own code
FOLDERS = (
    "src/attnspec",
    "src/attnspec/protocol",
    "src/attnspec/specs",
    "src/attnspec/kit",
    "src/attnspec/kit/properties",
    "src/attnspec/runner",
    "src/attnspec/adapters",
    "src/attnspec/adapters/families",
    "src/attnspec/impl",
    "src/attnspec/mutation",
    "src/attnspec/mutation/faults",
    "src/attnspec/mutation/generators",
    "src/attnspec/mutation/suites",
    "src/attnspec/mutation/reports",
    "src/attnspec/properties",
    "tests",
    *(f"tests/{name}" for name in ("impl", "specs", "kit", "targets", "runner", "mutation")),
    "tests/mutation/faults",
    "tests/campaigns",
    "tests/fixtures",
    "campaigns",
    "campaigns/corpus",
    "benches",
    "examples",
    "examples/zoo",
)


# folders that are no package: what they hold
HOLDS = {
    "campaigns/corpus": "Attention code in the styles of public projects, each line where a fault's feature "
    "lives labelled by hand (LABELS.md): the corpus the catalogue's recall is measured on.",
}


def cell(text: str) -> str:
    """Text for a table's cell: a pipe escaped."""
    return text.replace("|", "\\|")


def first_sentence(text: str) -> str:
    """The first sentence of a docstring's first paragraph, in one line."""
    paragraph = " ".join(text.split("\n\n")[0].split())
    sentence = re.split(r"(?<=[.!?])\s", paragraph, maxsplit=1)[0]
    return sentence if len(sentence) <= 240 else sentence[:237].rsplit(" ", 1)[0] + " ..."


def layout() -> str:
    import ast

    rows = ["| folder | lines | what it is |", "|---|---:|---|"]
    for folder in FOLDERS:
        path = REPO / folder
        own = [p for p in path.glob("*.py")]
        lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in own)
        init = path / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) if init.is_file() else None
        said = first_sentence(doc) if doc else HOLDS.get(folder, "")
        rows.append(f"| `{folder}/` | {lines} | {cell(said)} |")
    return "\n".join(rows)


def capabilities() -> str:
    from attnspec.protocol.targets import CAPABILITIES

    rows = ["| capability | the target declares that it ... |", "|---|---|"]
    rows += [f"| `{name}` | {cell(said)} |" for name, said in CAPABILITIES.items()]
    return "\n".join(rows)


def api() -> str:
    import importlib
    import inspect

    import attnspec

    rows = ["| name | defined in | what it is |", "|---|---|---|"]
    for name in sorted(attnspec.API, key=str.lower):
        module = attnspec.API[name]
        try:
            obj = getattr(importlib.import_module(module), name)
        except ImportError:  # CausalLM and MaskedLM need transformers
            said = "(needs transformers: pip install 'attnspec[conformance]')"
        else:
            doc = inspect.getdoc(obj) or ""
            said = first_sentence(doc) if doc else ""
        rows.append(f"| `{name}` | `{module}` | {cell(said)} |")
    return "\n".join(rows)


RENDERERS = {
    "requirements": requirements,
    "faults": faults,
    "cli": cli,
    "conventions": conventions,
    "layout": layout,
    "capabilities": capabilities,
    "api": api,
}
