"""The faults page's recall table is a fresh measurement on the corpus, and on the corpus every
present fault is either sited or said present: none is hidden."""

from __future__ import annotations

import pytest

from campaigns.recall import (
    CORPUS,
    PAGE,
    corpus_files,
    labels,
    measure,
    page_block,
    render,
    triton_page_block,
)

ROWS = measure()
TRITON_ROWS = measure(triton=True)


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


def test_the_page_shows_todays_measurement_on_triton_source():
    assert triton_page_block(PAGE.read_text(encoding="utf-8")) == render(TRITON_ROWS, triton=True), (
        "the Triton recall table of docs/reference/faults.md differs from a measurement on the Triton "
        "files of campaigns/corpus/: python -m campaigns recall"
    )


def test_the_corpus_has_triton_source_and_the_rest():
    """The Triton table measures real kernels (files that import triton); a PyTorch imitation of one
    stays in the other files."""
    triton = {path.name for path in corpus_files(triton=True)}
    assert len(triton) >= 3 and "triton_style_kernel.py" not in triton
    assert triton < {path.name for path in corpus_files()}


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
