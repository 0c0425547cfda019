"""How well the catalogue's operators recognise faults in code written the way the ecosystem writes
it: ``python -m campaigns recall``.

The corpus (campaigns/corpus/*.py) is attention code in the styles of public projects, written here,
with every line where a reader would say a fault's feature lives labelled ``# expect: F7 F12``.
For each fault the measurement compares the lines the operators place that fault's mutants on with
the labelled lines:

- recall: labelled statements that got a mutant of the fault / labelled statements;
- precision: mutants of the fault that touch a statement labelled with it / mutants of the fault;
- hidden: files labelled with the fault where it got no mutant *and* the evidence (evidence.py)
  does not see its feature either, so a campaign would call a present fault absent.  It must be 0.

The labels were written without reading the operators.  The command rewrites two tables on the
faults page (docs/reference/faults.md): the whole corpus, and its Triton source alone (the files that
import triton: ``@triton.jit`` kernels, measured apart because their idioms are a kernel's, not a
module's); tests/campaigns/test_recall.py fails when the page and a fresh measurement disagree, and
when a present fault is hidden.  ``python -m campaigns recall`` also
prints every missed label and every mutant off its labels, file:line, for the next operator to write.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from attnspec.mutation.faults import FAULTS
from attnspec.mutation.faults.annotations import comment_ids
from attnspec.mutation.generators.evidence import evidence
from attnspec.mutation.generators.sites import mutants_in

from . import table
from .conformance import REPO_ROOT

CORPUS = Path(__file__).resolve().parent / "corpus"
PAGE = REPO_ROOT / "docs" / "reference" / "faults.md"
BEGIN = "<!-- recall table: python -m campaigns recall -->"
END = "<!-- end of recall table -->"
TRITON_BEGIN = "<!-- recall table on Triton source: python -m campaigns recall -->"
TRITON_END = "<!-- end of the Triton recall table -->"
LABEL = re.compile(r"#\s*expect:\s*(F\d+(?:\s+F\d+)*)")
TRITON = re.compile(r"^(import triton\b|from triton\b)", re.MULTILINE)


@dataclass
class Row:
    """One fault over the whole corpus."""

    labelled: int = 0  # labelled statements
    found: int = 0  # labelled statements with a mutant of the fault
    mutants: int = 0
    on_label: int = 0  # mutants touching a line labelled with the fault
    files: int = 0  # files labelled with the fault
    sited_files: int = 0
    hidden: list[str] = field(default_factory=list)  # files: present, no mutant, no evidence
    missed: list[str] = field(default_factory=list)  # file:line labelled, no mutant there
    stray: list[str] = field(default_factory=list)  # file:line of mutants on no label of theirs


def labels(source: str) -> dict[str, dict[int, set[int]]]:
    """fault -> {labelled line: the lines it covers} (``# expect: F1 F3`` comments): a label on the
    first line of a statement that spans several covers all of them (a compound statement: its
    header)."""
    spans = statement_spans(source)
    found: dict[str, dict[int, set[int]]] = {}
    for line, faults in comment_ids(source, LABEL).items():
        for fault in faults:
            found.setdefault(fault, {})[line] = spans.get(line, {line})
    return found


def statement_spans(source: str) -> dict[int, set[int]]:
    """first line -> the lines of the statement (or compound statement header) that starts there."""
    spans: dict[int, set[int]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt):
            header = getattr(node, "test", None) or getattr(node, "iter", None)
            if isinstance(node, (ast.If, ast.While, ast.For)) and header is not None:
                end = header.end_lineno or node.lineno
            elif hasattr(node, "body"):
                continue
            else:
                end = node.end_lineno or node.lineno
            spans[node.lineno] = set(range(node.lineno, end + 1))
    return spans


def triton_source(source: str) -> bool:
    """Whether a file is Triton source: it imports triton (a PyTorch imitation of a kernel is not)."""
    return bool(TRITON.search(source))


def corpus_files(corpus: Path = CORPUS, triton: bool | None = None) -> list[Path]:
    """The corpus's files, sorted: all of them, or only the Triton source (triton=True) or the rest."""
    files = sorted(corpus.glob("*.py"))
    if triton is None:
        return files
    return [path for path in files if triton_source(path.read_text(encoding="utf-8")) == triton]


def measure(corpus: Path = CORPUS, triton: bool | None = None) -> dict[str, Row]:
    """Each fault's row over the corpus's files (all, or only the Triton source: see corpus_files)."""
    rows = {fault.id: Row() for fault in FAULTS}
    for path in corpus_files(corpus, triton):
        source = path.read_text(encoding="utf-8")
        name = path.name
        expected = labels(source)
        unknown = set(expected) - set(rows)
        if unknown:
            raise ValueError(f"{name}: labels of no fault in the catalogue: {', '.join(sorted(unknown))}")
        mutants = mutants_in(source, path.stem, name)
        seen = evidence(source)
        for fault, row in rows.items():
            wanted = expected.get(fault, {})
            covered = set().union(*wanted.values())
            made = [mutant for mutant in mutants if mutant.fault == fault]
            touched: set[int] = set()
            for mutant in made:
                lines = set(mutant.lines)
                if "\n" in mutant.replacement:  # a line inserted: it belongs to the statement before it
                    lines.add(mutant.start[0] - 1)
                touched |= lines
                if lines & covered:
                    row.on_label += 1
                else:
                    row.stray.append(f"{name}:{mutant.start[0]}")
            row.mutants += len(made)
            row.labelled += len(wanted)
            missed = sorted(line for line, span in wanted.items() if not span & touched)
            row.found += len(wanted) - len(missed)
            row.missed += [f"{name}:{line}" for line in missed]
            if wanted:
                row.files += 1
                row.sited_files += bool(made)
                if not made and fault not in seen:
                    row.hidden.append(name)
    return rows


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def render(rows: dict[str, Row], triton: bool | None = None) -> str:
    files = len(corpus_files(CORPUS, triton))
    where = (
        f"Measured on the corpus ({files} files in campaigns/corpus/, labelled by hand):"
        if triton is None
        else f"Measured on the corpus's Triton source ({files} files that import triton, labelled by hand):"
    )
    lines = [
        where,
        "",
        "| fault | labelled statements | recall | mutants | precision | files sited | not recognised |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for fault in FAULTS:
        row = rows[fault.id]
        if not row.labelled and not row.mutants:
            continue
        not_recognised = row.files - row.sited_files - len(row.hidden)
        lines.append(
            f"| {fault.id} | {row.labelled} | {percent(row.found, row.labelled)} | {row.mutants} | "
            f"{percent(row.on_label, row.mutants)} | {row.sited_files} of {row.files} | {not_recognised} |"
        )
    total = Row(
        labelled=sum(r.labelled for r in rows.values()),
        found=sum(r.found for r in rows.values()),
        mutants=sum(r.mutants for r in rows.values()),
        on_label=sum(r.on_label for r in rows.values()),
    )
    lines.append(
        f"| all | {total.labelled} | {percent(total.found, total.labelled)} | {total.mutants} | "
        f"{percent(total.on_label, total.mutants)} | | |"
    )
    absent = [fault.id for fault in FAULTS if not rows[fault.id].labelled and not rows[fault.id].mutants]
    if absent:
        lines += ["", f"Not in the corpus: {', '.join(absent)}."]
    return "\n".join(lines)


def page_block(text: str) -> str:
    return table.page_block(text, BEGIN, END)


def triton_page_block(text: str) -> str:
    return table.page_block(text, TRITON_BEGIN, TRITON_END)


def main() -> int:
    rows = measure()
    table.write_block(PAGE, render(rows), BEGIN, END)
    table.write_block(PAGE, render(measure(triton=True), triton=True), TRITON_BEGIN, TRITON_END)
    for fault, row in rows.items():
        for kind, where in (("missed", row.missed), ("stray", row.stray), ("hidden", row.hidden)):
            if where:
                print(f"{fault} {kind}: {', '.join(where)}")
    print(f"wrote the recall tables of {PAGE.relative_to(REPO_ROOT)}", file=sys.stderr)
    return 0
