"""The kit: the properties a target runs (properties/, each a pytest module naming the requirements it
checks) and what they are made of: the strategies that draw their inputs (strategies.py,
kernel_cases.py), the oracle's values under a target's declaration (references.py), the laws that hold
under it (laws.py, relations.py), the assertions and their wording (asserts.py, conventions.py,
diagnosis.py), the target as the kit loads it (loading.py, recording.py, target_checks.py) and the
run's report (run_report.py, reproducers.py)."""
