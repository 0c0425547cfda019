"""`python -m campaigns run [--faults-only] [--incremental] [--shard I/N]`: a mutation campaign over
impl/ against properties/; `python -m campaigns merge DIR...`: the shards of one campaign as one;
`python -m campaigns run --target NAME` or `--source FILE --impl module:object`: the catalogue faults
in another implementation's code, against the kit run with that target (campaigns/conformance.py).

Exit status: 0 when the gate passes, 1 when it fails (a catalogue fault not killed or without a
site, an untriaged survivor, a replay problem, test strength under --min-strength), 2 when the
campaign itself could not run (or the shards do not make one campaign), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from attnspec.runner.arguments import percentage, positive_int

try:
    from attnspec.mutation.generators.mutmut_operators import read_mutants
    from attnspec.mutation.reports.outputs import MergeError, merge, publish
    from attnspec.mutation.triage import TriageError, from_file

    from . import conformance
    from .campaign import REPO_ROOT, TRIAGE_FILE, Campaign, CampaignError, run_campaign, workspace
except ModuleNotFoundError as missing:  # a venv without the mutation extra: one line, before any argument
    package = (missing.name or "").partition(".")[0]
    if package not in ("mutmut", "libcst", "jsonschema", "matplotlib"):
        raise
    print(
        f"NOT RUN: python -m campaigns needs {package}, of the mutation extra: "
        "pip install -e '.[mutation]' (tox -e mutation installs it)",
        file=sys.stderr,
    )
    sys.exit(2)


# The share of killed catalogue mutants of impl/ whose fault `attnspec check`'s diagnosis names, as last
# measured by the main job (its summary's "diagnosis:" line): 74 of 80 (92.5%) on three campaigns in a
# row, 76 of 82 (92.7%) with F11's two mutants in the cache's ring; the six left show at no target's
# surface (impl's MLP blocks, a tile's key range, a padded row's NaN that no later layer reads, a
# cache ring sized for max_len).  The gate is the 90%.
DIAGNOSIS_FLOOR = 0.90


def write_report(campaign: Campaign, results: dict, min_strength: float | None) -> int:
    mutants, sources = read_mutants(campaign.workspace, results)
    phases = results["phases"]
    info = {"mode": campaign.mode, "max_children": campaign.max_children, "matrix": campaign.matrix}
    if campaign.shard:
        info["shard"] = f"shard {campaign.shard[0]}/{campaign.shard[1]}"
    if campaign.incremental:
        info["reuse"] = (
            f"incremental: {phases['mutants_reused']} mutants reused, {phases['mutants_run']} run, "
            f"{phases['tests_traced']} tests re-run in the clean run"
        )
        if results.get("not_reused"):
            info["reuse"] += f" (nothing reused: {results['not_reused']})"
    end = campaign.finished or time.monotonic()
    setup = end - campaign.started - phases["clean_s"] - phases["mutants_s"]
    performance = {"setup": setup, "initialRun": phases["clean_s"], "mutation": phases["mutants_s"]}
    return publish(
        campaign.reports,
        campaign.root,
        mutants,
        sources,
        results,
        info,
        performance,
        end - campaign.started,
        min_strength,
        from_file(TRIAGE_FILE),
        DIAGNOSIS_FLOOR,
    )


def parse_shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        shard = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes I/N, e.g. 1/4; got {text!r}") from None
    if not 1 <= shard[0] <= shard[1]:
        raise argparse.ArgumentTypeError(f"--shard I/N needs 1 <= I <= N; got {text!r}")
    return shard


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m campaigns", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a campaign and write reports/mutation-report.json")
    run.add_argument("--faults-only", action="store_true", help="only the catalogue operators (F1, F2, ...)")
    run.add_argument(
        "--max-children", type=positive_int, default=os.cpu_count() or 2, help="parallel mutant workers"
    )
    run.add_argument(
        "--incremental",
        action="store_true",
        help="reuse reports/mutation-results.json where a mutant, its function and its tests are unchanged",
    )
    run.add_argument(
        "--shard", type=parse_shard, metavar="I/N", help="run shard I of N (merge them with `merge`)"
    )
    run.add_argument(
        "--min-strength", type=percentage, help="also fail when test strength (%%) is below this"
    )
    run.add_argument(
        "--keep-workspace", action="store_true", help="keep the temporary workspace for debugging"
    )
    run.add_argument("--no-matrix", action="store_true", help="skip the kill matrix (fault x requirement)")
    run.add_argument("--root", default=str(REPO_ROOT), help=argparse.SUPPRESS)  # for the machinery's own test
    run.add_argument(
        "--target",
        help="grade the kit on a built-in adapter's code (hf-llama, hf-mistral, hf-gptoss, gpt-oss)",
    )
    run.add_argument("--source", help="grade the kit on your own FILE (with --impl module:object)")
    run.add_argument("--impl", help="the target the properties run against, for --source")
    run.add_argument(
        "-k", dest="select", default="", help="only the properties pytest -k selects (--target/--source)"
    )
    merging = commands.add_parser("merge", help="merge the reports/ folders of a campaign's shards")
    merging.add_argument("reports", nargs="+", metavar="DIR", help="a shard's reports/ folder")
    merging.add_argument("--out", default="reports", help="where the merged reports go (default: reports)")
    merging.add_argument(
        "--min-strength", type=percentage, help="also fail when test strength (%%) is below this"
    )
    commands.add_parser(
        "table", help="gather the conformance campaigns' tables into docs/explanation/conformance.md"
    )
    commands.add_parser(
        "recall", help="measure the operators on campaigns/corpus/ into docs/reference/faults.md"
    )
    args = parser.parse_args(argv)
    if args.command == "recall":
        from .recall import main as recall_main

        return recall_main()
    if args.command == "table":
        from .table import main as table_main

        return table_main()
    if args.command == "merge":
        try:
            triage = from_file(TRIAGE_FILE)
            out = Path(args.out).resolve()
            return merge(args.reports, out, Path.cwd(), args.min_strength, triage, DIAGNOSIS_FLOOR)
        except (MergeError, OSError) as error:  # OSError: a folder it cannot read (a name too long, ...)
            print(f"merge failed: {error}", file=sys.stderr)
            return 2
    if args.target or args.source:
        return run_conformance(parser, args)

    campaign = Campaign(
        root=Path(args.root).resolve(),
        faults_only=args.faults_only,
        max_children=args.max_children,
        matrix=not args.no_matrix,
        shard=args.shard,
        incremental=args.incremental,
    )
    print(f"workspace {campaign.workspace}", flush=True)
    try:
        with workspace(campaign, keep=args.keep_workspace):
            results = run_campaign(campaign)
            return write_report(campaign, results, args.min_strength)
    except CampaignError as error:
        print(f"\ncampaign failed: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: workspace removed", file=sys.stderr)
        return 130


def run_conformance(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.target and args.source:
        parser.error("--target and --source exclude each other")
    if args.source and not args.impl:
        parser.error("--source FILE needs --impl module:object, the target the properties run against")
    if args.faults_only or args.no_matrix or args.min_strength is not None or args.incremental or args.shard:
        parser.error("--target/--source campaigns run the catalogue faults only, with the kill matrix")
    try:
        if args.target:
            name, impl, sources = args.target, args.target, conformance.adapter_sources(args.target)
        else:
            name, impl = args.impl.partition(":")[0], args.impl
            sources = conformance.file_sources(args.source, args.impl)
        return conformance.run(
            name,
            sources,
            impl,
            children=args.max_children,
            select=args.select,
            keep=args.keep_workspace,
            root=Path(args.root).resolve(),
        )
    except (conformance.CampaignError, TriageError) as error:
        print(f"\ncampaign failed: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: workspace removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
