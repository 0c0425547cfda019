"""`attnspec mutate SOURCE... -- TEST COMMAND`: how much are your tests worth against the
documented attention faults?

Every catalogue mutant of the SOURCE files (F1 a mask of 0, F2 a flipped triangle, F3 a missing
scale, ...: `attnspec mutate --list-faults`) is swapped into your code at run time, never written
to your files, and judged by your own TEST COMMAND: `pytest ...` runs in one warm process, each
mutant only against the tests that execute its lines; any other command (one that exits non-zero
when a test fails) runs once per mutant.  With `--kit --impl module:OBJ` the kit's properties are
the tests instead (a built-in adapter brings its own SOURCE files).

With `--impl module:OBJ` beside a test command (the object `attnspec check` takes; repeat --impl for
more targets), your command still judges every mutant; then the kit's properties run against the target
with each survivor swapped in, and the ones that kill it are written into --out as
test_attnspec_suggested_<module>.py, one test per fault, each calling `attnspec.check(TARGET,
PROPERTY...)`.  Copy that file among your tests (`cp attnspec-mutation/test_attnspec_suggested_*.py
tests/`) and the same campaign kills those faults; a bare pytest leaves the one in --out alone.

Per fault: killed (by which test), survived (with the diff), no site, not exercised (no test runs
the mutated lines; counted as surviving), not recognised (the code has the feature, and no mutant
was placed: not graded, and the summary's first line says so; --strict makes it fail the gate).
`# attnspec: site F<n>` at the end of a line mutates it with the fault's generic edits; one for a
fault that has none (the fault catalogue says which), or on a line none of them changes, stops the
campaign before it runs.  A survivor you know is equivalent is triaged in your source, on its line
or the comment line above it:

    scores = scores / math.sqrt(d)  # attnspec: equivalent F3 -- d is 1 in this module

Reports in --out (default attnspec-mutation/): mutation-report.json (Stryker schema), index.html,
junit.xml, annotations.txt (GitHub Actions; printed when GITHUB_ACTIONS is set), the summary.

Exit codes: 0 every fault with a site killed (or triaged); 1 a fault survived, or with --strict a
fault present in the code was not graded; 2 the campaign could not run or grade (the unmutated tests
fail, nothing to mutate, bad arguments, an annotation that cannot place its fault, no test runs a
line of a source); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from attnspec.runner.arguments import positive_float, positive_int
from attnspec.runner.parallel import usable_cores

from .engine import CLEAN_TIMEOUT_S

PASSED, FAILED, NOT_RUN, INTERRUPTED = 0, 1, 2, 130
PYTEST = {"pytest", "py.test"}


def add_parser(commands) -> argparse.ArgumentParser:
    mutate = commands.add_parser(
        "mutate",
        help="grade your tests (or the kit) with the catalogue's faults injected into your code",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="attnspec mutate [options] SOURCE... -- TEST COMMAND\n"
        "       attnspec mutate [options] --kit --impl module:OBJ [SOURCE...]",
    )
    mutate.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE",
        help="the Python files to mutate, or folders of them (their test modules left out)",
    )
    mutate.add_argument("--kit", action="store_true", help="the kit's properties are the tests (with --impl)")
    mutate.add_argument(
        "--impl",
        action="append",
        default=[],
        metavar="TARGET",
        help="the target the kit's properties run against (module:OBJ or an adapter): with --kit, the "
        "tests; beside a test command (repeatable), the target of the suggested tests "
        "(test_attnspec_suggested_<module>.py in --out)",
    )
    mutate.add_argument(
        "-k", dest="select", default="", help="with --kit: only the properties pytest -k selects"
    )
    mutate.add_argument("--since", metavar="REF", help="only the functions changed since the git REF")
    mutate.add_argument(
        "--incremental",
        action="store_true",
        help="reuse the previous results in --out where a function, its mutant and its tests are unchanged",
    )
    mutate.add_argument(
        "--out", default="attnspec-mutation", help="the reports' folder (default: %(default)s)"
    )
    mutate.add_argument(
        "-j",
        "--workers",
        type=positive_int,
        default=os.cpu_count() or 2,
        help="mutants run in parallel (default: cores; at most twice the cores, which more would only share)",
    )
    mutate.add_argument(
        "--timeout",
        type=positive_float,
        default=CLEAN_TIMEOUT_S,
        metavar="S",
        help="a test of the clean run (or the test command) still running after S seconds stops the "
        "campaign, named (default: %(default).0f)",
    )
    mutate.add_argument(
        "--triage", metavar="FILE", help="a TOML file of [[survivor]] entries (mutant, reason)"
    )
    mutate.add_argument(
        "--github-annotations", action="store_true", help="print GitHub Actions annotations for the survivors"
    )
    mutate.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a fault present in the code was not graded (not recognised: no mutant placed), "
        "even if every graded fault was killed",
    )
    mutate.add_argument("--list-faults", action="store_true", help="list the catalogue's faults and exit")
    mutate.add_argument("--keep-workspace", action="store_true", help=argparse.SUPPRESS)
    mutate.set_defaults(run=run)
    return mutate


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """The arguments of `mutate` and the test command after its first `--`."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1 :]


