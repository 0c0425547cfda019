"""Deprecated: now ``attnspec.protocol.layouts`` (see attnspec/properties/__init__.py)."""

from attnspec.properties import moved
from attnspec.protocol.layouts import *  # noqa: F403

moved(__name__, "attnspec.protocol.layouts")
