"""The names the kit and the runner that drives it share: the environment variables the runner sets
for the kit, the plugins it registers (which the kit's conftest asks for), and what a forked call that
died raises.  They live in the kit, the lower layer: the runner imports them from here."""

# where the kit keeps Hypothesis's failing examples: "" for nowhere (attnspec/kit/profiles.py reads it)
DATABASE_ENV = "ATTNSPEC_DB"
# where `attnspec check` wants a failing property's reproducer written (attnspec/kit/reproducers.py)
FAILURES_ENV = "ATTNSPEC_FAILURES"
SESSION = "attnspec-session"  # the plugin of a run with a target (pytest --attnspec), as registered
ISOLATION = "attnspec-isolation"  # the plugin that runs the properties in workers (runner/parallel.py)


class Died(Exception):
    """A forked call died or hung: how, in words."""
