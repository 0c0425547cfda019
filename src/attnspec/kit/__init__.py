"""The kit: the properties a target runs (properties/, each a pytest module naming the requirements it
checks) and what they are made of: the strategies that draw their inputs (strategies.py,
kernel_cases.py), the oracle's values under a target's declaration (references.py), the laws that hold
under it (laws.py, relations.py), the assertions and their wording (asserts.py, conventions.py),
the diagnosis of a failing target (diagnosis.py: the catalogue fault it behaves as if it had;
localisation.py: where the failure lives otherwise; declared_mods.py: a declared mod of its own
code), the target as the kit loads it (loading.py, recording.py, target_checks.py) and the
run's report (run_report.py, reproducers.py)."""
