"""The site annotations that cannot do what they say, refused before a campaign runs.

``# attnspec: site F<n>`` at the end of a line asks the campaign to mutate that line with the
fault's generic edits (faults/edits.py).  Three such annotations would grade nothing while the user
believes the fault graded, so each stops the campaign with one line naming the file, the line and
what to do instead (campaign.plan_mutants, exit 2 before anything runs, as a malformed triage comment
does):

- a fault the catalogue does not have;
- a fault that has no generic edit (GENERIC): no annotation can place it, at any line; what does
  guard it is a test (the summary says the same of such a fault found present but not recognised);
- a line none of the fault's edits changes (the comment on a ``def`` line, on a line with no
  operand, call, keyword or comparison the edits take, outside any function or method, or where the
  edit makes the same code as another mutant): the annotation is misplaced, or stale after an edit.

An error rather than a line in the summary: the annotation is the user's explicit instruction, the
summary of a campaign that ran anyway would grade the rest and could pass (exit 0) with the pointed
fault ungraded, and the fix is in the source, before any run is worth its minutes.  An annotation
where the catalogue's own operators already placed the fault adds nothing, and is no error: the
fault is graded there.
"""

from __future__ import annotations

import io
import tokenize

from ..faults import FAULTS_BY_ID, GENERIC
from ..faults.annotations import ANNOTATION
from ..reports.summary import by_hand
from .sites import SiteMutant, function_spans, mutants_in


def comments(source: str) -> dict[int, tuple[int, list[str]]]:
    """line -> (the column its ``# attnspec: site`` comment starts at, the fault ids it names)."""
    found: dict[int, tuple[int, list[str]]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                match = ANNOTATION.search(token.string)
                if match:
                    named = match.group(1).replace(",", " ").split()
                    found[token.start[0]] = (token.start[1], list(dict.fromkeys(named)))
    except (tokenize.TokenError, SyntaxError):
        return {}
    return found


def edits_of(fault: str) -> str:
    """The fault's generic edits, each in a few words (``a <op> b -> a``)."""
    said = []
    for operator in GENERIC[fault]:
        text = " ".join((operator.__doc__ or operator.__name__).split())
        text = text.split(";")[0].split(" (")[0].split(": ")[0].rstrip(".")
        if text not in said:
            said.append(text)
    return "; ".join(said)


def refusals(source: str, module: str, path: str, only: set[str] | None = None) -> list[str]:
    """One line per annotation of ``source`` (shown as ``path``, imported as ``module``) that cannot
    place its fault, in file order.  ``only``: the functions the campaign mutates (None: all); an
    annotation in another is judged only by its fault."""
    marks = comments(source)
    if not marks:
        return []
    spans = function_spans(source)
    out = []
    for line, (column, named) in sorted(marks.items()):
        for fault in named:
            said = f"{path}:{line}: `# attnspec: site {fault}`"
            if fault not in FAULTS_BY_ID:
                out.append(
                    f"{said}: the catalogue has no fault {fault} (`attnspec mutate --list-faults` lists "
                    "them): correct the id, or remove the annotation"
                )
                continue
            name = FAULTS_BY_ID[fault].description.split(" (")[0]
            if fault not in GENERIC:
                out.append(
                    f"{said} cannot place {fault} ({name}): it has no generic edit, so no annotation "
                    f"places it; remove the annotation, and {by_hand(fault)}"
                )
                continue
            inside = [q for q, (first, last, _) in spans.items() if first <= line <= last]
            if not inside:
                out.append(
                    f"{said} places no mutant: the line is in no function or method the campaign "
                    "mutates (a top-level function, or a method of a top-level class); move it to the "
                    "line in one that computes the fault's feature, or remove it"
                )
                continue
            if only is not None and inside[0] not in only:
                continue  # a function this campaign does not mutate (--since, module:functions)
            if not places(source, module, path, inside[0], fault, line, column):
                out.append(
                    f"{said} places no mutant: none of {fault}'s generic edits ({edits_of(fault)}) "
                    "changes this line; move it to the line that computes the fault's feature, or "
                    "remove it"
                )
    return out


def places(source: str, module: str, path: str, qualname: str, fault: str, line: int, column: int) -> bool:
    """Whether the fault has a mutant at ``line`` (its operators' or the annotation's): one that
    changes the line, or one the annotation's comment (at ``column``) makes and the source without
    it does not (an edit of a statement that goes on past the line)."""
    made = mutants_in(source, module, path, {qualname}, {fault})
    if any(line in mutant.lines for mutant in made):
        return True
    lines = source.splitlines(keepends=True)
    text = lines[line - 1]
    ending = text[len(text.rstrip("\r\n")) :]
    lines[line - 1] = text[:column].rstrip() + ending
    bare = mutants_in("".join(lines), module, path, {qualname}, {fault})
    return spans(made) != spans(bare)


def spans(mutants: list[SiteMutant]) -> set[tuple]:
    return {(m.start, m.end, m.replacement) for m in mutants}
