"""The error a campaign stops with: one message, said to the user instead of a traceback (the
command line prints it and exits 2)."""


class CampaignError(RuntimeError):
    pass
