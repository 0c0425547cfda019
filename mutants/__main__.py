"""`python -m mutants run [--faults-only]`: a mutation campaign over impl/ against properties/;
`python -m mutants run --target NAME` or `--source FILE --impl module:object`: the catalogue faults
in another implementation's code, against the kit run with that target (mutants/conformance.py).

Exit status: 0 when the gate passes, 1 when it fails (a catalogue fault not killed or without a
site, an untriaged survivor, a replay problem, test strength under --min-strength), 2 when the
campaign itself could not run, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import conformance
from .campaign import REPO_ROOT, Campaign, CampaignError, driver_env, run_mutmut, workspace
from .catalogue import FAULTS_BY_ID
from .html import render
from .matrix import kill_matrix, matrix_table, write_heatmap
from .report import load_triage, read_mutants, stryker_report, summarize


def write_report(campaign: Campaign, min_strength: float | None, matrix: bool = True) -> int:
    mutants, sources, stats = read_mutants(campaign.workspace)
    info = {"mode": campaign.mode, "max_children": campaign.max_children, "isolation": campaign.isolation}
    end = campaign.finished or time.monotonic()
    performance = {
        "setup": 0.0,  # mutant generation is counted in initialRun: mutmut does it in the same step
        "initialRun": campaign.tests_started - campaign.started,
        "mutation": end - campaign.tests_started,
    }
    report = stryker_report(mutants, sources, stats, info, performance)
    report_path = campaign.root / "reports" / "mutation-report.json"
    report_path.parent.mkdir(exist_ok=True)
    report_path.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    (report_path.parent / "index.html").write_text(render(report), encoding="utf-8")
    text, failures = summarize(
        mutants,
        info,
        end - campaign.started,
        report_path.relative_to(campaign.root),
        load_triage(),
        min_strength,
    )
    print(text, flush=True)
    if matrix:
        by_fault: dict[str, list[str]] = {}
        for mutant in mutants:
            if mutant.operator in FAULTS_BY_ID and mutant.status == "Killed":
                by_fault.setdefault(mutant.operator, []).append(mutant.name)
        count = sum(map(len, by_fault.values()))
        print(
            f"kill matrix: running every test that reaches them against {count} catalogue mutants ...",
            flush=True,
        )
        started = time.monotonic()
        cells, paths = kill_matrix(
            campaign.workspace, driver_env(campaign.workspace), by_fault, campaign.max_children
        )
        saved = {"requirements": cells, "paths": {fault: sorted(on) for fault, on in paths.items()}}
        (report_path.parent / "kill-matrix.json").write_text(json.dumps(saved, indent=1, sort_keys=True))
        table = matrix_table(cells, paths) + f"\n  ({time.monotonic() - started:.0f} s)"
        if write_heatmap(cells, report_path.parent / "kill-matrix.png"):
            table += f"\n  heatmap: {report_path.parent.relative_to(campaign.root) / 'kill-matrix.png'}"
        print("\n" + table)
        text = text + "\n\n" + table
    (report_path.parent / "mutation-summary.txt").write_text(text + "\n")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mutants", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a campaign and write reports/mutation-report.json")
    run.add_argument("--faults-only", action="store_true", help="only the catalogue operators F1..F16")
    run.add_argument("--max-children", type=int, default=os.cpu_count() or 2, help="parallel mutant workers")
    run.add_argument(
        "--isolation",
        choices=("fork", "forkserver"),
        default="fork",
        help="mutmut's process_isolation (default: fork)",
    )
    run.add_argument("--min-strength", type=float, help="also fail when test strength (%%) is below this")
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
    commands.add_parser("table", help="gather the conformance campaigns' tables into the README")
    args = parser.parse_args(argv)
    if args.command == "table":
        from .table import main as table_main

        return table_main()
    if args.target or args.source:
        return run_conformance(parser, args)

    campaign = Campaign(
        root=Path(args.root).resolve(),
        faults_only=args.faults_only,
        max_children=args.max_children,
        isolation=args.isolation,
    )
    print(f"workspace {campaign.workspace}", flush=True)
    try:
        with workspace(campaign, keep=args.keep_workspace):
            run_mutmut(campaign)
            return write_report(campaign, args.min_strength, matrix=not args.no_matrix)
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
    if args.faults_only or args.no_matrix or args.min_strength is not None:
        parser.error("--target/--source campaigns run the catalogue faults only, with the kill matrix")
    try:
        if args.target:
            name, impl, sources = args.target, args.target, conformance.target_sources(args.target)
        else:
            name, impl = args.impl.partition(":")[0], args.impl
            sources = [conformance.file_source(args.source, args.impl)]
        return conformance.run(
            name,
            sources,
            impl,
            children=args.max_children,
            select=args.select,
            keep=args.keep_workspace,
            root=Path(args.root).resolve(),
        )
    except conformance.ConformanceError as error:
        print(f"\ncampaign failed: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: workspace removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
