"""Pure planning of compaction: which fragments compact together and how, with reasons.

    from planner import CompactionOptions, plan_compaction
    plan = plan_compaction(table.manifest, CompactionOptions(target_rows_per_fragment=1_000_000))
"""

from planner.eligibility import BINARY_COPY, FULL_REWRITE, HYBRID
from planner.options import CompactionOptions
from planner.plan import CompactionGroup, CompactionPlan, plan_compaction

__all__ = ["CompactionOptions", "CompactionGroup", "CompactionPlan", "plan_compaction", "BINARY_COPY", "HYBRID", "FULL_REWRITE"]
