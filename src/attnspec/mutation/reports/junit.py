"""JUnit XML of a catalogue campaign, for CI systems that show test reports: one test case per
catalogue fault, with a failure per surviving mutant (its location and diff), skipped when the
fault has no site (or, in the kit's campaigns, no property reaches it).  The suite's ``failures``
counts failing cases (faults), as JUnit readers expect, not surviving mutants."""

from __future__ import annotations

import datetime
import os
import xml.etree.ElementTree as ET

from ..faults import FAULTS
from ..triage import untriaged
from .stryker import Mutant


def junit_xml(
    title: str, mutants: list[Mutant], rows: dict, triage: dict, wall_s: float, strict: bool
) -> str:
    stamp = datetime.datetime.now().replace(microsecond=0).isoformat()
    suite = ET.Element("testsuite", name=title, timestamp=stamp, time=f"{wall_s:.3f}")
    failures = skipped = 0
    for fault in FAULTS:
        row = rows[fault.id]
        own = [m for m in mutants if m.operator == fault.id]
        seconds = sum(m.duration_s or 0.0 for m in own)
        case = ET.SubElement(
            suite, "testcase", classname="attnspec.catalogue", name=f"{fault.id} {fault.description}"
        )
        case.set("time", f"{seconds:.3f}")
        lines = []
        failing = False
        for mutant in own:
            undetected = mutant.status == "Survived" or (strict and mutant.status == "NoCoverage")
            where = f"{mutant.path}:{mutant.start[0]}"
            if undetected and untriaged(mutant, triage):
                what = "survived" if mutant.status == "Survived" else "not exercised (no test runs this line)"
                failure = ET.SubElement(case, "failure", message=f"{mutant.name} {what} at {where}")
                failure.set("type", mutant.status)
                failure.text = mutant.diff
                failing = True
            elif undetected:
                lines.append(f"{mutant.name} at {where}: triaged equivalent: {triage[mutant.name]['reason']}")
            else:
                killer = f" by {mutant.killed_by[0]}" if mutant.killed_by else ""
                lines.append(f"{mutant.name} at {where}: {mutant.status}{killer}")
        failures += failing
        if row["status"] in ("no site", "not recognised", "not exercised"):
            message = {
                "no site": "no site in the mutated code",
                "not recognised": f"present at {row.get('present')}, but no operator recognised it",
                "not exercised": "not exercised",
            }[row["status"]]
            ET.SubElement(case, "skipped", message=message)
            skipped += 1
        if lines:
            ET.SubElement(case, "system-out").text = "\n".join(lines)
    suite.set("tests", str(len(FAULTS)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    suite.set("hostname", os.uname().nodename if hasattr(os, "uname") else "")
    suites = ET.Element("testsuites", name="attnspec mutate")
    suites.append(suite)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
