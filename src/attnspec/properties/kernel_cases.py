"""Deprecated: now ``attnspec.kit.kernel_cases`` (see attnspec/properties/__init__.py)."""

from attnspec.kit.kernel_cases import *  # noqa: F403
from attnspec.properties import moved

moved(__name__, "attnspec.kit.kernel_cases")
