"""Temporary changes to a module for the duration of a block: a tile size, a wrapped function."""

from __future__ import annotations

import contextlib
from collections.abc import Callable


@contextlib.contextmanager
def recorded_calls(module, name: str, record: Callable, **values):
    """Wrap ``module.name`` so that each call appends ``record(*args, **kwargs)`` to the list
    this yields (other attributes of ``module`` set as in module_attributes)."""
    wrapped = getattr(module, name)
    calls: list = []

    def recording(*args, **kwargs):
        calls.append(record(*args, **kwargs))
        return wrapped(*args, **kwargs)

    with module_attributes(module, **{name: recording}, **values):
        yield calls


@contextlib.contextmanager
def module_attributes(module, **values):
    """Set attributes of ``module`` (a tile size, a wrapped function) for the duration of a block."""
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
