"""Mutant generators: each gives the engine a campaign's state (history.py's format), switches a
mutant on in a forked child (``activate``), and may record the functions each test calls
(``recording``).  See the package's docstring for the two there are."""
