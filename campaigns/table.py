"""The PAGE's conformance table: ``python -m campaigns table``.

Each conformance campaign writes reports/<target>/fault-table.json.  This command gathers those of
the built-in targets into campaigns/conformance-table.json (committed: the measured table) and
rewrites the PAGE's table between its two markers from it.  tests/campaigns/test_table.py fails
when the PAGE and the JSON disagree, when a row does not add up, and when the catalogue changed
since the table was measured (re-run the campaigns: ``tox -e conformance-mutation``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from attnspec.mutation.faults import FAULTS
from attnspec.protocol.targets import ADAPTERS

from .conformance import REPO_ROOT, catalogue_fingerprint

TARGETS = (
    "hf-llama",
    "hf-mistral",
    "hf-gptoss",
    "hf-qwen3",
    "gpt-oss",
    "hf-llama-model",
    "hf-mistral-model",
    "hf-qwen2-model",
    "hf-qwen3-model",
    "hf-gptoss-model",
    "hf-gptneox",
    "hf-gemma2",
    "hf-bloom-model",
    "hf-bert-model",
    "hf-smollm3-model",
    "hf-llama4-model",
    "hf-cohere2-model",
    "hf-modernbert-model",
    "hf-roberta-model",
    "hf-gemma3-model",
    "hf-olmo2-model",
    "hf-stablelm-model",
    "hf-phi-model",
    "hf-gptj-model",
    "hf-falcon-model",
    "hf-falcon-alibi-model",
    "hf-mpt-model",
    "hf-t5-model",
    "hf-t5-cross",
    "hf-whisper-cross",
    "flash-ref",
)
TABLE_FILE = Path(__file__).resolve().parent / "conformance-table.json"
PAGE = REPO_ROOT / "docs" / "explanation" / "conformance.md"
BEGIN = "<!-- conformance table: python -m campaigns table -->"
END = "<!-- end of conformance table -->"
COUNTS = ("sites", "mutants", "killed", "survived", "not_exercised")


def family(target: str) -> str:
    """The family a built-in target belongs to: its name without the adapter's prefix and level."""
    return target.removeprefix("hf-").removesuffix("-model").removesuffix("-cross")


def level(target: str) -> str:
    """What a campaign on the target grades, read from where its adapter lives: a whole model (its
    white box included), a family's attention core and its layer, or a kernel."""
    adapter = ADAPTERS[target]
    if adapter.endswith("CROSS"):
        return "cross-attention layer"
    if "hf_models:" in adapter or adapter.endswith(("MODEL", "_MODEL")):
        return "model"
    if "hf_eager:" in adapter or adapter.endswith("LAYER"):
        return "layer, attention"
    return "attention, layer" if "gpt_oss" in adapter else "attention kernel, backward"


def summary(table: dict) -> list[str]:
    """Markdown: one row per family, the levels its campaigns graded and, over them, the faults with a
    site, those killed, those that survived (all triaged equivalent, or the gate fails) and those no
    property reaches.  A campaign runs only on a target that passes the kit (its clean run)."""
    header = "| family | levels graded (targets) | faults with a site | killed | survived (triaged) | not exercised |"  # noqa: E501
    lines = [header, "|---|---|---:|---:|---:|---:|"]
    families: dict[str, list[str]] = {}
    for target in TARGETS:
        families.setdefault(family(target), []).append(target)
    for name, targets in families.items():
        counts = {"sited": 0, "killed": 0, "survived": 0, "triaged": 0, "not exercised": 0}
        for target in targets:
            for row in table["targets"][target]["faults"].values():
                if row["status"] in ("no site", "not recognised"):
                    continue
                counts["sited"] += 1
                counts["killed"] += row["status"] == "killed"
                counts["survived"] += row["status"] in ("survived", "equivalent")
                counts["triaged"] += row["status"] == "equivalent"
                counts["not exercised"] += row["status"] == "not exercised"
        levels = "; ".join(f"{level(target)} (`{target}`)" for target in targets)
        lines.append(
            f"| {name} | {levels} | {counts['sited']} | {counts['killed']} | "
            f"{counts['survived']} ({counts['triaged']}) | {counts['not exercised']} |"
        )
    return [*lines, "", f"{len(families)} families, {len(TARGETS)} targets.", ""]


def render(table: dict) -> str:
    """Markdown: the summary per family, then one row per target and fault with a site (survivors show
    how many are triaged equivalents), then, a line per target, the faults that found no site in it."""
    lines = [
        *summary(table),
        "| target | fault | status | sites | mutants | killed | survived (triaged) | not exercised |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    no_site, unrecognised = [], []
    for target in TARGETS:
        entry = table["targets"][target]
        absent = [fault.id for fault in FAULTS if entry["faults"][fault.id]["status"] == "no site"]
        present = [fault.id for fault in FAULTS if entry["faults"][fault.id]["status"] == "not recognised"]
        for fault in FAULTS:
            row = entry["faults"][fault.id]
            if fault.id in absent or fault.id in present:
                continue
            survived = f"{row['survived']} ({row['triaged']})" if row["survived"] else "0"
            lines.append(
                f"| {target} | {fault.id} | {row['status']} | {row['sites']} | {row['mutants']} | "
                f"{row['killed']} | {survived} | {row['not_exercised']} |"
            )
        if absent:
            no_site.append(f"{target}: {', '.join(absent)}")
        if present:
            unrecognised.append(f"{target}: {', '.join(present)}")
    seconds = ", ".join(f"{t} {table['targets'][t]['seconds']} s" for t in TARGETS)
    lines += ["", f"No site (the fault's code is not in the target): {'; '.join(no_site)}."]
    if unrecognised:
        lines += [
            "",
            "Present but not recognised (the code visibly has the fault's feature, in an idiom no "
            f"operator knows, so it is not graded): {'; '.join(unrecognised)}.",
        ]
    lines += ["", f"Campaign times on 2 cores: {seconds}."]
    return "\n".join(lines)


def page_block(text: str, begin: str = BEGIN, end: str = END) -> str:
    """What lies between a page's two markers (by default the conformance table's)."""
    if begin not in text or end not in text:
        raise ValueError(f"the page has no table markers ({begin} ... {end})")
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def write_block(page: Path, block: str, begin: str = BEGIN, end: str = END) -> None:
    """Put ``block`` between the page's two markers."""
    text = page.read_text(encoding="utf-8")
    page_block(text, begin, end)
    head, rest = text.split(begin, 1)
    page.write_text(f"{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}", encoding="utf-8")


def gather(reports: Path) -> dict:
    table: dict = {"catalogue": catalogue_fingerprint(), "targets": {}}
    for target in TARGETS:
        path = reports / target / "fault-table.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: python -m campaigns run --target {target}")
        measured = json.loads(path.read_text())
        if measured["catalogue"] != table["catalogue"]:
            raise ValueError(f"{path} was measured with another catalogue: run its campaign again")
        table["targets"][target] = {"seconds": measured["seconds"], "faults": measured["faults"]}
    return table


def main(argv: list[str] | None = None) -> int:
    try:
        table = gather(REPO_ROOT / "reports")
    except (FileNotFoundError, ValueError) as error:
        print(f"table not written: {error}", file=sys.stderr)
        return 1
    TABLE_FILE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    write_block(PAGE, render(table))
    print(f"wrote {TABLE_FILE.relative_to(REPO_ROOT)} and the PAGE's table")
    return 0
