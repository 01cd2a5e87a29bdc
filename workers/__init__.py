"""Ray tasks and actors that do I/O on data files: compaction workers, index builders, WAL appliers.

Arrive with the compaction, indexing and ingestion issues.
"""
