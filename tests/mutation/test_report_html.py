"""index.html (reports/html.py) from a hand-made report, and the component's bundle (reports/assets/):
the faults first, the report inlined so that no source can end its <script> early, no absolute path
and no Python dict in the page, and the plain page where the bundle was never fetched.  The page in
a real browser, from a real campaign: test_report_browser.py."""

from __future__ import annotations

import json
import re

import pytest

from attnspec.mutation.reports import assets, html
from attnspec.mutation.reports.stryker import Mutant, stryker_report
from attnspec.mutation.reports.summary import fault_rows

HOSTILE = "</script><!--<script>alert(1)</script> </SCRIPT >"
SOURCE = f'''def attention(q, k, causal):
    note = "{HOSTILE}"
    if causal:
        return q @ k
    return q
'''
ABSOLUTE = "/home/someone/work/pkg/attn.py"


def mutants() -> list[Mutant]:
    survived = Mutant("attn.attention__F25_1", "pkg/attn.py", "F25", "Survived", (3, 8), (3, 14), "True")
    survived.diff = "--- a/pkg/attn.py\n+++ b/pkg/attn.py\n@@ -3,1 +3,1 @@\n-    if causal:\n+    if True:"
    killed = Mutant("attn.attention__F14_1", "pkg/attn.py", "F14", "Killed", (4, 16), (4, 21), "k @ q")
    killed.killed_by = ["tests/test_attn.py::test_causal[</script>]"]
    return [survived, killed]


def report() -> dict:
    config = {"campaign": "pytest tests", "mode": "pytest", "sources": {"pkg/attn.py": ABSOLUTE}}
    return stryker_report(mutants(), {"pkg/attn.py": SOURCE}, {}, config, {"setup": 0.0})


@pytest.fixture
def with_bundle(monkeypatch):
    monkeypatch.setattr(assets, "bundle", lambda folder=assets.HERE: "window.bundled = 1;")
    monkeypatch.setattr(assets, "license_text", lambda folder=assets.HERE: "Apache License -- 2.0 -->")


@pytest.fixture
def without_bundle(monkeypatch):
    monkeypatch.setattr(assets, "bundle", lambda folder=assets.HERE: None)


def scripts(page: str) -> list[str]:
    """Each <script>'s text as an HTML parser cuts it: up to the first `</script` (any case)."""
    return re.findall(r"<script[^>]*>(.*?)</script", page, re.S | re.I)


def test_the_report_is_inlined_whole_whatever_its_sources_hold(with_bundle):
    page = html.render(report())
    bundle, data, loader = scripts(page)
    assert bundle == "window.bundled = 1;"
    assert "<" not in data  # not even `<!--`, which would change how the rest of the script parses
    inlined = json.loads(data)
    assert inlined["files"]["pkg/attn.py"]["source"] == SOURCE
    assert inlined["files"] == report()["files"]
    assert "mutation-test-report-app" in loader and "document.body.dataset.ready" in loader
    assert page.index("Catalogue faults") < page.index("<mutation-test-report-app")  # the faults first
    assert "Apache License - - 2.0 - ->" in page and "2.0 -->" not in page  # its notice, as a comment


def test_no_absolute_path_and_no_python_dict_in_the_page(with_bundle):
    page = html.render(report())
    assert ABSOLUTE not in page and "/home/" not in page
    assert "{'" not in page and "': '" not in page
    assert json.loads(scripts(page)[1])["config"] == {
        "campaign": "pytest tests",
        "mode": "pytest",
        "sources": "pkg/attn.py",
    }
    assert "files: pkg/attn.py" in page


def test_the_faults_table_names_each_status_the_killers_and_the_survivors_diffs(with_bundle):
    rows = fault_rows(mutants(), {}, present={"F16": "pkg/attn.py:9: if k < w"})
    page = html.render(report(), rows, {m.name: m.diff for m in mutants()})
    row = {fault_id: text for fault_id, text in re.findall(r'<tr id="(F\d+)">(.*?)</tr>', page)}
    assert len(row) == 32
    assert "<td>survived</td>" in row["F25"] and "<td>killed</td>" in row["F14"]
    assert "<td>not recognised</td>" in row["F16"] and "pkg/attn.py:9: if k &lt; w" in row["F16"]
    assert "<td>no site</td>" in row["F1"]
    assert "tests/test_attn.py::test_causal[&lt;/script&gt;]" in row["F14"]  # the killing test
    assert "Survivors (1)" in page and "attn.attention__F25_1 at pkg/attn.py:3" in page
    assert '<span class="add">+    if True:</span>' in page and "+++ b/" not in page  # the campaign's diff
    # without the campaign's rows and diffs: the same statuses and a diff from the report alone
    alone = html.render(report())
    assert "<td>survived</td>" in alone and '<span class="add">+    if True:</span>' in alone


def test_without_the_bundle_the_page_is_the_plain_one_and_says_how_to_get_the_rest(without_bundle, capsys):
    page = html.render(report())
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "python -m attnspec.mutation.reports.assets" in said[0]
    assert "<script" not in page.lower() and "python -m attnspec.mutation.reports.assets" in page
    assert "Catalogue faults" in page and "Survivors (1)" in page and ABSOLUTE not in page


def test_the_bundle_is_checked_against_the_pinned_hash_and_must_be_inlinable(tmp_path):
    with pytest.raises(ValueError, match="not the pinned"):
        assets.unpack(b"not the tarball", tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert assets.inlinable("x = /<!--(?:a)*?-->/; y = '<script>'")
    assert not assets.inlinable("x = '</SCRIPT>'")
    assert not assets.inlinable("x = '<!-- <script>'")  # the tokenizer's double-escaped state
    assert assets.bundle(tmp_path) is None
    (tmp_path / assets.BUNDLE).write_text("x = '<!-- <script>'")
    assert assets.bundle(tmp_path) is None
    installed = assets.bundle()
    assert installed is None or "mutation-test-report-app" in installed