def pytest_arguments(command: list[str]) -> list[str] | None:
    """The arguments of a pytest command (`pytest ...`, `python -m pytest ...`), None for others."""
    if not command:
        return None
    if Path(command[0]).name in PYTEST:
        return command[1:]
    python = Path(command[0]).name.startswith("python")
    if python and len(command) >= 3 and command[1] == "-m" and command[2] in PYTEST:
        return command[3:]
    return None


def settings_from(args: argparse.Namespace, command: list[str], parser: argparse.ArgumentParser):
    from . import campaign
    from . import sources as named
    from .triage import from_file

    cwd = Path.cwd()
    if not args.out:
        parser.error("--out '': name the reports' folder (an empty one would be this folder)")
    if args.kit:
        if command:
            parser.error("--kit runs the kit's properties: give no test command")
        if len(args.impl) != 1:
            parser.error("--kit needs one --impl module:OBJ, the target the properties run against")
        impl = args.impl[0]
        if args.sources:
            sys.path.insert(0, str(cwd))
            sources = named.sources_named(args.sources, cwd)
        else:
            sources = named.adapter_sources(impl)
        suite, arguments, name = "kit", [], impl
    else:
        if args.select:
            parser.error("-k goes with --kit")
        if not command:
            parser.error("give the test command after --, e.g. attnspec mutate attention.py -- pytest tests")
        if not args.sources:
            parser.error("name the SOURCE files to mutate")
        sources = named.sources_named(args.sources, cwd)
        for target in args.impl:
            named.check_target_name(target, cwd)
        found = pytest_arguments(command)
        suite, arguments, name = (
            ("pytest", found, " ".join(command))
            if found is not None
            else (
                "command",
                command,
                " ".join(command),
            )
        )
    if args.triage and not Path(args.triage).exists():
        parser.error(f"--triage {args.triage}: no such file")
    if args.triage and not Path(args.triage).is_file():  # a FIFO would be waited on for ever
        parser.error(f"--triage {args.triage}: not a regular file")
    triage = from_file(Path(args.triage)) if args.triage else {}
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    return campaign.Settings(
        name=name,
        sources=sources,
        suite=suite,
        arguments=arguments,
        out_dir=(cwd / args.out).resolve(),
        impl=args.impl[0] if args.kit else "",
        suggest_targets=() if args.kit else tuple(args.impl),
        workers=min(args.workers, 2 * usable_cores()),
        select=args.select,
        triage=triage,
        since=args.since,
        incremental=args.incremental,
        keep=args.keep_workspace,
        cwd=cwd,
        github=args.github_annotations,
        clean_timeout_s=args.timeout,
        require_graded=args.strict,
    )


def run(args: argparse.Namespace) -> int:
    from . import campaign
    from .triage import TriageError

    if args.list_faults:
        from .faults import FAULTS

        for fault in FAULTS:
            print(f"{fault.id:<4} {fault.description}")
        return PASSED
    try:
        settings = settings_from(args, args.command_after_dashes, args.parser)
        return campaign.run(settings)
    except (campaign.CampaignError, TriageError) as error:
        print(f"\nNOT RUN: {error}", file=sys.stderr)
        return NOT_RUN
    except KeyboardInterrupt as interrupt:
        left = "nothing was left behind (the workspace is removed, no report written)"
        if isinstance(interrupt, campaign.Interrupted):  # as the reports were written: what they are
            left = str(interrupt)
        print(f"\ninterrupted: {left}", file=sys.stderr)
        return INTERRUPTED
