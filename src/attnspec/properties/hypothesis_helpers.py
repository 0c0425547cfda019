"""Deprecated: now ``attnspec.kit.strategies`` (see attnspec/properties/__init__.py)."""

from attnspec.kit.strategies import *  # noqa: F403
from attnspec.properties import moved

moved(__name__, "attnspec.kit.strategies")
