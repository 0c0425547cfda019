"""The faults page's recall table is a fresh measurement on the corpus, and on the corpus every
present fault is either sited or said present: none is hidden."""

from __future__ import annotations

import pytest

from campaigns.recall import CORPUS, PAGE, labels, measure, page_block, render

ROWS = measure()


def test_the_corpus_is_labelled():
    files = sorted(CORPUS.glob("*.py"))
    assert len(files) >= 10
    for path in files:
        assert labels(path.read_text(encoding="utf-8")), f"{path.name} has no # expect: label"


def test_the_page_shows_todays_measurement():
    assert page_block(PAGE.read_text(encoding="utf-8")) == render(ROWS), (
        "the recall table of docs/reference/faults.md differs from a measurement on campaigns/corpus/: "
        "python -m campaigns recall"
    )


@pytest.mark.parametrize("fault", sorted(ROWS, key=lambda f: int(f[1:])))
def test_no_present_fault_is_hidden(fault):
    """Acceptance: a fault the code has is sited, or reported 'not recognised' with its line."""
    row = ROWS[fault]
    assert not row.hidden, f"{fault} present in {row.hidden} but neither sited nor seen by the evidence"


def test_labels_are_read_from_comments_only():
    source = (
        "def f(x):\n    y = x * 2  # expect: F3 F4\n    s = '# expect: F1'\n"
        "    return g(  # expect: F1\n        y\n    )\n"
    )
    assert labels(source) == {"F3": {2: {2}}, "F4": {2: {2}}, "F1": {4: {4, 5, 6}}}
