"""Built-in targets for `pytest properties --impl NAME` (see properties/targets.py)."""
