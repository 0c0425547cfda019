"""The specification's own tests: the oracle against hand-worked cases, mods, the tolerance policy."""
