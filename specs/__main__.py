"""`python -m specs`: the requirement catalogue joined with the tests that check it.

Collects properties/ with pytest (nothing runs), reads each test's @pytest.mark.req ids
and prints, per requirement, how many tests check it.  Exits 1 if a requirement has no
test or a test names an unknown id.
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
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *paths], plugins=[collector])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise SystemExit(f"collecting {paths} failed (pytest exit code {int(code)})")
    return collector.tests


def properties_folder() -> str:
    """The folder of attnspec.properties, found without importing it (in a checkout: properties/)."""
    spec = importlib.util.find_spec("attnspec.properties")
    if spec is None or not spec.submodule_search_locations:
        return "properties"
    return os.path.relpath(next(iter(spec.submodule_search_locations)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specs", description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths", nargs="*", default=[properties_folder()], help="test paths (default: the kit's properties)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="list the test ids under each requirement"
    )
    args = parser.parse_args(argv)

    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        tests = collect(args.paths)

    missing = [rid for rid in REQUIREMENTS if not tests.get(rid)]
    unknown = sorted(set(tests) - set(REQUIREMENTS))
    for rid, req in REQUIREMENTS.items():
        names = sorted({nodeid.split("[")[0] for nodeid in tests.get(rid, [])})
        status = f"{len(names):3d} tests" if names else " NO TEST"
        print(f"{rid:9s} {status}  [{req.tolerance}]")
        print(textwrap.fill(req.statement, width=100, initial_indent=" " * 10, subsequent_indent=" " * 10))
        if args.verbose:
            for name in names:
                print(" " * 12 + name)
    print(
        f"\n{len(REQUIREMENTS)} requirements, {len(REQUIREMENTS) - len(missing)} with tests, "
        f"{sum(len(v) for v in tests.values())} test items"
    )
    if missing:
        print(f"requirements without a test: {', '.join(missing)}", file=sys.stderr)
    if unknown:
        print(f"tests name unknown requirement ids: {', '.join(unknown)}", file=sys.stderr)
    return 1 if missing or unknown else 0


if __name__ == "__main__":
    raise SystemExit(main())
