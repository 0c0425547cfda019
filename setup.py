"""The one build step pyproject.toml cannot say: CONVENTIONS.md, which `attnspec conventions` prints and the
kit's messages point to, lives at the repository's root for its readers and is copied into the wheel's
attnspec package as it is built (a real file there, never a link)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithConventions(build_py):
    def run(self) -> None:
        super().run()
        package = Path(self.build_lib) / "attnspec"
        package.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "CONVENTIONS.md", package / "CONVENTIONS.md")


setup(cmdclass={"build_py": BuildWithConventions})
