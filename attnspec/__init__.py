"""attnspec: property-based verification and mutation testing for Transformer attention code.

The kit's packages are ``attnspec.impl`` (the reference implementation), ``attnspec.specs``
(requirements and the float64 oracle) and ``attnspec.properties`` (the properties, and the
target protocol in ``attnspec.properties.targets``); ``attnspec check`` runs the properties
against your own attention code, ``attnspec conventions`` prints the conventions they hold it to,
and ``attnspec.check(target, *properties)`` runs some of the properties from your own tests
(attnspec/api.py).

PYTEST_DONT_REWRITE: attnspec is a pytest plugin's distribution (attnspec/pytest_plugin.py), whose
package pytest marks for assertion rewriting when it starts; `attnspec check` imports it first.
"""

from pathlib import Path

# In an installed wheel the packages sit inside this folder.  In a checkout of the repository
# they keep their top-level folders (impl/, specs/, properties/, ...) beside it: make them
# importable as attnspec.impl, attnspec.specs, ... from there, under one name either way.
_checkout = Path(__file__).parent.parent
_in_checkout = (
    not (Path(__file__).parent / "specs").is_dir() and (_checkout / "specs" / "requirements.toml").is_file()
)
if _in_checkout:
    __path__.append(str(_checkout))


def conventions_path() -> Path:
    """CONVENTIONS.md: the conventions, the target protocol and the tolerance policy.  A checkout
    keeps it at the repository's root; the wheel ships a copy inside this package (setup.py copies it
    as the wheel is built)."""
    return (_checkout if _in_checkout else Path(__file__).parent) / "CONVENTIONS.md"


def conventions() -> str:
    """The text of CONVENTIONS.md (what `attnspec conventions` prints)."""
    return conventions_path().read_text(encoding="utf-8")


def __getattr__(name: str) -> object:
    """``check``, ``PropertyFailed`` and ``NotChecked`` (attnspec/api.py), and ``CannotBuild`` (what a
    layer(spec) raises for a spec it cannot be built with: attnspec.properties.targets), imported when
    first used: ``import attnspec`` alone imports neither torch nor pytest."""
    if name in ("check", "PropertyFailed", "NotChecked"):
        from attnspec import api

        return getattr(api, name)
    if name == "CannotBuild":
        from attnspec.properties.targets import CannotBuild

        return CannotBuild
    raise AttributeError(f"module 'attnspec' has no attribute {name!r}")
