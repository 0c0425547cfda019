"""The docs' conformance table (docs/explanation/conformance.md) is the one the campaigns measured,
with the catalogue of today."""

from __future__ import annotations

import json

from attnspec.mutation.faults import FAULTS
from campaigns.conformance import catalogue_fingerprint
from campaigns.table import PAGE, TABLE_FILE, TARGETS, page_block, render

MEASURED = json.loads(TABLE_FILE.read_text())


def test_readme_shows_the_measured_table():
    assert page_block(PAGE.read_text(encoding="utf-8")) == render(MEASURED), (
        "the docs' conformance table differs from campaigns/conformance-table.json: python -m campaigns table"
    )


def test_table_was_measured_with_todays_catalogue():
    assert MEASURED["catalogue"] == catalogue_fingerprint(), (
        "src/attnspec/mutation/faults/ changed since the conformance table was measured: "
        "tox -e conformance-mutation (the campaigns, then python -m campaigns table)"
    )


def test_every_row_adds_up_and_its_status_follows_from_its_counts():
    assert set(MEASURED["targets"]) == set(TARGETS)
    for target, entry in MEASURED["targets"].items():
        assert set(entry["faults"]) == {fault.id for fault in FAULTS}, target
        for fault, row in entry["faults"].items():
            where = f"{target} {fault}"
            counted = row["killed"] + row["survived"] + row["not_exercised"] + row["other"]
            assert counted == row["mutants"], where
            assert row["triaged"] <= row["survived"] and row["sites"] <= row["mutants"], where
            assert (row["mutants"] == 0) == (row["status"] in ("no site", "not recognised")), where
            if row["status"] == "killed":
                assert row["killed"] and row["survived"] == row["triaged"] and not row["other"], where


def test_every_exercised_fault_is_killed_or_a_triaged_equivalent():
    """The issue's bar: a fault with a site the kit reaches is killed there (or its survivors are
    triaged equivalents of that target); 'not exercised', 'not recognised' and 'no site' are
    reported, not hidden."""
    for target, entry in MEASURED["targets"].items():
        for fault, row in entry["faults"].items():
            assert row["status"] in ("killed", "equivalent", "not exercised", "no site", "not recognised"), (
                f"{target} {fault}"
            )
