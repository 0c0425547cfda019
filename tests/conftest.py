"""The repository's own tests: the kit's Hypothesis profiles and the fixtures the properties take
(attnspec/kit/fixtures.py), for impl's own tests (tests/impl/) when they run without the kit's
properties.  impl's tests check impl: with another --impl they are not collected."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from attnspec.kit import fixtures, profiles
from attnspec.kit.fixtures import kit_option, parametrize_paths

profiles.load()
# the fixtures the properties take (attnspec/kit/fixtures.py)
attention_path, device, tiled_path_taken = fixtures.attention_path, fixtures.device, fixtures.tiled_path_taken
IMPL_TESTS = Path(__file__).parent / "impl"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path == IMPL_TESTS and kit_option(config, "--impl") != "impl":
        return True
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_paths(metafunc)


@pytest.fixture(scope="session")
def stryker_schema(tmp_path_factory) -> dict:
    """Stryker's published JSON schema, fetched from the npm registry (not vendored: it is
    another project's file).  Skipped, with the reason, where npm or the registry is missing."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the hand check of the schema's required parts still ran")
    where = tmp_path_factory.mktemp("schema")
    packed = subprocess.run(
        [npm, "pack", "mutation-testing-report-schema@3", "--silent"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if packed.returncode != 0:
        pytest.skip(f"npm could not fetch mutation-testing-report-schema: {packed.stderr.strip()[:200]}")
    subprocess.run(["tar", "xzf", packed.stdout.strip().splitlines()[-1]], cwd=where, check=True)
    return json.loads((where / "package" / "src" / "mutation-testing-report-schema.json").read_text())
