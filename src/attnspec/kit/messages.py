"""Probes for error messages: ``pytest.raises(match=...)`` regexes that ask a message to name an
argument, its value or several words at once (ERR-1, ERR-2, ERR-3)."""

from __future__ import annotations

import re


def message_names(*parts: object) -> str:
    """A ``pytest.raises(match=...)`` regex: the message contains every one of ``parts``
    (an argument's name, its offending value, a shape) as a whole token, in any order.
    Strings are matched literally; other values by their repr (8 -> "8", (2, 6) -> "(2, 6)")."""
    tokens = [p if isinstance(p, str) else repr(p) for p in parts]
    # A token may not continue a longer word or number: "0" must not match in "10" or "0.5".
    return "(?s)^" + "".join(rf"(?=.*(?<![\w.-]){re.escape(t)}(?!\w|\.\d))" for t in tokens)


def names(word: str) -> str:
    """A regex that finds ``word`` as a whole word (q must not match 'sequence')."""
    return rf"(?<![A-Za-z_]){re.escape(word)}(?![A-Za-z_])"


def mentions_all(*words: str) -> str:
    """A regex that matches when every one of the regexes ``words`` matches somewhere in the message."""
    return "(?s)^" + "".join(rf"(?=.*{w})" for w in words)


def names_value(word: str, value: object) -> str:
    """A regex for ``word`` followed by its value (``q (2, 0, 3)``, ``window=-2``, ``tk: 0``):
    ERR-1 asks the message to name the argument *and* its value."""
    return names(word) + r"\s*[=:]?\s*" + re.escape(str(value)) + r"(?![\w.])"
