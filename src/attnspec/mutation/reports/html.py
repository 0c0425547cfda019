"""reports/index.html: a self-contained page of the campaign (opens offline, no dependencies).

It reads the Stryker-schema report and shows, per source file, the score and the source with
every mutant beside the line it changes (status colour, operator, replacement, killing test).
A row of checkboxes hides mutants by status.
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict

STATUSES = ("Survived", "NoCoverage", "Timeout", "Killed", "CompileError", "RuntimeError", "Ignored")
STATUSES += ("Pending",)  # a shard's report: the mutants that other shards run
COLOURS = {
    "Killed": "#2e7d32",
    "Survived": "#c62828",
    "NoCoverage": "#ef6c00",
    "Timeout": "#6a1b9a",
    "CompileError": "#607d8b",
    "RuntimeError": "#607d8b",
    "Ignored": "#9e9e9e",
    "Pending": "#bdbdbd",
}

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table.files { border-collapse: collapse; margin-bottom: 1.5em; }
table.files td, table.files th { padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: right; }
table.files td:first-child, table.files th:first-child { text-align: left; }
pre { margin: 0; font: 12px/1.5 ui-monospace, monospace; }
.line { display: flex; } .no { color: #999; width: 3.5em; text-align: right; padding-right: 1em; }
.src { white-space: pre; flex: 1; } .hit { background: #fff8e1; }
.mutant { margin-left: 4.5em; font: 12px ui-monospace, monospace; }
.badge { display: inline-block; color: white; border-radius: 3px; padding: 0 5px; margin-right: 6px; }
details { margin-bottom: 1em; } summary { cursor: pointer; font-weight: 600; }
"""

SCRIPT = """
for (const box of document.querySelectorAll('input[data-status]')) {
  box.addEventListener('change', () => {
    for (const row of document.querySelectorAll('.mutant[data-status="' + box.dataset.status + '"]'))
      row.style.display = box.checked ? '' : 'none';
  });
}
"""


def _score(counts: Counter) -> str:
    detected = counts["Killed"] + counts["Timeout"]
    valid = detected + counts["Survived"] + counts["NoCoverage"]
    return f"{100 * detected / valid:.1f}%" if valid else "n/a"


def _mutant_row(mutant: dict) -> str:
    status = mutant["status"]
    start = mutant["location"]["start"]
    killed_by = ", ".join(mutant.get("killedBy", []))
    detail = f" killed by {killed_by}" if killed_by else ""
    return (
        f'<div class="mutant" data-status="{status}">'
        f'<span class="badge" style="background:{COLOURS.get(status, "#555")}">{status}</span>'
        f"{html.escape(mutant['mutatorName'])} at {start['line']}:{start['column']} &rarr; "
        f"<code>{html.escape(mutant.get('replacement', '')[:200])}</code>"
        f'<span style="color:#777">{html.escape(detail)}</span>'
        f'<span style="color:#aaa"> ({html.escape(mutant["id"])})</span></div>'
    )


def _file_section(path: str, entry: dict) -> str:
    by_line: dict[int, list[dict]] = defaultdict(list)
    for mutant in entry["mutants"]:
        by_line[mutant["location"]["start"]["line"]].append(mutant)
    counts = Counter(m["status"] for m in entry["mutants"])
    rows = []
    for number, text in enumerate(entry["source"].splitlines(), start=1):
        mutants = sorted(by_line.get(number, []), key=lambda m: STATUSES.index(m["status"]))
        css = "line hit" if mutants else "line"
        source = f'<span class="no">{number}</span><span class="src">{html.escape(text)}</span>'
        rows.append(f'<div class="{css}">{source}</div>')
        rows += [_mutant_row(m) for m in mutants]
    is_open = " open" if counts["Survived"] or counts["NoCoverage"] else ""
    return (
        f'<details id="{html.escape(path)}"{is_open}><summary>{html.escape(path)} '
        f"&mdash; {_score(counts)} ({len(entry['mutants'])} mutants)</summary>"
        f"<pre>{''.join(rows)}</pre></details>"
    )


def render(report: dict, title: str = "attnspec mutation report") -> str:
    """The whole page as one HTML string."""
    files = report["files"]
    total: Counter = Counter()
    table = ["<tr><th>file</th><th>score</th>" + "".join(f"<th>{s}</th>" for s in STATUSES[:4]) + "</tr>"]
    for path, entry in sorted(files.items()):
        counts = Counter(m["status"] for m in entry["mutants"])
        total += counts
        cells = "".join(f"<td>{counts[s]}</td>" for s in STATUSES[:4])
        link = f'<a href="#{html.escape(path)}">{html.escape(path)}</a>'
        table.append(f"<tr><td>{link}</td><td>{_score(counts)}</td>{cells}</tr>")
    cells = "".join(f"<td>{total[s]}</td>" for s in STATUSES[:4])
    table.append(f"<tr><th>all</th><th>{_score(total)}</th>{cells}</tr>")
    boxes = " ".join(
        f'<label><input type="checkbox" checked data-status="{s}"> {s}</label>' for s in STATUSES if total[s]
    )
    config = html.escape(", ".join(f"{k}={v}" for k, v in report.get("config", {}).items()))
    sections = "".join(_file_section(path, files[path]) for path in sorted(files))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{config}. Score = (killed + timeout) / (all but errors and ignored).</p>"
        f"<table class='files'>{''.join(table)}</table><p>show: {boxes}</p>{sections}"
        f"<script>{SCRIPT}</script></body></html>\n"
    )
