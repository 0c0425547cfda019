"""Inline annotations: ``# attnspec: site F12`` at the end of a line points a fault at code the
catalogue's operators do not recognise, and the campaign mutates that line with the fault's generic
edits (attnspec/mutation/faults/edits.py; each fault module lists its own)."""

from __future__ import annotations

import io
import re
import tokenize

ANNOTATION = re.compile(r"#\s*attnspec:\s*site\s+(F\d+(?:[\s,]+F\d+)*)")


def comment_ids(source: str, pattern: re.Pattern[str]) -> dict[int, set[str]]:
    """line -> the fault ids a comment on it names through ``pattern`` (its first group); {} where
    the source does not tokenize."""
    found: dict[int, set[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                match = pattern.search(token.string)
                if match:
                    found.setdefault(token.start[0], set()).update(
                        re.split(r"[\s,]+", match.group(1).strip())
                    )
    except (tokenize.TokenError, SyntaxError):
        return {}
    return found


def annotations(source: str) -> dict[int, set[str]]:
    """line -> the faults ``# attnspec: site F..`` comments point at it."""
    return comment_ids(source, ANNOTATION)
