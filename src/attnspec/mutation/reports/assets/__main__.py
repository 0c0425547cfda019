"""``python -m attnspec.mutation.reports.assets [--from FILE.tgz] [--registry URL]``: the report
component's bundle fetched into the installed package (see __init__.py); exit 1 when it cannot be."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import HERE, NAME, VERSION, fetch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnspec.mutation.reports.assets", description=__doc__)
    parser.add_argument("--from", dest="tarball", type=Path, help=f"the tarball of npm pack {NAME}@{VERSION}")
    parser.add_argument("--registry", help="the npm registry (default: $npm_config_registry, else npmjs.org)")
    parser.add_argument("--into", type=Path, default=HERE, help="the folder (default: the package's)")
    args = parser.parse_args(argv)
    try:
        bundle = fetch(args.into, args.tarball, args.registry)
    except (OSError, ValueError) as error:
        print(f"{NAME} {VERSION} not fetched: {error}", file=sys.stderr)
        print(
            f"offline: npm pack {NAME}@{VERSION} on a machine online, then --from that .tgz", file=sys.stderr
        )
        return 1
    print(f"{NAME} {VERSION}: {bundle}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
