"""Test sources: each lists its tests, runs one for the clean run (``run_one``, in this process) or
measures its own lines (``clean``, in other processes), and runs a mutant's tests (``run``)."""
