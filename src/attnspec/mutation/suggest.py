"""The test that kills each survivor: ``attnspec mutate SOURCE... --impl module:OBJ -- COMMAND``.

The user's command judges every mutant, as without ``--impl``.  Then the kit's properties are run
against each declared target with each surviving mutant swapped in (one more engine run per target,
over the survivors only, each mutant up to its first failing property): a property that fails under
the mutant and passed on the unmutated code kills it.  Those properties are written as tests into
the reports' folder, one test per fault, named after it, each calling ``attnspec.check(TARGET,
PROPERTY...)`` (src/attnspec/runner/api.py); a survivor none kills is said so, with what the target
would have to expose (the fault's ``reached_through``).  Without ``--impl`` the summary says, for
each surviving fault, what declaration would let the kit see it.

The file is ``test_attnspec_suggested_<module>.py`` (:func:`file_name`), to be copied into the
user's tests as it is: named after the modules graded, it is the same name every run (a copy made
again replaces the last one), no project's own test module is likely to bear it, and the copies of
two campaigns on different modules do not collide (pytest's default import mode refuses two test
modules of one name in folders without ``__init__.py``).  Beside it goes a conftest.py that keeps
pytest out of the reports' folder (:data:`CONFTEST`), so that a bare ``pytest`` in the project
collects the copy in the tests and not this one too.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import CampaignError
from .faults import FAULTS, FAULTS_BY_ID
from .generators.sites import SiteMutant

PREFIX = "test_attnspec_suggested_"  # the file's name: PREFIX + the modules graded + ".py"
NAME_CHARS = 60  # of the modules' part of the name, beyond which it is cut and a digest added
CONFTEST = "conftest.py"
# what the reports' folder's conftest.py begins with: the campaign rewrites a conftest.py that does,
# and leaves any other alone
CONFTEST_MARK = '"""Written by attnspec mutate'
CONFTEST_TEXT = f'''{CONFTEST_MARK} beside the tests it suggests: pytest collects none of them here, in the
reports' folder, so that a bare `pytest` in the project runs only the copy you keep with your tests
(two test modules of one name would stop its collection).  Run this one by naming it.
"""

collect_ignore_glob = ["{PREFIX}*.py"]
'''
UNDETECTED = ("Survived", "NoCoverage")
STATEMENT_CHARS = 110  # of a requirement's statement in the summary


@dataclass
class Suggestion:
    """The test that guards one fault: the properties (on which targets) that killed its survivors."""

    fault: str
    checks: dict[str, list[str]] = field(default_factory=dict)  # target -> "test_file.py::test_name"
    requirements: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)  # the survivors the properties kill
    missed: list[str] = field(default_factory=list)  # those no property killed on any target
    unreached: bool = True  # no target ran a line of the missed ones (else one ran them and passed)

    @property
    def test(self) -> str:
        words = re.findall(r"[a-z0-9]+", FAULTS_BY_ID[self.fault].description.split("(")[0].lower())
        return f"test_{self.fault}_" + "_".join(words[:6])


def file_name(settings) -> str:
    """The suggested tests' file: test_attnspec_suggested_<the modules graded>.py, the same name for
    the same campaign on every run (``settings``: a campaign's, its ``sources`` each with a ``module``)."""
    modules = [re.sub(r"[^A-Za-z0-9_]+", "_", source.module).strip("_") for source in settings.sources]
    part = "_".join(module for module in modules if module) or "code"
    if len(part) > NAME_CHARS:  # many sources: cut, and told apart by a digest of them all
        part = part[: NAME_CHARS - 9] + "_" + hashlib.sha256(part.encode()).hexdigest()[:8]
    return f"{PREFIX}{part}.py"


def no_conftest(settings) -> str:
    """'' where the reports' folder takes the conftest.py that keeps pytest out of it, else why not:
    a conftest.py of the user's is there (left alone), or the folder holds the project itself (a
    conftest.py there would configure the user's whole test run)."""
    out_dir = settings.out_dir
    if Path(settings.cwd).resolve().is_relative_to(out_dir.resolve()):
        return "the reports' folder holds the project"
    existing = out_dir / CONFTEST
    ours = existing.is_file() and existing.read_text("utf-8", errors="replace").startswith(CONFTEST_MARK)
    if existing.exists() and not ours:
        return f"the reports' folder has a {CONFTEST} of yours"
    return ""


