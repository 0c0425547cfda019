"""The properties a target runs: ``attnspec check`` and ``pytest --attnspec`` collect this folder, its
conftest.py wires them (profiles, the target, capabilities, the failures handed back)."""
