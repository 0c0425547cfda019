"""The package's metadata is pyproject.toml's; this file adds one build step: index.html's source view
(Stryker's mutation-testing-elements bundle, pinned and checked in
src/attnspec/mutation/reports/assets/__init__.py) fetched into the package before its files are
collected, for a wheel and for an editable install alike.  Offline, the build goes on without it
and the campaigns write a plain index.html that says how to fetch it.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ASSETS = Path(__file__).resolve().parent / "src" / "attnspec" / "mutation" / "reports" / "assets"


def report_assets():
    """The assets module, loaded by its path: the build's environment has none of attnspec's dependencies."""
    spec = importlib.util.spec_from_file_location("attnspec_report_assets", ASSETS / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithReportAssets(build_py):
    def run(self):
        assets = report_assets()
        try:
            assets.fetch(ASSETS)
        except (OSError, ValueError) as error:
            self.warn(f"index.html's source view not bundled ({error}); later: {assets.FETCH_HINT}")
        self.__dict__.pop("data_files", None)  # the package data listed again, the bundle in it
        super().run()


setup(cmdclass={"build_py": BuildPyWithReportAssets})
