"""attnspec: property-based verification and mutation testing for Transformer attention code.

The kit's packages are ``attnspec.impl`` (the reference implementation), ``attnspec.specs``
(requirements and the float64 oracle) and ``attnspec.properties`` (the properties, and the
target protocol in ``attnspec.properties.targets``); ``attnspec check`` runs the properties
against your own attention code.
"""

from pathlib import Path

# In an installed wheel the packages sit inside this folder.  In a checkout of the repository
# they keep their top-level folders (impl/, specs/, properties/, ...) beside it: make them
# importable as attnspec.impl, attnspec.specs, ... from there, under one name either way.
_checkout = Path(__file__).parent.parent
if not (Path(__file__).parent / "specs").is_dir() and (_checkout / "specs" / "requirements.toml").is_file():
    __path__.append(str(_checkout))
