"""Task and actor bodies, plain classes first: compaction groups, index-build parts, WAL appliers.

``runtime`` is the one module that talks to Ray (connecting, the bounded submit/wait loop,
named actors); the other modules hold the work a task does, testable without Ray.
"""
