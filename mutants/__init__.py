"""attnspec's mutation testing: the fault catalogue (F1..F27) as mutmut operators, the campaign
runner (`python -m mutants run`) and the report (reports/mutation-report.json, Stryker schema)."""
