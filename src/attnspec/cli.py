"""`attnspec check TARGET`: run the kit's properties against your attention code.

TARGET is ``package.module:object`` (importable from the current directory) or a built-in adapter
name.  The run is pytest over the kit's properties (attnspec.kit.properties; the tool's own tests,
impl's included, stay in its repository).  It prints each failed property on one line (its
requirement ids, its test, the first line of its message) with the smallest case Hypothesis found
it failing on, instead of pytest's tracebacks (`--tb long` adds those), then the target's
capability table and a one-line verdict.

The properties run in worker processes: a target that crashes, hangs (one call over --timeout) or
exhausts memory (--max-memory) fails the property it did it in, and the check goes on to its verdict.

Exit codes: 0 every property the target can run passed; 1 a property failed (a crash, a hang or a
runaway allocation included); 2 the target could not be checked (it cannot be imported or called as
the protocol says, nothing ran, bad arguments, the run was interrupted).

`attnspec specs [-v]` prints the requirements and the tests that check them; `attnspec conventions`
prints CONVENTIONS.md, the conventions and the target protocol the properties hold a target to;
`attnspec mutate SOURCE... -- TEST COMMAND` grades your own tests with the fault catalogue
(src/attnspec/mutation/cli.py).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from attnspec.kit import loading
from attnspec.mutation.cli import split_command
from attnspec.mutation.watch import interrupted
from attnspec.runner import children, folders, outputs
from attnspec.runner.arguments import memory_gib, positive_float, positive_int, timeout_seconds
from attnspec.runner.outputs import FAILURES  # noqa: F401 (where the failures go, for the docs' tests)
from attnspec.runner.parallel import (
    HANGS,
    TIMEOUT,
    Died,
    Parallel,
    default_jobs,
    default_memory,
    too_little_memory,
    usable_cores,
)
from attnspec.runner.progress import (
    DEFAULT_BUDGET,
    SLOW_CALL,
    Progress,
    default_examples,
    duration,
    estimate,
    examples_within,
    parallelism,
    shrinking_within,
)
from attnspec.runner.pytest_plugin import (
    DATABASE_ENV,
    FAILURES_ENV,
    HYPOTHESIS_HOME_PREFIX,
    PROFILES,
    PROFILES_HELP,
)

PLUGIN = "attnspec-check"
PASSED, FAILED, NOT_CHECKED = 0, 1, 2
TRACEBACKS = ("no", "line", "short", "long", "native")  # pytest's --tb styles
REPORT = "report.txt"  # every failure with pytest's whole report
DEFAULT_BUDGET_ENV = "ATTNSPEC_DEFAULT_BUDGET"  # seconds, in place of DEFAULT_BUDGET
BLOCKS = 3  # broken requirements shown as blocks without -v
WIDTH = 260  # characters of a failure's message shown without -v


class _Check:
    """Keeps the run's config, to read the run report once pytest is done; once the properties are
    collected, fits their examples to --budget or, for a slow target in a check without --budget or
    --profile, to about DEFAULT_BUDGET seconds, or says what a slow target will cost."""

    __name__ = PLUGIN  # the name pytest registers it under (conftest.py leaves the table to it)
    config: pytest.Config | None = None

    def __init__(
        self,
        budget: float | None = None,
        jobs: int = 1,
        fit: bool = False,
        default_budget: float = DEFAULT_BUDGET,
        others: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.budget = budget
        self.jobs = jobs
        self.others = others  # runnable processes of other work on the machine, as the properties start
        self.fit = fit  # neither --budget nor --profile given: a slow target's check fits default_budget
        self.default_budget = default_budget
        self.started = time.monotonic()
        self.coverage = ""  # for the verdict, where the examples were fitted to a time
        self.shrinking: float | None = None  # Hypothesis's limit on shrinking a failure, where it was set

    @pytest.hookimpl
    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from hypothesis import settings

        from attnspec.kit.run_report import NAME

        timed = session.config.pluginmanager.get_plugin(NAME)
        call, new_sizes = timed.call, timed.new_sizes_call  # warm, and on sizes new to the process
        drawn = [item for item in session.items if _draws(item)]
        most = settings.default.max_examples
        processes, cores = min(self.jobs, len(drawn)) or 1, usable_cores()
        jobs = parallelism(processes, cores)
        # so far, and the warm-up each process of the check pays on its first call (at the same time)
        spent = time.monotonic() - self.started + max(0.0, timed.first_call - timed.call)
        default = settings.get_profile("default").max_examples
        widest = max(most, default)
        if self.budget is not None or self._over(spent, len(drawn), widest, call, jobs, new_sizes):
            jobs = parallelism(processes, cores, self.others())  # what other work leaves, where it matters
        about = spent + estimate(len(drawn), most, call, jobs, new_sizes)
        said = ""
        if self.budget is not None and drawn:
            examples = examples_within(self.budget, spent, len(drawn), call, jobs, most, new_sizes)
            self._fitted(drawn, examples, most, self.budget, f"--budget {self.budget:g}")
            weaker = "" if examples >= most else f": a weaker check, {examples / most:.0%} of the drawn cases"
            a = "example" if examples == 1 else "examples"
            said = f"--budget {self.budget:g} s: {examples} {a} a property instead of {most}{weaker}"
        elif self.fit and drawn and about > self.default_budget:
            examples = default_examples(self.default_budget, spent, len(drawn), call, jobs, most, new_sizes)
            self._fitted(drawn, examples, most, self.default_budget, "a slow target")
            fewest = spent + estimate(len(drawn), examples, call, jobs, new_sizes)
            over = fewest > self.default_budget
            even_so = f", the fewest it runs: about {duration(fewest)}" if over else ""
            said = (
                f"a slow target ({_timings(timed)}): {examples} examples a property instead of {most} to fit "
                f"about {duration(self.default_budget)}{even_so}; --budget SECONDS or --profile default/ci "
                "for more"
            )
        elif call > SLOW_CALL or self._over(spent, len(drawn), default, call, jobs, new_sizes):
            said = (
                f"the target takes {_timings(timed)}: {len(drawn)} properties at {most} "
                f"examples each take about {duration(about - spent)} here; --profile quick (5 examples) or "
                "--budget SECONDS fits the check to a time"
            )
        if said:
            session.config.pluginmanager.get_plugin("terminalreporter").write_line(said)

    def _over(
        self, spent: float, properties: int, examples: int, call: float, jobs: float, new_sizes: float
    ) -> bool:
        """Whether ``examples`` a property would take the check past the default budget."""
        return spent + estimate(properties, examples, call, jobs, new_sizes) > self.default_budget

    def _fitted(self, drawn: list[pytest.Item], examples: int, most: int, budget: float, why: str) -> None:
        """``examples`` a property for the properties that draw, where that is fewer than their own (the
        verdict then says so, and ``why``); and Hypothesis's shrinking of a failure bounded to a
        property's share of ``budget``."""
        from hypothesis import settings
        from hypothesis.internal.conjecture import engine

        fewer = False
        for function in {item.function for item in drawn}:  # what Hypothesis reads when it runs
            own = function._hypothesis_internal_use_settings
            fewer |= examples < own.max_examples
            function._hypothesis_internal_use_settings = settings(
                own, max_examples=min(examples, own.max_examples)
            )
        if fewer:
            self.coverage = f"{examples} of {most} examples a property ({why})"
        # Hypothesis's own limit (5 minutes), made to be set (engine.py); the workers are forked after this
        if hasattr(engine, "MAX_SHRINKING_SECONDS"):
            self.shrinking = engine.MAX_SHRINKING_SECONDS
            shrinking = shrinking_within(budget, len(drawn), self.jobs)
            engine.MAX_SHRINKING_SECONDS = min(self.shrinking, shrinking)

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.shrinking is not None:  # Hypothesis's limit as it was, for whatever else the process runs
            from hypothesis.internal.conjecture import engine

            engine.MAX_SHRINKING_SECONDS = self.shrinking

    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The first Ctrl-C (or SIGTERM) stops the run: the workers at once (parallel.py checks
        session.shouldstop as it waits for them), the check's own process between tests where the
        properties run in it; the second stops it at once.  A KeyboardInterrupt raised in the middle
        of a test can be lost (inside a garbage collector's callback, which Hypothesis keeps, Python
        prints it as ignored and goes on, and the test may fail for it), and pytest's report of it can
        crash on a frame without a line number."""

        def interrupted(signum: int, frame: object) -> None:
            if session.shouldstop:
                raise KeyboardInterrupt
            # no message: the test's output is captured now
            session.shouldstop = "interrupted (Ctrl-C)" if signum == signal.SIGINT else f"signal {signum}"

        # SIGTERM likewise (a CI job cancelled, `timeout`): the workers stop, the temporary folder goes
        for signum, default in (
            (signal.SIGINT, signal.default_int_handler),
            (signal.SIGTERM, signal.SIG_DFL),
        ):
            if signal.getsignal(signum) is default:  # not ignored (a background job), nor someone else's
                signal.signal(signum, interrupted)


def _timings(timed: object) -> str:
    """What a call of the target takes, from the probe's timings (run_report.RunReport): warm and on new
    sizes where these differ (a target that compiles per shape), and the first where it took longer."""
    warm, new_sizes, first = timed.call, timed.new_sizes_call, timed.first_call  # type: ignore[attr-defined]
    said = f"{warm:.2f} s a call"
    if new_sizes > max(1.5 * warm, warm + 0.05):
        said = f"{warm:.2f} s a call warm, {new_sizes:.2f} s on new sizes"
    return said + (f", {first:.2f} s the first" if first > max(1.5 * warm, new_sizes) else "")


def _draws(item: pytest.Item) -> bool:
    """Whether a property will draw examples: not one skipped for a capability the target lacks, nor
    a parametrisation in a dtype it does not declare (skips.require_dtype)."""
    import torch

    from attnspec.kit.skips import missing_for

    if not getattr(getattr(item, "function", None), "is_hypothesis_test", False):
        return False
    if item.get_closest_marker("skip"):
        return False
    params = getattr(item, "callspec", None)
    values = params.params.values() if params else ()
    return not any(missing_for(value) for value in values if isinstance(value, torch.dtype))


def pytest_arguments(args: argparse.Namespace, properties: Path, junit: Path | None = None) -> list[str]:
    command = [
        str(properties),
        f"--impl={args.target}",
        f"--device={args.device}",
        # the kit's own settings, not those of a pytest.ini or pyproject.toml around the user's code
        "-c",
        os.devnull,
        f"--rootdir={properties.parent}",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:benchmark",  # pytest-benchmark, where installed, would make a .benchmarks/ folder
        "--strict-markers",
        "--no-header",
        # tracebacks in the reports, for attnspec-failures/report.txt; printed only when asked for
        f"--tb={'long' if args.tb == 'no' else args.tb}",
        *(["--no-summary"] if args.tb == "no" else []),
        "-rN",  # no "short test summary": the failures in brief (failure_lines) say more
        "-q",
    ]
    if args.k:
        command += ["-k", args.k]
    if junit is not None:
        command.append(f"--junitxml={junit}")
    if args.seed is not None:
        command.append(f"--hypothesis-seed={args.seed}")
    if args.exitfirst:
        command.append("-x")
    if args.watch:  # Hypothesis and pytest's plugins were imported before the check: nothing to rewrite
        command += ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    return command + args.verbose * ["-v"] * 2


def check(args: argparse.Namespace) -> int:
    # the user's modules, from where the command runs (as `python -m pytest` would find them)
    sys.path.insert(0, os.getcwd())
    # the profile asked for (--profile, else $HYPOTHESIS_PROFILE) runs whole; without one, the default's
    # examples, fewer for a slow target (_Check)
    asked = args.profile or os.environ.get("HYPOTHESIS_PROFILE")
    os.environ["HYPOTHESIS_PROFILE"] = asked or "default"
    try:  # every path it writes, checked before anything runs
        junit = outputs.output_file("--junitxml", args.junitxml) if args.junitxml is not None else None
        database = outputs.database_folder("--db", args.db) if args.db is not None else None
    except outputs.OutputError as error:
        print(f"NOT CHECKED: {error}")
        return NOT_CHECKED
    os.environ[DATABASE_ENV] = str(database or "")  # no .hypothesis/ in the user's folder unless asked for
    import attnspec.kit.properties as properties

    # The objects of the imports (torch, pytest, Hypothesis): out of the collector's reach, and its
    # youngest generation collected about 30 times less often, for a run that makes many small objects
    # and few cycles (1.5 s of a default check went to collections, 0.9 s with this, on 2 cores).
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
    jobs = min(args.jobs, 2 * usable_cores())  # more processes than that only share the same cores
    plugin = _Check(args.budget, jobs, fit=asked is None, default_budget=default_budget(), others=other_work)
    memory = default_memory(jobs) if args.max_memory is None else args.max_memory or None
    if (cramped := too_little_memory(memory)) is not None:
        print(f"NOT CHECKED: {cramped}")
        return NOT_CHECKED
    isolation = Parallel(jobs, args.timeout, memory)
    plugins: list[object] = [plugin, Progress(verbose=bool(args.verbose)), isolation]
    children.adopt_orphans()  # a process the target starts and leaves running is this one's to end
    try:
        with (
            outputs.failures_folder(Path.cwd()) as (failures, elsewhere),
            folders.locked_temporary(HYPOTHESIS_HOME_PREFIX) as home,
        ):
            os.environ[FAILURES_ENV] = str(failures)  # where a failing property leaves its reproducer
            # Hypothesis's own files (its cache of the constants in the code it tests, a database unless
            # --db names one) go there, not into the folder the check runs in
            os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(home)  # read when Hypothesis is imported
            if "hypothesis.configuration" in sys.modules:  # already imported (a served run of the tests)
                sys.modules["hypothesis.configuration"].set_hypothesis_home_dir(str(home))
            made = home / "junit.xml"  # written at the end of the run, then copied (outputs.delivered)
            arguments = pytest_arguments(args, Path(properties.__file__).parent, made if junit else None)
            code = pytest.main(arguments, plugins=plugins)
            left = children.ended()
            if junit is not None and made.exists() and (undelivered := outputs.delivered(made, junit)):
                print(undelivered)
            return _verdict(args, plugin, isolation, code, failures, elsewhere, left)
    except outputs.OutputError as error:
        print(f"NOT CHECKED: {error}")
        return NOT_CHECKED
    finally:
        children.ended(grace_s=0.0)  # an interrupted run's too


def _verdict(
    args: argparse.Namespace,
    plugin: _Check,
    isolation: Parallel,
    code: int,
    failures: Path,
    elsewhere: str,
    left: list[str],
) -> int:
    """What the run found, printed: the failures in brief with the diagnosis, the capability table,
    the processes the target left running, and the verdict; its exit code."""
    if plugin.config is None or code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
        print(f"NOT CHECKED: {args.target} could not be checked (see above)")
        return NOT_CHECKED
    from attnspec.kit.run_report import NAME

    target = loading.current()
    report = plugin.config.pluginmanager.get_plugin(NAME)
    if report.failures:
        print()
        diagnosis = None
        # (interrupted: no verdict to explain, and the diagnosis calls the target again)
        if target.name != "impl" and code != pytest.ExitCode.INTERRUPTED:
            from attnspec.kit.diagnosis import target_diagnosis

            try:  # it calls the target: in a fork, as the properties did
                diagnosis = isolation.in_a_fork(lambda: target_diagnosis(target, args.device))
            except (Died, RuntimeError):
                diagnosis = None
            left += children.ended()
        if diagnosis:
            print(f"diagnosis: {diagnosis}\n")
        rerun = f"attnspec check {args.target}"
        limit, width = (None, None) if args.verbose else (BLOCKS, WIDTH)
        first = requirements_of_faults(diagnosis or "")
        print("\n".join(report.blocks(rerun, limit, width, diagnosis or "", first)))
        written, why = outputs.written_or_elsewhere(
            failures / REPORT, lambda path: report.write_full(path, diagnosis or "")
        )
        why = "; ".join(filter(None, [elsewhere, why]))
        print(f"every failure in full: {_shown(written)}" + (f" ({why})" if why else ""))
    if args.verbose:
        print(f"\ncapabilities of --impl {target.name} ({', '.join(sorted(target.capabilities)) or 'none'}):")
        print("\n".join(report.capability_lines(target)))
    else:
        print(f"\n{report.skipped_line(target)}")
    if left:
        print(children.said(left))
    if code == pytest.ExitCode.INTERRUPTED:  # Ctrl-C: what ran is no verdict on the target
        so_far = f"{report.failed_tests} failed, {report.passed} passed, {report.skipped} skipped"
        print(f"NOT CHECKED: the run was interrupted ({so_far} before it stopped)")
        return NOT_CHECKED
    from attnspec.kit.declared_mods import declared_mod_note

    if (note := declared_mod_note(target)) is not None:  # a declaration of its own code, trusted
        print(note)
    print(report.verdict(target, plugin.coverage))
    if code == pytest.ExitCode.TESTS_FAILED:
        return FAILED if report.failed() else NOT_CHECKED  # refusals alone: not checked where refused
    if code == pytest.ExitCode.OK and report.passed:
        return PASSED
    return NOT_CHECKED  # interrupted, or nothing ran (-k matched nothing, everything skipped)


def requirements_of_faults(diagnosis: str) -> tuple[str, ...]:
    """The requirements expected to catch the catalogue faults a diagnosis names (F22 -> ATTN-14,
    ATTN-4), in the order it names them: the broken requirements that show the cause most directly."""
    named = re.findall(r"\bF\d+\b", diagnosis)
    if not named:
        return ()
    from attnspec.mutation.faults import FAULTS

    kills = {fault.id: fault.kills for fault in FAULTS}
    return tuple(rid for fault in named for rid in kills.get(fault, ()))


def default_budget() -> float:
    """Seconds a slow target's check without --budget or --profile fits itself to: $ATTNSPEC_DEFAULT_BUDGET
    where it is a positive number, else DEFAULT_BUDGET."""
    try:
        seconds = float(os.environ.get(DEFAULT_BUDGET_ENV, ""))
    except ValueError:
        return DEFAULT_BUDGET
    return seconds if 0 < seconds < float("inf") else DEFAULT_BUDGET


def other_work() -> float:
    """Runnable processes of other work on this machine: the mean of a few looks at those runnable now
    (Linux's /proc/loadavg, the check's own process left out), at most the 1-minute load average, which
    still counts the processes of a check run just before; 0 where the platform says neither."""
    try:
        average = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0
    looks = []
    try:
        for _ in range(5):
            with open("/proc/loadavg") as loadavg:
                looks.append(int(loadavg.read().split()[3].partition("/")[0]) - 1)
            time.sleep(0.02)
    except (OSError, ValueError, IndexError):
        return average
    return max(0.0, min(average, sum(looks) / len(looks)))


def check_command(args: argparse.Namespace) -> int:
    if args.watch:
        from attnspec.runner.watching import watch

        return watch(args, check)
    return check(args)


def _shown(path: Path) -> str:
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def specs(args: argparse.Namespace) -> int:
    from attnspec.specs.__main__ import catalogue

    return catalogue(args)


def conventions(args: argparse.Namespace) -> int:
    import attnspec

    print(attnspec.conventions(), end="")
    return 0


def parser() -> argparse.ArgumentParser:
    from attnspec.mutation.cli import add_parser as add_mutate_parser
    from attnspec.specs.__main__ import __doc__ as specs_doc
    from attnspec.specs.__main__ import add_arguments

    main = argparse.ArgumentParser(
        prog="attnspec",
        description="attnspec: the kit's properties against your attention code (`attnspec COMMAND -h`: "
        "a command's options)",
    )
    commands = main.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "check",
        help="run the properties against an attention target",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("target", help="package.module:object, or a built-in adapter (impl, torch, ...)")
    run.add_argument(
        "--profile",
        choices=PROFILES,
        help=f"{PROFILES_HELP} (quick: for editors and pre-commit hooks; default: $HYPOTHESIS_PROFILE, "
        f"else default, with fewer examples for a slow target, to fit about {DEFAULT_BUDGET:g} s)",
    )
    run.add_argument(
        "--device",
        default=os.environ.get("ATTNSPEC_DEVICE", "cpu"),
        help="torch device (default: $ATTNSPEC_DEVICE or cpu)",
    )
    run.add_argument("-k", metavar="EXPRESSION", help="only the properties matching pytest's -k EXPRESSION")
    run.add_argument("--junitxml", metavar="PATH", help="also write a JUnit XML report to PATH")
    run.add_argument(
        "--db",
        metavar="PATH",
        help="keep the failing examples Hypothesis finds in PATH, and replay them first next time "
        "(default: none kept, nothing written where the check runs)",
    )
    run.add_argument(
        "--budget",
        type=positive_float,
        metavar="SECONDS",
        help="fit the check to about SECONDS: fewer examples a property, measured from the target's "
        "first call (the explicit examples always run); it says how much weaker the check is",
    )
    run.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="draw the examples from seed N: the same cases every run, to reproduce a verdict (default: "
        "fresh draws every run)",
    )
    run.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failure")
    run.add_argument(
        "-j",
        "--jobs",
        type=positive_int,
        default=default_jobs(),
        help="processes the properties run in, forked once they are collected (default: one per "
        f"usable core, at most 4: {default_jobs()} here; at most twice the cores); the check's own process "
        "only coordinates them",
    )
    run.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=TIMEOUT,
        metavar="SECONDS",
        help=f"the longest one call of the target may run before it counts as hung (default {TIMEOUT:g}); "
        f"the check stops after {HANGS} hangs",
    )
    run.add_argument(
        "--max-memory",
        type=memory_gib,
        metavar="GIB",
        help="address space each process of the check may take, so that a runaway allocation fails at "
        f"once (default: three quarters of this machine's memory over the jobs, at least 4: "
        f"{default_memory(default_jobs()) or 'none on this platform'} here; 0 for no cap)",
    )
    run.add_argument("-v", "--verbose", action="count", default=0, help="one line per test")
    run.add_argument(
        "--tb",
        choices=TRACEBACKS,
        default="no",
        help="pytest's tracebacks of the failures, before their summary: long for the full ones "
        "(default: no, only the summary)",
    )
    run.add_argument(
        "--watch",
        action="store_true",
        help="check again on every save of the target's files, from a warm process (Ctrl-C stops)",
    )
    run.set_defaults(run=check_command)
    catalogue = commands.add_parser(
        "specs",
        help="the requirements and the tests that check them",
        description=specs_doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(catalogue).set_defaults(run=specs)
    commands.add_parser(
        "conventions",
        help="print CONVENTIONS.md: the conventions and the target protocol",
        description="Print CONVENTIONS.md: the conventions the properties hold a target to, the target "
        "protocol and its capabilities, the neighbouring conventions the kit names, the tolerance policy.",
    ).set_defaults(run=conventions)
    mutate = add_mutate_parser(commands)
    mutate.set_defaults(parser=mutate)
    return main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if argv[:1] == ["mutate"]:  # the test command follows `--`, with options of its own
        argv, command = split_command(argv)
        # SIGTERM while the campaign is planned is an interrupt, as it is later (exit code 130); the
        # temporary folder is found first: finding it writes and removes a probe file, which an
        # interrupt in between would leave behind
        tempfile.gettempdir()
        signal.signal(signal.SIGTERM, interrupted)
    main_parser = parser()
    args, unknown = main_parser.parse_known_args(argv)
    if unknown:
        error = f"unrecognized arguments: {' '.join(unknown)}"
        if args.command == "mutate" and not command:  # the test command without its `--`
            sources = " ".join(source for source in args.sources if source.endswith(".py"))
            test = " ".join([*(word for word in args.sources if not word.endswith(".py")), *unknown])
            error += f" (the test command goes after `--`: attnspec mutate {sources} -- {test})"
            args.parser.error(error)
        main_parser.error(error)
    args.command_after_dashes = command
    try:
        return args.run(args)
    except KeyboardInterrupt:  # before the command's own handling of it began
        print("\ninterrupted: nothing was left behind", file=sys.stderr)
        return 130 if args.command == "mutate" else NOT_CHECKED
    except OSError as error:  # a path of the user's it cannot use (too long, not writable, ...)
        where = f": {str(error.filename)[:80]}" if error.filename else ""
        print(f"{'NOT RUN' if args.command == 'mutate' else 'NOT CHECKED'}: {error.strerror or error}{where}")
        return NOT_CHECKED


if __name__ == "__main__":
    sys.exit(main())
