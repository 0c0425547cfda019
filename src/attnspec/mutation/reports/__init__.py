"""What campaigns write: Stryker JSON (stryker.py) and HTML (html.py), summaries and gates
(summary.py), the kill matrix (matrix.py), JUnit XML (junit.py), GitHub annotations
(annotations.py), and the impl/ campaign's outputs and shard merge (outputs.py)."""
