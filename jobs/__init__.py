"""Command lines: ``python -m lamina.jobs.<name>`` or ``lamina <name>`` (compact, index, ingest, maintain, verify, demo).

Each parses its arguments, calls the library, shows progress and prints; ``cli`` holds what they share.
"""
