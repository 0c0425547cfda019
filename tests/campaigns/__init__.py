"""The repository's campaigns: the main job's machinery, incremental runs and shards, the conformance
campaigns and table, the recall of the catalogue on the corpus."""
