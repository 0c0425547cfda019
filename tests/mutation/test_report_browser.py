"""index.html as a reader's browser shows it: a real campaign's page (the shapes-only tests of a copy of
examples/user_project, one of whose lines holds `</script><!--<script>`) opened from file:// in
headless Chromium, launched as docs/browser_check.py launches it.  Stryker's component must define
itself, take the inlined report and show its source file, under the faults table; the screenshot must
show something.  Skipped without Chromium, or without the component's bundle (python -m
attnspec.mutation.reports.assets), except where ATTNSPEC_REQUIRE_BROWSER=1 (CI), where that fails.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import zlib
from pathlib import Path

import pytest

from attnspec.mutation.faults import FAULTS
from attnspec.mutation.reports import assets, html
from docs.browser_check import BROWSERS, browser, open_page
from tests.fixtures.kit_runs import run_module, users_env

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "# a line no page may break on: </script><!--<script> </SCRIPT>"
ELEMENT = "mutation-test-report-app"
SIZE = "1280,2000"


def missing(what: str) -> None:
    """Skip for ``what`` is missing, or fail where CI requires the browser check."""
    if os.environ.get("ATTNSPEC_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{what}, and ATTNSPEC_REQUIRE_BROWSER=1")
    pytest.skip(what)


@pytest.fixture(scope="module")
def chromium() -> str:
    """The browser (asked for before the campaign runs, so that a skip costs nothing)."""
    found = browser()
    if found is None:
        missing(f"no Chromium on this machine ({', '.join(BROWSERS)})")
    return found


@pytest.fixture
def bundled() -> None:
    if assets.bundle() is None:
        missing(f"the report component is not installed: {assets.FETCH_HINT}")


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    """The reports folder of `attnspec mutate attention.py -- pytest tests/test_shapes.py`."""
    root = tmp_path_factory.mktemp("browser")
    project = root / "project"
    shutil.copytree(REPO / "examples" / "user_project", project, ignore=shutil.ignore_patterns("__pycache__"))
    source = project / "attention.py"
    source.write_text(source.read_text().replace("    if causal:\n", f"    {HOSTILE}\n    if causal:\n", 1))
    (root / "tmp").mkdir()
    env = dict(users_env(), TMPDIR=str(root / "tmp"), PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "attnspec", "mutate", "-j", "2", "attention.py", "--out", "../reports"]
    done = run_module([*command, "--", "pytest", "tests/test_shapes.py"], project, env)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # faults survive shapes-only tests
    return root / "reports"


def varying_rows(png: Path) -> int:
    """How many rows of the image (after its first) tell it from an image of one colour.  Filtered as
    PNG filters rows, one colour makes each row its first pixel then zeros (filters 1 and 3), zeros
    (2 and 4), or that pixel repeated (0); any other row shows a change of colour."""
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n"), png
    chunks, at = {}, 8
    while at < len(data):
        (length,), kind = struct.unpack(">I", data[at : at + 4]), data[at + 4 : at + 8]
        chunks[kind] = chunks.get(kind, b"") + data[at + 8 : at + 8 + length]
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert depth == 8 and interlace == 0 and colour in (0, 2, 4, 6), (depth, colour, interlace)
    pixel = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    raw, stride = zlib.decompress(chunks[b"IDAT"]), 1 + width * pixel
    assert len(raw) == height * stride
    varying = 0
    for row in range(1, height):
        kind, line = raw[row * stride], raw[row * stride + 1 : (row + 1) * stride]
        rest = line[pixel:] if kind in (1, 3) else line
        varying += rest != line[:pixel] * width if kind == 0 else rest.count(0) != len(rest)
    return varying


def test_the_page_opens_offline_the_faults_first_then_stryker_s_view_of_the_source(
    chromium, bundled, reports, tmp_path
):
    page = reports / "index.html"
    text = page.read_text(encoding="utf-8")
    assert str(reports.parent) not in text  # no absolute path (the campaign's config has them)
    report = json.loads((reports / "mutation-report.json").read_text(encoding="utf-8"))
    items = [m for entry in report["files"].values() for m in entry["mutants"]]
    shot = tmp_path / "index.png"
    dom = open_page(chromium, page.as_uri() + "#mutant/attention.py", shot, size=SIZE, wait_ms=5000)
    # the component defined itself, took the report, and shows the file the URL names (its title)
    assert f'<body data-ready="{ELEMENT}">' in dom, dom[-3000:]
    assert "<title>attention.py - attnspec mutation report</title>" in dom
    # above it, every fault's row, each survivor (the hostile line shown as text in one's diff),
    # and the tests that killed faults
    assert dom.index("Catalogue faults") < dom.index("Survivors (") < dom.index(f"<{ELEMENT}")
    assert all(f'<tr id="{fault.id}">' in dom for fault in FAULTS)
    assert f"Survivors ({sum(m['status'] == 'Survived' for m in items)})" in dom
    assert "&lt;/script&gt;&lt;!--&lt;script&gt; &lt;/SCRIPT&gt;" in dom
    killers = {test for m in items if m["status"] == "Killed" for test in m.get("killedBy", [])}
    assert killers and all(test in dom for test in killers)
    assert shot.is_file() and varying_rows(shot) > 200, shot


def test_without_the_bundle_the_plain_page_opens_with_the_faults_and_how_to_get_the_rest(
    chromium, reports, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(assets, "bundle", lambda folder=assets.HERE: None)
    page = tmp_path / "index.html"
    page.write_text(html.render(json.loads((reports / "mutation-report.json").read_text())), encoding="utf-8")
    assert assets.FETCH_HINT in capsys.readouterr().err
    shot = tmp_path / "plain.png"
    dom = open_page(chromium, page.as_uri(), shot, size=SIZE, wait_ms=1000)
    assert "<script" not in dom and "data-ready" not in dom
    assert "Catalogue faults" in dom and "python -m attnspec.mutation.reports.assets" in dom
    assert shot.is_file() and varying_rows(shot) > 200, shot
