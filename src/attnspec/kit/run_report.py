"""What a run of the properties says about its target: the capability table and the verdict.

A pytest plugin (conftest.py registers one per run) that counts, from the test reports, what
passed, which requirements failed, and how many tests each missing capability skipped, at
collection or at run time (a skip whose reason reads "lacks: CAPABILITY, ..."), and keeps each
failure in brief (``Failure``: its requirements, the first line of its error and Hypothesis's
minimal failing case), which `attnspec check` prints instead of pytest's tracebacks.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnspec.protocol import interpreted
from attnspec.protocol.declared import declaration
from attnspec.protocol.targets import CAPABILITIES, Target
from attnspec.specs import REQUIREMENTS

NAME = "attnspec-run-report"
LACKS = re.compile(r"lacks: ([a-z0-9_, ]+)$")
# The notes Hypothesis adds to the error of a failing property that give the case it failed on:
# "Falsifying example: test_x(...)" ("Failing test case:" / "Failing explicit example:" in recent
# versions) and one "Draw N (label): value" line per value drawn inside the test.
EXAMPLE_NOTES = ("Falsifying", "Failing", "Draw ")
# A property that needs a second device the target cannot use here (skips.second_device) says so.
NO_SECOND_DEVICE = "no second real device is here"
OUTPUT_KEPT = 64 * 1024  # characters of a test's captured output (each stream) kept in its report
# What only a module's properties read: an attention target without a module is not told it lacks them.
MODULE_ONLY = ("module", "chunks", "no_positions", "padding", "hidden_states")
# What a module target's properties read (test_modules.py, and test_attention_layer.py for its layer):
# the capability table of a module lists these alone.
MODULE_CAPABILITIES = (
    *MODULE_ONLY,
    "float64",
    "float16",
    "layer",
    "window",
    "sinks",
    "gqa",
    "offset",
    "cache",
)
WHITE_BOX = (
    "a black box cannot see a wrong scale, or a head split that mixes every head alike: give the "
    "module a layer(spec), its white box (`attnspec conventions`: 'Layers, and the white box of a module')"
)


def lacks(target: Target, *capabilities: str) -> str:
    """The skip reason of a test that needs ``capabilities`` the target does not declare."""
    return f"--impl {target.name} lacks: {', '.join(capabilities)}"


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def requirements(report: pytest.TestReport) -> list[str]:
    """The requirement ids of the test (conftest.py records them as the user property
    "requirements", which --junitxml also writes)."""
    return [rid for key, ids in report.user_properties if key == "requirements" for rid in ids.split(",")]


def _one_line(text: str) -> str:
    """Hypothesis's pretty-printed call on one line (only the line breaks and the indentation after
    them go: a repr holds no line break)."""
    text = re.sub(r"\(\n\s*", "(", text)
    text = re.sub(r",?\n\s*\)", ")", text)
    return re.sub(r"\n\s*", " ", text)


def bounded(output: str, limit: int = OUTPUT_KEPT) -> str:
    """A test's captured output, its last ``limit`` characters where it has more, saying how much
    was dropped: a target that prints megabytes a call costs the check what reading them costs, and
    its report stays readable."""
    if len(output) <= limit:
        return output
    dropped = len(output) - limit
    return (
        f"[attnspec: {dropped:,} characters of earlier output dropped, the last {limit:,} kept]\n"
        + (output[-limit:])
    )


def error_in_brief(error: BaseException) -> tuple[str, tuple[str, ...]]:
    """The first line of ``error``'s message (its type first unless it is a failed assertion) and
    the minimal failing case Hypothesis noted on it, one line per note.  Of several distinct
    failures (an ExceptionGroup), the first, saying how many others there are."""
    others = 0
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        others += len(error.exceptions) - 1
        error = error.exceptions[0]
    lines = str(error).strip().splitlines()
    message = lines[0] if lines else ""
    if not isinstance(error, AssertionError | pytest.fail.Exception):
        message = f"{type(error).__name__}: {message}" if message else type(error).__name__
    if others:
        message += f" (and {others} other distinct failure{'s' if others > 1 else ''})"
    notes = getattr(error, "__notes__", None) or []
    return message, tuple(_one_line(note) for note in notes if str(note).startswith(EXAMPLE_NOTES))


def short_test_name(nodeid: str) -> str:
    """test_attention.py::test_x[...] for src/attnspec/kit/properties/test_attention.py::test_x[...]."""
    path, _, name = nodeid.partition("::")
    module = path.rsplit("/", 1)[-1]
    return f"{module}::{name}" if name else module


@dataclass(frozen=True)
class Failure:
    """A failed test in brief: what `attnspec check` prints for it."""

    test: str  # short_test_name
    when: str  # "call", or "setup" / "teardown" for an error in a fixture
    requirements: tuple[str, ...]
    message: str  # error_in_brief
    example: tuple[str, ...]  # Hypothesis's minimal failing case, one line each; () if none
    # the script that replays its failing call (conftest.py, reproducers.py), the call in words, its
    # wrong rows and its size (elements of q and k); None where no single call shows the failure
    reproducer: tuple[str, str, str, int] | None = None
    full: str = ""  # pytest's whole report of it
    refused: str = ""  # an error the target raised on an input, and what to declare (reproducers.refusal)
    state: str = ""  # the global state the target changed (global_state.py)
    # what the target did to the process it ran in: crashed or ended it, hung, exhausted its memory
    # (src/attnspec/runner/parallel.py, conftest.py), and on which call
    process: str = ""
    # what its smallest failing call behaves as if it had done (diagnosis.case_finding), or ""
    cause: str = ""

    def set_aside(self) -> bool:
        """Whether it is said in a line of its own, not as a broken requirement."""
        return bool(self.refused or self.state or self.process)

    def lines(self) -> list[str]:
        where = "" if self.when == "call" else f" (error in {self.when})"
        ids = ", ".join(self.requirements) or "(no requirement)"
        return [f"  {ids}  {self.test}{where}: {self.message}", *(f"      {line}" for line in self.example)]

    def block(
        self, requirement: str, statement: str, rerun: str, width: int | None, said: str = ""
    ) -> list[str]:
        """The failure as the block of one broken requirement: its statement, what failed, on which
        case, and how to run it again: the reproducer, or the property alone.  A message that the
        diagnosis above (``said``) already gives is not repeated."""
        where = "" if self.when == "call" else f" (error in {self.when})"
        message = (
            "as the diagnosis above says" if said and self.message in said else _cut(self.message, width)
        )
        lines = [f"{requirement}  {statement}", f"  failed  {self.test}{where}: {message}"]
        if self.cause and not (said and self.cause in said):
            lines.append(f"  cause   {_cut(self.cause, width)}")
        if self.reproducer is not None:
            script, case, rows, _ = self.reproducer
            lines += [f"  case    {case}: {rows}", f"  rerun   python {script}"]
        else:
            case = "; ".join(_plain(line) for line in self.example)
            if case:
                lines.append(f"  case    {case}")
            lines.append(f"  rerun   {rerun} -k '{self.test.split('::', 1)[-1].split('[', 1)[0]}'")
        return lines


def _cut(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[: width - 3].rstrip() + "..."


def _plain(line: str) -> str:
    """Hypothesis's note of a case without its heading, its comments ("# or any other generated
    value", ...) and the device (the run's own)."""
    line = re.sub(r"^(Falsifying example|Failing test case|Failing explicit example): ", "", line)
    line = re.sub(r"\s*# The test (always|sometimes) failed[^.]*\.", "", line)
    line = re.sub(r"\(\s+", "(", re.sub(r",?\s*# or any other generated value", "", line))
    return re.sub(r"device=device\(type='\w+'(, index=\d+)?\),? ?", "", line)


