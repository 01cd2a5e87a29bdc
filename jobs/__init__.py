"""Entry points, run as ``python -m jobs.<name>``: demo (the README's main job) today; compact, index, ingest next."""
