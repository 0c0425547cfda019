"""Every counterfactual of the diagnosis (src/attnspec/specs/counterfactuals.py) names a fault of the
catalogue, so that a failure's named fault is one the catalogue documents."""

from __future__ import annotations

from attnspec.mutation.faults import FAULTS
from attnspec.specs.counterfactuals import COUNTERFACTUALS


def test_every_counterfactual_names_a_fault_of_the_catalogue():
    catalogue = {fault.id for fault in FAULTS}
    named = {counterfactual.fault for counterfactual in COUNTERFACTUALS} - {""}
    assert named <= catalogue, named - catalogue
