"""attnspec's mutation engine: the documented attention faults injected into code, judged by tests.

One engine (engine.py) joins a mutant generator and a test source:

- ``generators/``: where mutants come from and how one is switched on.
  ``catalogue.py`` holds the documented faults as libcst operators; ``sites.py`` finds their sites
  in any file and swaps a mutant's code into the live function (the user's files never written);
  ``mutmut_operators.py`` has mutmut generate mutants (its operators and the catalogue's) over a
  copy of impl/ and switches them through its trampolines.
- ``suites/``: where tests come from and how they run.  ``pytest_suite.py`` is one warm pytest
  session (impl's suite, the kit's properties, a user's pytest command); ``command.py`` is any
  other test command, one process per run.
- ``reports/``: Stryker JSON and HTML, the summaries and gates, the kill matrix, JUnit XML,
  GitHub annotations, and the merge of a sharded campaign.
- ``history.py``: what results depend on (``--incremental``, ``--since`` reuse and shards);
  ``triage.py``: the survivors accepted as equivalent (a TOML file or a comment in the source).
- ``campaign.py`` and ``worker.py``: a catalogue campaign on any code, from the files to the
  reports; ``watch.py``: the engine's process, its progress line and its clean stop; ``cli.py``:
  ``attnspec mutate``.

The repository's own campaigns (impl/ against its suite, the built-in adapters against the kit)
live in its ``mutants/`` folder and run on this engine.
"""
