"""Deprecated paths: until 0.1 the kit lived in ``attnspec.properties`` and the docs had white boxes
import ``attnspec.properties.targets``, ``.layouts``, ``.hypothesis_helpers`` and ``.kernel_cases``.
They keep working for one release, each with a DeprecationWarning that names its new path; everything
they held that a declaration or a white box needs is importable from ``attnspec`` itself."""

import warnings


def moved(old: str, new: str) -> None:
    """Warn that module ``old`` is now ``new`` (and its public names are on ``attnspec``)."""
    warnings.warn(
        f"{old} is deprecated and goes in the next release: import from attnspec (e.g. "
        f"`from attnspec import Layer, randomize_`) or from {new}",
        DeprecationWarning,
        stacklevel=3,
    )
