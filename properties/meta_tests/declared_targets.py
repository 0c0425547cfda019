"""Correct targets that follow a neighbouring convention on purpose and declare it: the broken copies
of broken_targets.py that are neighbours, not bugs, with their ``conventions``.  Declared, each passes
the whole kit (test_declared.py); undeclared, each fails it and is named (test_conformance.py)."""

from __future__ import annotations

from dataclasses import replace

from attnspec.properties.meta_tests import broken_targets

INCLUSIVE_WINDOW = replace(broken_targets.INCLUSIVE_WINDOW, conventions=frozenset({"window-inclusive"}))
# top-left alignment leaves no query without a key, so it takes no "blind" cases
TOP_LEFT = replace(
    broken_targets.TOP_LEFT,
    capabilities=broken_targets.TOP_LEFT.capabilities - {"blind"},
    conventions=frozenset({"top-left"}),
)
INTERLEAVED_ROPE = replace(broken_targets.INTERLEAVED_ROPE, conventions=frozenset({"rope-interleaved"}))
