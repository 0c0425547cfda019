"""The runner: ``attnspec check`` (its worker processes, parallel.py and forking.py; its progress,
progress.py; ``--watch``, watching.py), ``pytest --attnspec`` (pytest_plugin.py) and
``attnspec.check()`` from a user's tests (api.py)."""