def _process_in_brief(process: str) -> str:
    """What the target did to its process, for the verdict: "crashes the process", "hangs"..."""
    for start, verb in (
        ("the target crashed", "crashes the process"),
        ("the target ended", "ends the process"),
        ("the target hung", "hangs"),
        ("the target exhausted", "exhausts memory"),
    ):
        if process.startswith(start):
            return verb
    words = process.split()
    if process.startswith("the target raised "):  # breaches.py
        return "raises " + words[3].partition("(")[0]
    if process.startswith("the target returned "):
        return "returns " + " ".join(words[3:5])
    return "breaks its process"


def _said_once(heading: str, said: list[tuple[str, str]]) -> list[str]:
    """One line for each group of failures with the same key, from their (key, text) pairs in order:
    ``heading``, how many properties the group has and its first text; then a blank line."""
    return [
        line
        for texts in _grouped(said).values()
        for line in (f"{heading} ({_properties(len(texts))}): {texts[0]}", "")
    ]


def _grouped(said: list[tuple[str, str]]) -> dict[str, list[str]]:
    """The texts of (key, text) pairs by key, in the order the keys first come."""
    groups: dict[str, list[str]] = {}
    for key, text in said:
        groups.setdefault(key, []).append(text)
    return groups


def _properties(count: int) -> str:
    return f"{count} propert{'y' if count == 1 else 'ies'}"


