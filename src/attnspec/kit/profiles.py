"""The Hypothesis profiles the properties run under (quick, default, ci, thorough, and mutation for a
campaign's mutants), registered and the one $HYPOTHESIS_PROFILE names loaded by ``load()``: the kit's conftest
and the repository's tests import it."""

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from attnspec.kit.names import DATABASE_ENV


def _database() -> dict:
    """Where Hypothesis keeps the failing examples it found.  `attnspec check --db PATH` and `pytest
    --attnspec-db PATH` set $ATTNSPEC_DB, to "" without the option: then none is kept, and a check
    writes no .hypothesis/ folder into the user's project.  Unset (this repository's own runs):
    Hypothesis's default, .hypothesis/ where pytest runs."""
    if DATABASE_ENV not in os.environ:
        return {}
    path = os.environ[DATABASE_ENV]
    return {"database": DirectoryBasedExampleDatabase(path) if path else None}


def register() -> None:
    """Register the profiles, with the example database $ATTNSPEC_DB says now."""
    _common = {
        "deadline": None,
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
        **_database(),
    }
    # quick: for an editor or a pre-commit hook (explicit examples and a few drawn ones); default for a
    # day's work; ci and thorough for the runs that are waited for
    settings.register_profile("quick", max_examples=5, **_common)
    settings.register_profile("default", max_examples=25, **_common)
    settings.register_profile("ci", max_examples=150, **_common)
    settings.register_profile("thorough", max_examples=1000, **_common)
    # Under mutmut: the same examples every run, no database, no shrinking: otherwise a campaign is slow
    # and a mutant can flip between killed and timeout.
    settings.register_profile(
        "mutation",
        max_examples=20,
        derandomize=True,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        **{**_common, "database": None},
    )


def load() -> None:
    """Load the profile of this run: mutation under a campaign's mutant, else $HYPOTHESIS_PROFILE's."""
    register()
    if os.environ.get("MUTANT_UNDER_TEST"):
        settings.load_profile("mutation")
    else:
        settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