def out_files(settings, test: str) -> dict[str, str]:
    """The files written into the reports' folder: the suggested tests, and the conftest.py that keeps a
    bare pytest from collecting them there too (unless :func:`no_conftest` says why not)."""
    files = {file_name(settings): test}
    if not no_conftest(settings):
        files[CONFTEST] = CONFTEST_TEXT
    return files


def survivors(mutants: list[SiteMutant], results: dict, triage: dict) -> list[SiteMutant]:
    """The mutants the user's tests let through (survived or not exercised), triage aside."""
    statuses = {name: entry.get("status") for name, entry in results["mutants"].items()}
    return [m for m in mutants if statuses.get(m.name) in UNDETECTED and m.name not in triage]


def property_of(nodeid: str) -> str:
    """properties/test_x.py::test_y[params] -> test_x.py::test_y (what attnspec.check takes)."""
    path, _, test = nodeid.partition("::")
    return f"{Path(path).name}::{test.split('[')[0]}"


def chosen(failures: list[list], expected: tuple[str, ...]) -> tuple[str, list[str]]:
    """Of the kit's tests that failed under a mutant ([test, requirements, seconds, path]: the kill
    matrix's row), the one to hand over: the fastest of those checking a requirement the catalogue
    expects to kill the fault (the clearest reason), else the fastest."""
    expected_ones = [f for f in failures if set(f[1]) & set(expected)]
    test, requirements = min(expected_ones or failures, key=lambda f: f[2])[:2]
    return test, requirements


def find(settings, left: list[SiteMutant], run_kit) -> tuple[list[Suggestion], list[str]]:
    """The suggestions for the survivors ``left``, and notes on targets the kit could not run on.
    ``run_kit(settings, mutants)`` runs the kit's campaign and returns the engine's results."""
    killers: dict[str, tuple[str, list[str], str]] = {}  # mutant -> (property, requirements, target)
    tried: set[str] = set()  # the survivors some target's kit campaign ran
    reached: set[str] = set()  # those whose lines some target ran
    notes = []
    for target in settings.suggest_targets:
        pending = [m for m in left if m.name not in killers]
        if not pending:
            break
        print(f"\nthe kit's properties against {target}, on the {len(pending)} surviving mutants", flush=True)
        kit = replace(
            settings,
            name=target,
            suite="kit",
            arguments=[],
            impl=target,
            kill_matrix=True,
            incremental=False,
            since=None,
            suggest_targets=(),
        )
        try:
            results = run_kit(kit, pending)
        except CampaignError as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: ")]
            notes.append(f"no test suggested from {target}: " + "\n    ".join(errors or lines[:1]))
            continue
        tried.update(m.name for m in pending)
        for name, entry in results["mutants"].items():
            if entry.get("status") != "NoCoverage":
                reached.add(name)
            failures = entry.get("failures") or []
            if entry.get("status") == "Killed" and failures:
                test, requirements = chosen(failures, FAULTS_BY_ID[entry["fault"]].kills)
                killers[name] = (property_of(test), list(requirements), target)
    found: dict[str, Suggestion] = {}
    for mutant in left:
        suggestion = found.setdefault(mutant.fault, Suggestion(mutant.fault))
        if mutant.name not in killers:
            if mutant.name in tried:
                suggestion.missed.append(mutant.name)
                suggestion.unreached &= mutant.name not in reached
            continue
        prop, requirements, target = killers[mutant.name]
        checks = suggestion.checks.setdefault(target, [])
        if prop not in checks:
            checks.append(prop)
        suggestion.requirements += [r for r in requirements if r not in suggestion.requirements]
        suggestion.killed.append(mutant.name)
    order = [fault.id for fault in FAULTS]
    found = {fault: s for fault, s in found.items() if s.checks or s.missed}
    return sorted(found.values(), key=lambda s: order.index(s.fault)), notes


