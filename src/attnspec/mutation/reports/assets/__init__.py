"""The source view of index.html: mutation-testing-elements, Stryker's report web component
(``<mutation-test-report-app>``, Apache License 2.0), kept here as package data, never in git.

The package's build fetches it (setup.py's build_py, an editable install included);
``python -m attnspec.mutation.reports.assets`` fetches it by hand, and ``--from FILE.tgz`` takes the
tarball that ``npm pack mutation-testing-elements@VERSION`` made elsewhere (an offline machine).
Either way the tarball must match the sha512 pinned below before anything of it is written.
Nothing fetches at report time: without the bundle, index.html is a plain page of its own.

Standard library only: setup.py loads this file by its path, before attnspec's dependencies exist.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import urllib.request
from pathlib import Path

NAME = "mutation-testing-elements"
VERSION = "3.9.0"
# the registry's `dist.integrity` of that version (npm view mutation-testing-elements@3.9.0 dist)
INTEGRITY = "sha512-3G4GhBO8Wc/ZrqOJ5uT8AbM1h/ew9kfX0MIlpy59gWu/amMZyKH3TreKAOMwwXNibhZMOL7A3n5nFvhYWLdtYQ=="
REGISTRY = "https://registry.npmjs.org/"
HERE = Path(__file__).resolve().parent
BUNDLE = f"mutation-test-elements-{VERSION}.js"  # the package's single-file browser build
LICENSE = f"{NAME}-{VERSION}.LICENSE"
MEMBERS = {"package/dist/mutation-test-elements.js": BUNDLE, "package/LICENSE": LICENSE}
FETCH_HINT = f"python -m attnspec.mutation.reports.assets (fetches {NAME} {VERSION} from the npm registry)"
SCRIPT_START = re.compile(r"<script[\s/>]")


def bundle(folder: Path = HERE) -> str | None:
    """The component's JavaScript, or None where it was never fetched (or cannot be inlined)."""
    try:
        text = (folder / BUNDLE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return text if inlinable(text) else None


def inlinable(script: str) -> bool:
    """Whether ``script`` inlined as <script>TEXT</script> ends at that end tag: no `</script` in it,
    and each `<!--` closed by `-->` before any `<script` (which would put the HTML tokenizer in its
    double-escaped state, where `</script>` no longer ends the element)."""
    lower = script.lower()
    if "</script" in lower:
        return False
    for opened in re.finditer("<!--", lower):
        closed = lower.find("-->", opened.start() + 2)
        tag = SCRIPT_START.search(lower, opened.start())
        if closed < 0 or (tag is not None and tag.start() < closed):
            return False
    return True


def license_text(folder: Path = HERE) -> str:
    return (folder / LICENSE).read_text(encoding="utf-8")


def check_integrity(data: bytes) -> None:
    algorithm, _, expected = INTEGRITY.partition("-")
    found = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if found != expected:
        raise ValueError(f"{NAME} {VERSION}: the tarball's {algorithm} is {found}, not the pinned {expected}")


def tarball_url(registry: str | None = None) -> str:
    base = registry or os.environ.get("npm_config_registry") or REGISTRY
    return f"{base.rstrip('/')}/{NAME}/-/{NAME}-{VERSION}.tgz"


def download(registry: str | None = None, timeout_s: float = 60) -> bytes:
    with urllib.request.urlopen(tarball_url(registry), timeout=timeout_s) as response:
        return response.read()


def unpack(data: bytes, folder: Path = HERE) -> Path:
    """The bundle and its license written into ``folder`` from the tarball ``data`` (checked first),
    the files of other versions there removed; returns the bundle's path."""
    check_integrity(data)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        texts = {name: tar.extractfile(member).read() for member in tar if (name := MEMBERS.get(member.name))}
    if set(texts) != set(MEMBERS.values()):
        raise ValueError(f"{NAME} {VERSION}: the tarball lacks {sorted(set(MEMBERS) - set(texts))}")
    if not inlinable(texts[BUNDLE].decode("utf-8")):
        raise ValueError(f"{NAME} {VERSION}: the bundle cannot be inlined in a <script> as it is")
    for old in folder.glob("mutation-test*"):
        if old.name not in texts:
            old.unlink()
    for name, content in texts.items():
        partial = folder / f".{name}.part"
        partial.write_bytes(content)
        os.replace(partial, folder / name)
    return folder / BUNDLE


def fetch(folder: Path = HERE, tarball: Path | None = None, registry: str | None = None) -> Path:
    """The bundle and its license in ``folder``: kept where they are there, else from ``tarball`` or
    the registry; returns the bundle's path."""
    if (folder / BUNDLE).is_file() and (folder / LICENSE).is_file() and tarball is None:
        return folder / BUNDLE
    data = tarball.read_bytes() if tarball is not None else download(registry)
    return unpack(data, folder)
