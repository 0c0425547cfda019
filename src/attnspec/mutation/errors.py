"""The error a campaign stops with: one message, said to the user instead of a traceback (the
command line prints it and exits 2)."""


class CampaignError(RuntimeError):
    pass


class Interrupted(KeyboardInterrupt):
    """An interrupt once the campaign had begun to write its reports: its message says what the
    reports' folder holds then (the command line prints it and exits 130)."""