def statement(requirement: str, width: int | None = None) -> str:
    from attnspec.specs import REQUIREMENTS

    text = REQUIREMENTS[requirement].statement if requirement in REQUIREMENTS else ""
    return text if width is None or len(text) <= width else text[: width - 3] + "..."


def module_text(suggestions: list[Suggestion], command: str, where: dict[str, str]) -> str:
    """The suggested tests' module (:func:`file_name`): one test per fault some property kills.
    ``where``: mutant -> file:line."""
    out = [
        '"""Tests for the faults your tests let survive, written by attnspec mutate:',
        "",
        f"    {command}",
        "",
        "Each test runs, against your target, the kit's properties that failed with the fault injected",
        "(attnspec.check: in this process, the same examples every run).  Keep this file with your tests:",
        'with it, the same campaign kills these faults."""',
        "",
        "import attnspec",
    ]
    for suggestion in suggestions:
        if not suggestion.checks:
            continue
        fault = FAULTS_BY_ID[suggestion.fault]
        lines = sorted({where[name] for name in suggestion.killed if name in where})
        out += ["", "", f"def {suggestion.test}():"]
        out.append(f'    """{fault.id}, {fault.description}: survived at {", ".join(lines)}.')
        for requirement in suggestion.requirements:
            out += ["", f"    {requirement}: {statement(requirement)}"]
        out.append('    """')
        for target, properties in suggestion.checks.items():
            named = ", ".join(repr(p) for p in properties)
            call = f"    attnspec.check({target!r}, {named})"
            if len(call) > 100:
                call = (
                    "    attnspec.check(\n"
                    + "".join(f"        {a!r},\n" for a in [target, *properties])
                    + "    )"
                )
            out.append(call)
    return "\n".join(out) + "\n"


def summary_lines(
    suggestions: list[Suggestion], notes: list[str], written: str | None, no_conftest: str = ""
) -> list[str]:
    """The summary's section on the survivors' tests; ``written``: the file they are in, as shown, and
    ``no_conftest``: why a bare pytest in the project would collect that file too (:func:`no_conftest`)."""
    out = ["", "the test that kills each survivor:"] + [f"  {note}" for note in notes]
    for suggestion in suggestions:
        fault = FAULTS_BY_ID[suggestion.fault]
        if suggestion.checks:
            first = suggestion.requirements[0] if suggestion.requirements else ""
            why = f": {first} {statement(first, STATEMENT_CHARS)}" if first else ""
            out.append(f"  {fault.id:<4} {suggestion.test} kills it{why}")
        if suggestion.missed:
            some = "" if not suggestion.checks else f"{len(suggestion.missed)} of its mutants: "
            how = (
                "the target runs none of its lines"
                if suggestion.unreached
                else "the target runs it, and no property the target can run detects it"
            )
            out.append(f"  {fault.id:<4} {some}{how}: the kit sees it through {fault.reached_through}")
    if written and no_conftest:
        out.append(
            f"written to {written}: move it among your tests, as it is (`mv {written} tests/`), and this "
            f"campaign kills those faults; move, not copy: {no_conftest}, so a bare pytest would collect "
            "a copy left there too"
        )
    elif written:
        out.append(
            f"written to {written}: copy it among your tests, as it is (`cp {written} tests/`), and this "
            "campaign kills those faults (a bare pytest leaves the one in the reports' folder alone)"
        )
    return out


def without_target(faults: list[str]) -> list[str]:
    """For a campaign without --impl: what would let the kit see each surviving fault."""
    if not faults:
        return []
    out = [
        "",
        "the kit's properties kill these faults where they can see them: name your code as a target "
        "(--impl module:OBJ, the object `attnspec check` takes) and the campaign writes the test that kills "
        "each survivor; the kit sees",
    ]
    out += [f"  {fault:<4} through {FAULTS_BY_ID[fault].reached_through}" for fault in faults]
    return out
