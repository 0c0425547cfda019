"""The kit catches every bug its peers' correctness recipes catch, and fails no target they pass.

peers.py writes the KernelBench-style check and FlashAttention's grid rule from their projects'
documented rules; peers-table.json holds their verdicts and the kit's on the corpus (correct targets,
broken kernels, broken targets), and docs/explanation/peers.md the table of it.  Here the recipes run
again, in this process (a few seconds each; the kit's own verdicts come from the file:
test_broken_kernels.py, test_conformance.py, test_capability_subsets.py and test_zoo.py establish
them in every test run),
and must give the recorded verdicts.  Nothing here runs the kit: regenerate the file and the table
with ``python -m campaigns.peers --table`` (``--only NAME`` for one row).
"""

from __future__ import annotations

import pytest
import torch

from attnspec.kit.loading import load
from attnspec.protocol.targets import Target
from attnspec.specs.oracle import attention_oracle_by_rows
from campaigns import peers

TABLE = peers.read_table()
ROWS = {row["target"]: row for row in TABLE["targets"]}
REGENERATE = "run python -m campaigns.peers --table"


def test_the_table_covers_the_corpus():
    assert list(ROWS) == list(peers.corpus()), f"the corpus changed: {REGENERATE}"
    assert all(ROWS[name]["expected"] == expected for name, expected in peers.corpus().items())


@pytest.mark.parametrize("name", list(peers.corpus()))
def test_the_recipes_still_give_the_recorded_verdicts(name):
    recorded = ROWS.get(name)
    assert recorded is not None, f"{name} has no row: {REGENERATE} --only {name}"
    target = load(name)
    for recipe, check in peers.RECIPES.items():
        passed, detail = check(target)
        assert ("PASS" if passed else "FAIL") == recorded[recipe]["verdict"], (
            f"{recipe} on {name} now says {detail!r}; recorded: {recorded[recipe]['detail']!r}"
        )


@pytest.mark.parametrize("name", list(peers.corpus()))
def test_the_kit_fails_every_bug_a_peer_catches_and_passes_every_correct_target(name):
    row = ROWS[name]
    if row["expected"] == "correct":
        assert row["kit"]["verdict"] == "PASS", f"the kit fails correct {name}: {row['kit']['detail']}"
        for recipe in peers.RECIPES:  # a peer recipe that fails a correct target is a bug of peers.py
            assert row[recipe]["verdict"] == "PASS", f"{recipe} fails correct {name}: {row[recipe]['detail']}"
    else:
        assert row["kit"]["verdict"] == "FAIL", f"the kit passes broken {name}: {row['kit']['detail']}"


def test_the_readme_shows_the_table_of_the_file():
    text = peers.PAGE.read_text()
    assert peers.BEGIN in text and peers.END in text, (
        "docs/explanation/peers.md lost the peers table's markers"
    )
    assert peers.page_table(text) == peers.render(TABLE), (
        f"the peers table of docs/explanation/peers.md is stale: {REGENERATE}"
    )


def test_the_grids_eager_reference_in_float64_is_the_oracle():
    # ref_lowp is peers.eager_attention in the tested dtype: in float64 it must be the oracle's formula.
    target = load("examples.toy_attention:attention")
    for case in peers.flash_cases(target)[:8]:
        q, k, v, sinks = (None if t is None else t.double() for t in case.inputs())
        eager = peers.eager_attention(
            q, k, v, causal=case.causal, window=case.window, sinks=sinks, dtype=torch.float64
        )
        oracle = attention_oracle_by_rows(q, k, v, causal=case.causal, window=case.window, sinks=sinks)
        assert (eager - oracle).abs().max().item() < 1e-12, case.label()


def test_the_grid_stays_inside_the_declared_capabilities():
    toy = load("examples.toy_attention:attention")
    for capabilities in [set(), {"decode"}, {"window", "gqa"}, set(toy.capabilities)]:
        target = Target("narrowed", toy.attention, frozenset(capabilities))
        cases = peers.flash_cases(target)
        assert cases
        for case in cases:
            assert case.tq <= case.tk or "blind" in capabilities, case.label()
            assert case.tq >= case.tk or "decode" in capabilities, case.label()
            assert case.window is None or "window" in capabilities, case.label()
            assert not case.sinks or "sinks" in capabilities, case.label()
            assert case.n_kv_heads == peers.FA_HEADS or "gqa" in capabilities, case.label()
            assert case.causal or "non_causal" in capabilities, case.label()
            assert case.dtype == torch.float32 or "float16" in capabilities, case.label()
