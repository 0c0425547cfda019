"""reports/index.html: the campaign's page, one file that opens offline.

First the catalogue faults: a table of every fault's status (killed, survived, not exercised, not
recognised, no site) with the tests that killed it, then each survivor's diff.  Below, Stryker's
report component (mutation-testing-elements' ``<mutation-test-report-app>``, its bundle inlined from
assets/) shows every source file with its mutants in place, from the report inlined as JSON.  Where
the bundle was never fetched, the page is the faults part alone and says how to get the rest.
"""

from __future__ import annotations

import difflib
import html
import json
import sys
from collections import Counter

from ..faults import FAULTS
from . import assets
from .stryker import UNDETECTED, Mutant
from .summary import fault_rows

COLUMNS = ("killed", "survived", "not exercised", "not recognised", "no site")
COUNTED = {"killed": "killed", "survived": "survived", "not exercised": "not_exercised"}
COLOURS = {
    "killed": "#c8e6c9",
    "survived": "#ffcdd2",
    "not exercised": "#ffe0b2",
    "not recognised": "#e1bee7",
    "no site": "#eeeeee",
}
ELEMENT = "mutation-test-report-app"

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
table.faults { border-collapse: collapse; margin-bottom: 1em; }
table.faults td, table.faults th { padding: 2px 8px; border-bottom: 1px solid #ddd; vertical-align: top; }
table.faults td.count { text-align: center; } td.what { color: #555; min-width: 24em; }
pre.diff { font: 12px/1.45 ui-monospace, monospace; background: #fafafa; padding: 6px; margin: 4px 0; }
pre.diff .del { background: #ffebee; } pre.diff .add { background: #e8f5e9; }
details { margin-bottom: 0.5em; } summary { cursor: pointer; }
p.note { background: #fff8e1; border-left: 4px solid #ffb300; padding: 6px 10px; }
"""

# the report handed to the component; <body data-ready> once it is defined and has rendered it
LOADER = """
const app = document.querySelector('ELEMENT');
app.report = JSON.parse(document.getElementById('mutation-report').textContent);
customElements.whenDefined('ELEMENT').then(() => app.updateComplete).then(() => {
  document.body.dataset.ready = 'ELEMENT';
});
""".replace("ELEMENT", ELEMENT)


def report_mutants(report: dict) -> list[Mutant]:
    """The report's mutants as records (what :func:`fault_rows` reads)."""
    mutants = []
    for path, entry in report["files"].items():
        for item in entry["mutants"]:
            start, end = item["location"]["start"], item["location"]["end"]
            mutant = Mutant(item["id"], path, item["mutatorName"], item["status"])
            mutant.start, mutant.end = (start["line"], start["column"]), (end["line"], end["column"])
            mutant.killed_by = list(item.get("killedBy", []))
            mutants.append(mutant)
    return mutants


def page_report(report: dict) -> dict:
    """The report as the page holds it: its config's plain values only, and the sources as the paths
    shown (the campaign's config maps them to absolute paths)."""
    config = report.get("config", {})
    kept = {key: value for key, value in config.items() if isinstance(value, str | int | float | bool)}
    if isinstance(config.get("sources"), dict):
        kept["sources"] = ", ".join(config["sources"])
    return dict(report, config=kept)


def inline_json(value: dict) -> str:
    """JSON to sit in a <script>: every `<` escaped, so no `</script>` or `<!--` in a source ends it."""
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")


def mutant_diff(path: str, source: str, item: dict) -> str:
    """The unified diff of a report's mutant, from its location and replacement."""
    lines = source.splitlines(keepends=True)
    start, end = item["location"]["start"], item["location"]["end"]
    first = sum(len(line) for line in lines[: start["line"] - 1]) + start["column"] - 1
    last = sum(len(line) for line in lines[: end["line"] - 1]) + end["column"] - 1
    mutated = source[:first] + item.get("replacement", "") + source[last:]
    diff = difflib.unified_diff(source.splitlines(), mutated.splitlines(), n=1, lineterm="")
    return "\n".join(list(diff)[2:])


def diff_block(diff: str) -> str:
    """A diff's hunks (its file header left out), the lines removed and added marked."""
    rows = []
    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")) and not rows:
            continue
        css = "del" if line.startswith("-") else "add" if line.startswith("+") else ""
        rows.append(f'<span class="{css}">{html.escape(line)}</span>' if css else html.escape(line))
    return f'<pre class="diff">{chr(10).join(rows)}</pre>'


def score(report: dict) -> str:
    counts = Counter(m["status"] for entry in report["files"].values() for m in entry["mutants"])
    detected = counts["Killed"] + counts["Timeout"]
    valid = detected + counts["Survived"] + counts["NoCoverage"]
    shown = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "none"
    return f"{shown}; mutation score {100 * detected / valid:.1f}%" if valid else shown


def header(report: dict, title: str) -> str:
    config = report.get("config", {})
    what = [f"{key}: {config[key]}" for key in ("campaign", "mode") if isinstance(config.get(key), str)]
    files = ", ".join(sorted(report["files"])) or "none"
    return (
        f"<h1>{html.escape(title)}</h1><p>{html.escape('; '.join(what))}</p>"
        f"<p>files: {html.escape(files)}<br>mutants: {html.escape(score(report))}</p>"
        "<p><a href='#faults'>catalogue faults</a> &middot; <a href='#survivors'>survivors</a> &middot; "
        "<a href='#files'>source files and mutants</a></p>"
    )


def fault_table(report: dict, rows: dict[str, dict]) -> str:
    killers: dict[str, set[str]] = {fault.id: set() for fault in FAULTS}
    for entry in report["files"].values():
        for item in entry["mutants"]:
            if item["status"] == "Killed" and item["mutatorName"] in killers:
                killers[item["mutatorName"]].update(item.get("killedBy", []))
    heads = "".join(
        f"<th>{column}</th>" for column in ("fault", "status", *COLUMNS, "killed by", "the fault")
    )
    out = [f"<tr>{heads}</tr>"]
    for fault in FAULTS:
        row = rows[fault.id]
        status = row["status"]
        cells = []
        for column in COLUMNS:
            count = row[COUNTED[column]] if column in COUNTED else 0
            shown = count or ("yes" if status == column else "")
            colour = f' style="background:{COLOURS[column]}"' if status == column else ""
            cells.append(f'<td class="count"{colour}>{shown}</td>')
        killed_by = "<br>".join(f"<code>{html.escape(test)}</code>" for test in sorted(killers[fault.id]))
        what = html.escape(fault.description)
        if status == "not recognised":
            what += f"<br>present at {html.escape(str(row.get('present', '')))}, no mutant placed"
        out.append(
            f'<tr id="{fault.id}"><th>{fault.id}</th><td>{html.escape(status)}</td>{"".join(cells)}'
            f'<td>{killed_by}</td><td class="what">{what}</td></tr>'
        )
    return f'<table class="faults">{"".join(out)}</table>'


def survivors(report: dict, diffs: dict[str, str]) -> str:
    """Every catalogue mutant no test detected, with its diff (the campaign's in ``diffs``, else one
    made from the report) and its triage, where it has one."""
    order = {fault.id: number for number, fault in enumerate(FAULTS)}
    found = [
        (order[item["mutatorName"]], path, item)
        for path, entry in report["files"].items()
        for item in entry["mutants"]
        if item["status"] in UNDETECTED and item["mutatorName"] in order
    ]
    blocks = []
    for _, path, item in sorted(found, key=lambda found: (found[0], found[2]["id"])):
        label = "survived" if item["status"] == "Survived" else "not exercised"
        where = f"{path}:{item['location']['start']['line']}"
        reason = f" &mdash; {html.escape(item['statusReason'])}" if item.get("statusReason") else ""
        diff = diffs.get(item["id"]) or mutant_diff(path, report["files"][path]["source"], item)
        blocks.append(
            f"<details open><summary><b>{item['mutatorName']}</b> {label}: {html.escape(item['id'])} at "
            f"{html.escape(where)}{reason}</summary>{diff_block(diff)}</details>"
        )
    return f"<h3 id='survivors'>Survivors ({len(blocks)})</h3>{''.join(blocks) or '<p>none</p>'}"


def component(report: dict, bundle: str, title: str) -> str:
    """Stryker's view: the element, the component's bundle and its license, the report as JSON."""
    notice = assets.license_text().replace("--", "- -")
    return (
        f'<h2>Source files and mutants</h2><{ELEMENT} title-postfix="{html.escape(title)}"></{ELEMENT}>'
        f"<p><small>This view: {assets.NAME} {assets.VERSION} by Stryker Mutator, Apache License 2.0 "
        f"(its text is in this page's source).</small></p>"
        f"<!-- {assets.NAME} {assets.VERSION}, inlined below:\n{notice}\n-->"
        f"<script>{bundle}</script>"
        f'<script type="application/json" id="mutation-report">{inline_json(page_report(report))}</script>'
        f"<script>{LOADER}</script>"
    )


def fallback_note() -> str:
    return (
        f"<p class='note'>The source view (Stryker's {assets.NAME} {assets.VERSION}) is not installed "
        f"with attnspec here, so this page shows the catalogue faults only. Fetch it with "
        f"<code>{html.escape(assets.FETCH_HINT)}</code> and run the campaign again; "
        f"mutation-report.json beside this page holds every mutant.</p>"
    )


def render(
    report: dict,
    rows: dict[str, dict] | None = None,
    diffs: dict[str, str] | None = None,
    title: str = "attnspec mutation report",
) -> str:
    """The whole page as one HTML string.  ``rows``: :func:`fault_rows` of the campaign (which knows
    the triage and the faults present but not recognised; by default, from the report's mutants);
    ``diffs``: the mutants' diffs by name (by default, from their locations in the report)."""
    rows = rows or fault_rows(report_mutants(report), {})
    bundle = assets.bundle()
    if bundle is None:
        print(
            f"index.html: the plain page, without the source view; to get it: {assets.FETCH_HINT}",
            file=sys.stderr,
        )
    rest = component(report, bundle, title) if bundle is not None else fallback_note()
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{header(report, title)}"
        f"<h2 id='faults'>Catalogue faults</h2>{fault_table(report, rows)}{survivors(report, diffs or {})}"
        f"<section id='files'>{rest}</section></body></html>\n"
    )
