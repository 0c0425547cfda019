"""Whether code visibly has a fault's feature, whatever idiom it is written in: the evidence that turns
"no site" into one of two honest states.

A fault the operators (mutation/faults/) placed no mutant for is either *absent* (the code has no such
feature: no RoPE anywhere, no cache, no padding mask) or *present but not recognised* (the code
visibly has it, in an idiom no operator knows): then the campaign cannot grade it, and says where.
The evidence is deliberately plain, the identifiers on one line of code (comments and strings
are not code): ``cos`` and ``sin`` beside each other are a rotation, ``attention_mask`` or a
``pad`` is a padding mask, ``past`` beside ``arange`` or ``positions`` is a position offset.  It errs
towards "present": a feature said present that was absent costs a reader one look at one line,
while a present one said absent makes a weak suite look strong.  A user's ``# attnspec: site F12``
annotation (annotations.py) is evidence too, whatever the line says.
"""

from __future__ import annotations

import io
import keyword
import tokenize
from dataclasses import dataclass

import libcst as cst

from ..faults import EVIDENCE, FAULTS
from ..faults.annotations import annotations
from ..faults.matchers import name_words
from .sites import function_spans

# Each fault's evidence (its module's ``evidence=``): alternatives, each a set of words that must all
# be on one line of code; words that void it on their line, and the fault it only exists beside.
VOIDED_BY = {fault.id: set(fault.voided_by) for fault in FAULTS if fault.voided_by}
NEEDS = {fault.id: fault.needs for fault in FAULTS if fault.needs}


@dataclass(frozen=True)
class Evidence:
    fault: str
    line: int  # 1-based
    words: tuple[str, ...]  # the words that were seen together
    code: str  # the line, stripped


def code_lines(source: str) -> dict[int, set[str]]:
    """The words of the identifiers on each line of the functions' bodies (where mutants go: no
    signature, class header, import or module-level constant, no comment or string), but a keyword's
    own name (``rope=False`` says no more than ``False``); {} where the source does not tokenize."""
    try:
        bodies = [(body, last) for _, last, body in function_spans(source).values()]
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, cst.ParserSyntaxError):
        return {}
    lines: dict[int, set[str]] = {}
    depth = 0
    for index, token in enumerate(tokens):
        if token.type == tokenize.OP:
            depth += token.string in "([{"
            depth -= token.string in ")]}"
            if token.string in ("+", "%", "//", "(") and any(
                first <= token.start[0] <= last for first, last in bodies
            ):
                lines.setdefault(token.start[0], set()).add(token.string)  # a sum, a modulo, a call
            continue
        if (
            token.type != tokenize.NAME
            or keyword.iskeyword(token.string)
            or not any(first <= token.start[0] <= last for first, last in bodies)
        ):
            continue
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if depth and following is not None and following.string == "=":
            continue  # a keyword argument's name, or a parameter's
        if token.string[0].isupper() and not token.string.isupper():
            continue  # a class (CausalSelfAttention is no causal flag)
        words = lines.setdefault(token.start[0], set())
        words.update(name_words(token.string))
        words.add("=" + token.string.lower())  # the whole identifier, for the evidence that needs it
    return lines


def evidence(source: str, faults: set[str] | None = None) -> dict[str, Evidence]:
    """The first line that shows each fault's feature (of ``faults``, by default every one)."""
    lines = code_lines(source)
    text = source.splitlines()
    found: dict[str, Evidence] = {}
    for fault, alternatives in EVIDENCE.items():
        if faults is not None and fault not in faults:
            continue
        for number in sorted(lines):
            if VOIDED_BY.get(fault, set()) & lines[number]:
                continue
            seen = next((words for words in alternatives if words <= lines[number]), None)
            if seen is not None:
                found[fault] = Evidence(fault, number, tuple(sorted(seen)), text[number - 1].strip())
                break
    for fault, needed in NEEDS.items():
        if fault in found and needed not in evidence_of(found, lines, needed):
            del found[fault]
    for number, named in sorted(annotations(source).items(), reverse=True):  # the first line wins
        for fault in named & set(EVIDENCE):
            if faults is None or fault in faults:
                found[fault] = Evidence(fault, number, ("annotation",), text[number - 1].strip())
    return found


def evidence_of(found: dict[str, Evidence], lines: dict[int, set[str]], fault: str) -> dict[str, Evidence]:
    """``found`` if it has ``fault``, else whether the lines show it (for a fault left out of a search)."""
    if fault in found:
        return found
    for words in EVIDENCE[fault]:
        if any(words <= line for line in lines.values()):
            return {fault: Evidence(fault, 0, tuple(sorted(words)), "")}
    return {}
