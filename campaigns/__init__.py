"""The repository's own campaigns (never shipped): the main job, the catalogue's faults in impl/ graded
by the whole suite (``python -m campaigns run``), the conformance campaigns on the built-in adapters
and their table, the seeds sweep of the zoo (seeds.py), the peers' recipes (peers.py) and the recall
of the catalogue on the corpus (recall.py, corpus/)."""
