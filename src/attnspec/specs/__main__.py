"""`attnspec specs`: the requirement catalogue joined with the tests that check it.

Collects the kit's properties with pytest (nothing runs), reads each test's @pytest.mark.req ids
and prints, per requirement, how many tests check it (`-v`: their names).  A requirement on impl's
own API (scope "impl" in requirements.toml) is checked by the repository's own tests (tests/impl/),
not by the kit: without paths it is listed as such.  Exits 1 if a requirement the collected tests
should check has none (with paths given: every requirement), or a test names an unknown id.  The
same as `python -m attnspec.specs`; the repository's CI runs it over the kit's properties and
tests/impl/.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import textwrap
from collections import defaultdict

import pytest

from . import REQUIREMENTS


class _Collector:
    def __init__(self) -> None:
        self.tests: dict[str, list[str]] = defaultdict(list)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            for mark in item.iter_markers("req"):
                for req_id in mark.args:
                    self.tests[req_id].append(item.nodeid)


def collect(paths: list[str]) -> dict[str, list[str]]:
    collector = _Collector()
    # the kit's own settings, not those of a pytest.ini or pyproject.toml where the command runs
    # (a user's addopts would break the collection); node ids from the folder above the properties
    isolated = ["-c", os.devnull, f"--rootdir={os.path.dirname(os.path.abspath(properties_folder()))}"]
    command = ["--collect-only", "-q", "-p", "no:cacheprovider", *isolated, *paths]
    code = pytest.main(command, plugins=[collector])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise SystemExit(f"collecting {paths} failed (pytest exit code {int(code)})")
    return collector.tests


def properties_folder() -> str:
    """The folder of attnspec.kit.properties, found without importing it."""
    spec = importlib.util.find_spec("attnspec.kit.properties")
    if spec is None or not spec.submodule_search_locations:
        return "properties"
    return os.path.relpath(next(iter(spec.submodule_search_locations)))


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The catalogue's arguments (here and in `attnspec specs`)."""
    parser.add_argument("paths", nargs="*", default=None, help="test paths (default: the kit's properties)")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="list the test ids under each requirement"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="attnspec specs", description=__doc__.splitlines()[0])
    return catalogue(add_arguments(parser).parse_args(argv))


def catalogue(args: argparse.Namespace) -> int:
    """Prints the catalogue; 1 if a requirement has no test or a test names an unknown id."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        tests = collect(args.paths or [properties_folder()])

    # the kit's properties alone: impl's own requirements are the repository's tests' to check
    elsewhere = set() if args.paths else {rid for rid, req in REQUIREMENTS.items() if req.scope == "impl"}
    missing = [rid for rid in REQUIREMENTS if not tests.get(rid) and rid not in elsewhere]
    unknown = sorted(set(tests) - set(REQUIREMENTS))
    for rid, req in REQUIREMENTS.items():
        names = sorted({nodeid.split("[")[0] for nodeid in tests.get(rid, [])})
        status = f"{len(names):3d} tests" if names else "impl only" if rid in elsewhere else " NO TEST"
        print(f"{rid:9s} {status}  [{req.tolerance}]")
        print(textwrap.fill(req.statement, width=100, initial_indent=" " * 10, subsequent_indent=" " * 10))
        if args.verbose:
            for name in names:
                print(" " * 12 + name)
    checked = sum(1 for rid in REQUIREMENTS if tests.get(rid))
    print(
        f"\n{len(REQUIREMENTS)} requirements, {checked} with tests, "
        f"{sum(len(v) for v in tests.values())} test items"
        + (f"; {len(elsewhere - set(tests))} on impl's own API, checked by its own tests" * bool(elsewhere))
    )
    if missing:
        print(f"requirements without a test: {', '.join(missing)}", file=sys.stderr)
    if unknown:
        print(f"tests name unknown requirement ids: {', '.join(unknown)}", file=sys.stderr)
    return 1 if missing or unknown else 0


if __name__ == "__main__":
    raise SystemExit(main())