class RunReport:
    def __init__(self) -> None:
        self.passed = 0
        self.failed_tests = 0
        self.skipped = 0
        self.skipped_for: Counter[str] = Counter()  # capability -> tests skipped for its absence
        self.not_run = 0  # tests left when the check stopped for a target that hangs (runner/parallel.py)
        self.no_second_device = 0  # tests skipped for want of a device (skips.second_device)
        self.failures: list[Failure] = []  # in the order they failed
        self.order: dict[str, int] = {}  # node id -> its place in the collection
        self.places: list[int] = []  # of each failure, its test's place in the collection
        # seconds the target's first call took, a call once warm (the first again where it took more
        # than WARM_UP: compiling, building caches) and a call on new sizes (the warm call's where the
        # first took less; target_checks.first_calls), measured by conftest.py before the run
        self.first_call = 0.0
        self.call = 0.0
        self.new_sizes_call = 0.0

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.order = {item.nodeid: i for i, item in enumerate(session.items)}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """A failure's error in brief goes with its report (the strings, not the error, which would keep
        the failing test's tensors alive), also to another process: a worker of `attnspec check --jobs`
        or of pytest-xdist."""
        report = yield
        if report.failed and call.excinfo is not None:
            report.attnspec_error = error_in_brief(call.excinfo.value)
        report.sections = [(title, bounded(text)) for title, text in report.sections]
        return report

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A test module that cannot be collected (pytest then runs nothing) is a failure in brief too:
        the last line of its error is the exception."""
        if report.failed:
            lines = str(report.longrepr).strip().splitlines()
            message = lines[-1].removeprefix("E   ").strip() if lines else ""
            self.failures.append(Failure(short_test_name(report.nodeid), "collection", (), message, ()))
            self.places.append(-1)  # before every test

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        error = getattr(report, "attnspec_error", None)  # a list of [message, lines] once serialized
        if report.skipped:
            self.skipped += 1
            found = LACKS.search(skip_reason(report))
            if found:
                self.skipped_for.update(name.strip() for name in found.group(1).split(","))
            elif NO_SECOND_DEVICE in skip_reason(report):
                self.no_second_device += 1
        elif report.failed:
            self.failed_tests += 1
            message, example = error or (report.longreprtext.strip().rsplit("\n", 1)[-1], ())
            ids, example = tuple(requirements(report)), tuple(example)
            reproducer = getattr(report, "attnspec_reproducer", None)
            failure = Failure(
                short_test_name(report.nodeid),
                report.when,
                ids,
                message,
                example,
                tuple(reproducer) if reproducer else None,
                report.longreprtext,
                getattr(report, "attnspec_refused", ""),
                getattr(report, "attnspec_state", ""),
                getattr(report, "attnspec_process", ""),
                getattr(report, "attnspec_cause", ""),
            )
            self.failures.append(failure)
            self.places.append(self.order.get(report.nodeid, len(self.order)))
        elif report.when == "call":
            self.passed += 1

    def failure_lines(self) -> list[str]:
        """Each failed test on one line (its requirements, its name, the first line of its error),
        then the case Hypothesis found it failing on; in the order of the collection (the order they
        failed in depends on the processes of `attnspec check --jobs`)."""
        in_order = sorted(range(len(self.failures)), key=self.places.__getitem__)  # a stable sort
        return [line for i in in_order for line in self.failures[i].lines()]

    def blocks(
        self, rerun: str, limit: int | None, width: int | None, said: str = "", first: tuple[str, ...] = ()
    ) -> list[str]:
        """One block per broken requirement, at most ``limit`` of them (then one line naming the rest):
        those in ``first`` (the requirements that show the diagnosed cause most directly) first, the rest
        in the specification's order; each shows the failure that says the most: one with a
        reproducer, the smallest, else the first in the collection's order; a failure of several
        requirements stands for each, where no other failure does."""
        in_order = [f for f in self._in_order() if not f.set_aside()]
        broken = {rid for failure in in_order for rid in failure.requirements}
        ordered = [rid for rid in REQUIREMENTS if rid in broken] + sorted(broken - set(REQUIREMENTS))
        ahead = [rid for rid in dict.fromkeys(first) if rid in broken]
        ordered = ahead + [rid for rid in ordered if rid not in ahead]
        lines = self.process_lines() + self.state_lines() + self.refusal_lines()
        used: set[int] = set()
        shown = ordered if limit is None else ordered[:limit]
        for rid in shown:
            candidates = [f for f in in_order if rid in f.requirements]
            # a reproducer first, the smallest; one not shown yet before one that is
            candidates.sort(
                key=lambda f: (f.reproducer is None, id(f) in used, f.reproducer[3] if f.reproducer else 0)
            )
            chosen = candidates[0]
            used.add(id(chosen))
            statement = REQUIREMENTS[rid].statement if rid in REQUIREMENTS else ""
            lines += [*chosen.block(rid, statement, rerun, width, said), ""]
        unowned = [f for f in in_order if not f.requirements]  # a module that cannot be collected
        for failure in unowned:
            lines += [*failure.block("(no requirement)", "", rerun, width), ""]
        if len(shown) < len(ordered):
            rest = ", ".join(ordered[len(shown) :])
            lines.append(f"also broken: {rest} (-v prints a block for each)")
        return lines

    def _in_order(self) -> list[Failure]:
        return [self.failures[i] for i in sorted(range(len(self.failures)), key=self.places.__getitem__)]

    def refused(self) -> list[Failure]:
        return [failure for failure in self._in_order() if failure.refused]

    def changed_state(self) -> list[Failure]:
        return [failure for failure in self._in_order() if failure.state]

    def broke_the_process(self) -> list[Failure]:
        return [failure for failure in self._in_order() if failure.process]

    def broken(self) -> list[str]:
        """The requirements a failure that is no refusal nor a change of global state breaks."""
        return sorted(
            {
                rid
                for f in self.failures
                if not f.set_aside()
                for rid in f.requirements or ["(no requirement)"]
            }
        )

    def failed(self) -> bool:
        """Whether the target is broken: a requirement, torch's global state left changed, or the
        process it ran in crashed, hung or ran out of memory."""
        return bool(self.broken() or self.changed_state() or self.broke_the_process())

    def process_lines(self) -> list[str]:
        """What the target did to the process it ran in, one line for each way (the message before
        its call, " on ..."), with its first call."""
        groups = _grouped([f.process.partition(" on ")[::2] for f in self.broke_the_process()])
        lines = []
        for what, cases in groups.items():
            first = f", first on {cases[0]}" if cases[0] else ""
            lines += [f"{what} ({_properties(len(cases))}){first}", ""]
        return lines

    def state_lines(self) -> list[str]:
        """The global state the target changed, one line for each change, however many properties
        saw it."""
        return _said_once("changed torch's global state", [(f.state, f.state) for f in self.changed_state()])

    def refusal_lines(self) -> list[str]:
        """The target's refusals, one line for each thing to declare (the end of a refusal, after its
        last "; "), with its first case: not one line per property."""
        return _said_once("refused", [(f.refused.rpartition("; ")[2], f.refused) for f in self.refused()])

    def write_full(self, path: Path, diagnosis: str = "") -> None:
        """The run's diagnosis, then every failure with pytest's whole report of it, in the collection's
        order."""
        in_order = self._in_order()
        parts = [f"diagnosis: {diagnosis}"] if diagnosis else []
        parts += [
            f"{'=' * 20} {', '.join(f.requirements) or '(no requirement)'}  {f.test}\n{f.full}"
            for f in in_order
        ]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")

    def skipped_line(self, target: Target) -> str:
        """The capability table in one line."""
        declared = ", ".join(sorted(target.capabilities)) or "none"
        if not self.skipped:
            return f"capabilities of --impl {target.name}: {declared}"
        why = f"; {len(self.skipped_for)} capabilities it does not declare" if self.skipped_for else ""
        return (
            f"capabilities of --impl {target.name}: {declared} ({self.skipped} properties skipped{why}: "
            "-v prints the table)"
        )

    def capability_lines(self, target: Target) -> list[str]:
        """One line per capability (a module's only: MODULE_CAPABILITIES; an attention target's without
        the module-only ones unless it has a module too, as impl does) saying whether the target declares
        it and how many tests its absence skipped; then what else kept tests from running."""
        module = target.attention is None  # a module target, not a target that also has one (impl)
        names = MODULE_CAPABILITIES if module else tuple(CAPABILITIES)
        if not module and not target.supports("module"):
            names = tuple(name for name in names if name not in MODULE_ONLY)
        lines = []
        for name in names:
            mark = "yes" if name in target.capabilities else "no "
            skipped = f"  (skipped {self.skipped_for[name]})" if name in self.skipped_for else ""
            lines.append(f"  {mark}  {name:<13} {CAPABILITIES[name]}{skipped}")
        if module and not target.supports("layer"):
            lines.append(f"  --   {'white box':<13} {WHITE_BOX}")
        if self.no_second_device:
            lines.append(
                f"  --   {'device':<13} cannot run on the meta device, and no CUDA GPU is here "
                f"(skipped {self.no_second_device})"
            )
        return lines

    def verdict(self, target: Target, coverage: str = "") -> str:
        """FAIL when a property fails other than by a refusal (a requirement broken, or torch's global
        state left changed); NOT CHECKED when the target refused
        inputs it does not declare it cannot take, and failed nothing else; PASS otherwise.  ``coverage``
        says how many examples a property drew where the check was fitted to a time (`attnspec check`)."""
        under = f", under its declaration: {declaration(target)}" if declaration(target) else ""
        under += f", {ran}" if (ran := interpreted.note(target.supports("float16"))) else ""
        refused = len(self.refused())
        counts = f"{self.failed_tests - refused} failed, {self.passed} passed, {self.skipped} skipped"
        counts += f", {refused} refused" if refused else ""
        counts += f", {self.not_run} not run" if self.not_run else ""
        counts += f", {coverage}" if coverage else ""
        if self.failed():
            what = [_process_in_brief(f.process) for f in self.broke_the_process()]
            what = list(dict.fromkeys(what))
            what += ["changes torch's global state"] if self.changed_state() else []
            what += [f"breaks {', '.join(self.broken())}"] if self.broken() else []
            return f"FAIL: --impl {target.name} {' and '.join(what)} ({counts}{under})"
        if refused:
            return (
                f"NOT CHECKED: --impl {target.name} refused inputs it does not declare it cannot take: "
                f"declare what it takes, as the refused line above says ({counts}{under})"
            )
        if not self.passed:
            return f"NOT CHECKED: no property ran against --impl {target.name} ({self.skipped} skipped)"
        fitted = f", {coverage}" if coverage else ""
        return (
            f"PASS: --impl {target.name} passed every property it can run "
            f"({self.passed} passed, {self.skipped} skipped{fitted}{under})"
        )
