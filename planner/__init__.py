"""Pure planning of compaction: which fragments compact together and how (binary copy, hybrid, full rewrite).

Arrives with the compaction-job issue; it reads only manifests (lamina.manifest) and emits plans.
"""
