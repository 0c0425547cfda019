"""`attnspec check TARGET`: run the kit's properties against your attention code.

TARGET is ``package.module:object`` (importable from the current directory) or a built-in adapter
name.  The run is pytest over attnspec.properties, without the suite's own meta tests and without
the tests of attnspec's own implementation; it ends with the target's capability table and a
one-line verdict.

Exit codes: 0 every property the target can run passed; 1 a property failed; 2 the target could
not be checked (it cannot be imported or called as the protocol says, nothing ran, bad arguments).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

PLUGIN = "attnspec-check"
PASSED, FAILED, NOT_CHECKED = 0, 1, 2
PROFILES = ("default", "ci", "thorough")
NO_DIAGNOSIS = "diagnosis: no neighbouring convention (CONVENTIONS.md) explains the failures above"


class _Check:
    """Keeps the run's config, to read the run report once pytest is done."""

    __name__ = PLUGIN  # the name pytest registers it under (conftest.py leaves the table to it)
    config: pytest.Config | None = None

    @pytest.hookimpl
    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config


def pytest_arguments(args: argparse.Namespace, properties: Path) -> list[str]:
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
        "--strict-markers",
        "--no-header",
        "-rfE",
        "-q",
    ]
    if args.k:
        command += ["-k", args.k]
    if args.junitxml:
        command.append(f"--junitxml={args.junitxml}")
    if args.exitfirst:
        command.append("-x")
    return command + args.verbose * ["-v"] * 2


def check(args: argparse.Namespace) -> int:
    # the user's modules, from where the command runs (as `python -m pytest` would find them)
    sys.path.insert(0, os.getcwd())
    os.environ["HYPOTHESIS_PROFILE"] = args.profile
    import attnspec.properties as properties

    plugin = _Check()
    code = pytest.main(pytest_arguments(args, Path(properties.__file__).parent), plugins=[plugin])
    if plugin.config is None or code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
        print(f"NOT CHECKED: {args.target} could not be checked (see above)")
        return NOT_CHECKED
    from attnspec.properties import targets
    from attnspec.properties.run_report import NAME

    target = targets.current()
    report = plugin.config.pluginmanager.get_plugin(NAME)
    print(f"\ncapabilities of --impl {target.name} ({', '.join(sorted(target.capabilities)) or 'none'}):")
    print("\n".join(report.capability_lines(target)))
    if report.failed_tests and not target.supports("impl"):
        from attnspec.properties.diagnosis import target_diagnosis

        diagnosis = target_diagnosis(target, args.device)
        print(f"diagnosis: {diagnosis}" if diagnosis else NO_DIAGNOSIS)
    print(report.verdict(target))
    if code == pytest.ExitCode.TESTS_FAILED:
        return FAILED
    if code == pytest.ExitCode.OK and report.passed:
        return PASSED
    return NOT_CHECKED  # interrupted, or nothing ran (-k matched nothing, everything skipped)


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="attnspec", description=__doc__.split("\n\n")[0])
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
        default=os.environ.get("HYPOTHESIS_PROFILE", "default"),
        help="Hypothesis examples per property: default 25, ci 150, thorough 1000",
    )
    run.add_argument(
        "--device",
        default=os.environ.get("ATTNSPEC_DEVICE", "cpu"),
        help="torch device (default: $ATTNSPEC_DEVICE or cpu)",
    )
    run.add_argument("-k", metavar="EXPRESSION", help="only the properties matching pytest's -k EXPRESSION")
    run.add_argument("--junitxml", metavar="PATH", help="also write a JUnit XML report to PATH")
    run.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failure")
    run.add_argument("-v", "--verbose", action="count", default=0, help="one line per test")
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
