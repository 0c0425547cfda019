"""Deprecated: now ``attnspec.protocol.targets`` (see attnspec/properties/__init__.py)."""

from attnspec.kit.loading import current, load  # noqa: F401
from attnspec.properties import moved
from attnspec.protocol.layers import *  # noqa: F403
from attnspec.protocol.targets import *  # noqa: F403

moved(__name__, "attnspec.protocol.targets")
