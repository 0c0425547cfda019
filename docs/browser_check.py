"""The built site, as a reader's browser shows it: ``python docs/browser_check.py SITE_DIR [OUT_DIR]``.

Serves the site built by ``mkdocs build`` on localhost and opens pages in headless Chromium: each page's
rendered DOM must hold its title, the navigation and the text it promises (a generated reference page
its table), and a screenshot of each is written to OUT_DIR (default: reports/docs/) to look at.
Exit 0 when every page renders, 1 when one does not.  Without Chromium it says NOT RUN and exits 0,
or 1 where ATTNSPEC_REQUIRE_BROWSER=1 (CI sets it: .ci/run installs Chromium).
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# page -> what its rendered DOM must hold (the theme's navigation, the page's own text)
PAGES = {
    "": ("Check an attention function", "Grade your tests", "attnspec check TARGET"),
    "reference/requirements/": ("Requirements", "MASK-1", "A sliding window W lets the query"),
    "reference/faults/": ("Fault catalogue", "F25", "Idioms it recognises"),
    "tutorials/check-a-function/": ("Check an attention function", "Write the target", "Break it"),
}
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def serve(site: Path) -> tuple[http.server.HTTPServer, str]:
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def open_page(chromium: str, url: str, screenshot: Path, size: str = "1280,1000", wait_ms: int = 0) -> str:
    """The page's DOM once rendered (after ``wait_ms`` of virtual time, where given), and its screenshot
    of the window ``size`` (also what tests/mutation/test_report_browser.py opens index.html with)."""
    with tempfile.TemporaryDirectory(prefix="attnspec-chromium-") as profile:
        common = [chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size}"]
        common += [f"--virtual-time-budget={wait_ms}"] if wait_ms else []
        shot = [*common, f"--screenshot={screenshot}", url]
        subprocess.run(shot, capture_output=True, timeout=120, check=True)
        dump = [*common, "--dump-dom", url]
        dom = subprocess.run(dump, capture_output=True, text=True, timeout=120, check=True)
    return dom.stdout


def check(site: Path, out: Path) -> list[str]:
    """The problems found, one line each."""
    chromium = browser()
    if chromium is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    server, root = serve(site)
    problems = []
    try:
        for page, expected in PAGES.items():
            name = (page.strip("/").replace("/", "-") or "home") + ".png"
            dom = open_page(chromium, root + page, out / name)
            missing = [text for text in expected if text not in dom]
            if missing:
                problems.append(f"/{page}: the rendered page lacks {missing}")
            if not (out / name).is_file() or (out / name).stat().st_size < 10_000:
                problems.append(f"/{page}: no screenshot, or a blank one ({out / name})")
            else:
                print(f"rendered /{page}: {out / name}")
    finally:
        server.shutdown()
    return problems


def main(argv: list[str]) -> int:
    if not argv or not (Path(argv[0]) / "index.html").is_file():
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    if browser() is None:
        required = os.environ.get("ATTNSPEC_REQUIRE_BROWSER") == "1"
        print(f"browser check NOT RUN: no Chromium on this machine ({', '.join(BROWSERS)})", file=sys.stderr)
        return 1 if required else 0
    problems = check(Path(argv[0]), Path(argv[1]) if len(argv) > 1 else Path("reports") / "docs")
    for problem in problems:
        print(f"browser check: {problem}", file=sys.stderr)
    print("browser check:", "FAILED" if problems else f"every page rendered ({len(PAGES)} pages)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
