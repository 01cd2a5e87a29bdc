"""Pure planning: a manifest and options in, a plan that prints and pickles out; no I/O.

    from lamina.planner import CompactionOptions, plan_compaction
    plan = plan_compaction(table.manifest, CompactionOptions(target_rows_per_fragment=1_000_000))

``plan``/``eligibility``/``options``/``bin_packing``: compaction; ``index``: index builds;
``maintenance``: what each table of a catalog needs.
"""

from lamina.planner.eligibility import BINARY_COPY, FULL_REWRITE, HYBRID
from lamina.planner.options import CompactionOptions
from lamina.planner.plan import CompactionGroup, CompactionPlan, plan_compaction

__all__ = ["CompactionOptions", "CompactionGroup", "CompactionPlan", "plan_compaction", "BINARY_COPY", "HYBRID", "FULL_REWRITE"]
