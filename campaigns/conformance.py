"""This repository's conformance campaigns: the fault catalogue injected into someone else's
attention code, graded by the kit (``python -m campaigns run --target NAME`` for a built-in adapter,
``--source FILE --impl module:object`` for a file).

They run on the one engine, as ``attnspec mutate --kit`` does (src/attnspec/mutation/campaign.py), with
two things of this repository's: the survivors triaged in campaigns/conformance-triage.toml (for
their target, each with the reason it is equivalent there), and the row of the
conformance table (docs/explanation/conformance.md) each campaign leaves in
reports/<NAME>/fault-table.json (campaigns/table.py).

Honest accounting: a fault without a site in the target says "no site"; a mutant that no property
executes is "not exercised", with what the target would have to expose for the kit to reach it;
a survivor fails the gate unless the triage file lists it for this target.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from attnspec.mutation import campaign
from attnspec.mutation.campaign import CampaignError, catalogue_fingerprint
from attnspec.mutation.sources import Source, adapter_sources, file_source, module_file
from attnspec.mutation.triage import from_file

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
TRIAGE_FILE = PACKAGE_DIR / "conformance-triage.toml"

__all__ = ["CampaignError", "adapter_sources", "catalogue_fingerprint", "file_sources", "run"]


def report_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def file_sources(file: str, impl: str) -> list[Source]:
    """FILE as a module: the --impl module when it is that file, else its dotted path from the
    first folder above it that is no package."""
    cwd = Path.cwd()
    source = file_source(file, cwd)
    module = impl.partition(":")[0]
    sys.path.insert(0, os.getcwd())
    try:
        if module_file(module) == source.file:
            source.module = module
    except CampaignError:
        pass
    return [source]


def run(
    name: str,
    sources: list[Source],
    impl: str,
    *,
    children: int,
    select: str = "",
    keep: bool = False,
    root: Path = REPO_ROOT,
) -> int:
    """One conformance campaign; returns the gate's exit status (0 passed, 1 failed)."""
    settings = campaign.Settings(
        name=name,
        sources=sources,
        suite="kit",
        arguments=[],
        out_dir=root / "reports" / report_name(name),
        impl=impl,
        workers=children,
        select=select,
        triage=from_file(TRIAGE_FILE, target=name),
        keep=keep,
        table=True,
    )
    return campaign.run(settings)
