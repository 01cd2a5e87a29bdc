"""Compaction job: plan, rewrite groups on Ray workers, commit with rebase and retry.

    python -m lamina.jobs.compact URI [--config FILE] [--set key=value ...] [--dry-run] [--json]
                               [--max-concurrency N] [--partial-commit-every N] [--storage-option k=v ...]

Parses the options, shows progress and prints the plan and summary; the work is
``lamina.compaction.compact`` (its pipeline: docs/ARCHITECTURE.md, "Data flow").
``--dry-run`` prints every group with its mode and which row groups are copied and which
re-encoded, and writes nothing.

A failed group is reported and skipped; the others still commit. Exit status: 0 when
every group committed, 1 when some failed, 2 for bad configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lamina.compaction import compact
from lamina.errors import InvalidConfig, LaminaError
from lamina.jobs.cli import Progress, failed, log_to_stderr, storage_options
from lamina.planner import CompactionOptions
from lamina.planner.options import parse_assignment


def load_options(config: str | None, assignments: list[str], **flags: Any) -> CompactionOptions:
    """Options from a YAML file (``compaction:`` section or top level), then --set, then flags."""
    values: dict[str, Any] = {}
    if config:
        import yaml

        try:
            with open(config) as f:
                doc = yaml.safe_load(f) or {}
        except OSError as e:
            raise InvalidConfig(f"cannot read config {config}: {e}") from None
        except yaml.YAMLError as e:
            raise InvalidConfig(f"config {config} is not valid YAML: {e}") from None
        values.update(doc.get("compaction", doc) if isinstance(doc, dict) else {})
    for a in assignments:
        k, v = parse_assignment(a)
        values[k] = v
    values.update({k: v for k, v in flags.items() if v is not None})
    return CompactionOptions.from_mapping(values)


def main(argv: list[str] | None = None, prog: str = "python -m lamina.jobs.compact") -> int:
    ap = argparse.ArgumentParser(prog=prog, description="Compact a Lamina table on Ray.")
    ap.add_argument("uri", help="table location: a local path or s3://bucket/prefix")
    ap.add_argument("--config", help="YAML options file (see configs/compaction.yaml)")
    ap.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE", help="override one option")
    ap.add_argument("--dry-run", action="store_true", help="print the plan (groups, modes, reasons) and write nothing")
    ap.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")
    ap.add_argument("--max-concurrency", type=int, help="groups executed at once")
    ap.add_argument("--partial-commit-every", type=int, help="commit every N finished groups")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE", help="S3 storage option")
    args = ap.parse_args(argv)
    log_to_stderr()
    try:
        options = load_options(
            args.config, args.assignments, max_concurrency=args.max_concurrency, partial_commit_every=args.partial_commit_every
        )
        plan, summary = compact(
            args.uri,
            options,
            storage_options=storage_options(args.storage_option),
            dry_run=args.dry_run,
            progress=Progress("compacting", "groups", enabled=not args.json),
        )
    except LaminaError as e:
        return failed(e)
    if args.json:
        out = summary.to_dict()
        if args.dry_run:
            out["plan"] = plan.to_dict()
        print(json.dumps(out, indent=2, default=str))
    else:
        print(plan.describe())
        if not args.dry_run:
            print(
                f"\n{summary.table}: version {summary.read_version} -> {summary.committed_versions or 'no commit'}; "
                f"fragments {summary.fragments_before} -> {summary.fragments_after}; rows {summary.rows_before:,} -> "
                f"{summary.rows_after:,}; {summary.failed_groups} failed groups; {summary.retries} commit retries; "
                f"{summary.seconds:.1f} s"
            )
            if summary.resampled:
                print(f"clustering boundaries sampled again before planning: {summary.resampled}")
            if summary.clustering is not None:
                keys = ", ".join(
                    f"{c}: depth {k['depth']:.2f}, {k['skipped']:.0%} skipped" for c, k in summary.clustering["keys"].items()
                )
                print(f"clustering after the run: {summary.clustering['runs']} runs; point filters {keys}")
    return 1 if summary.failed_groups else 0


if __name__ == "__main__":
    sys.exit(main())
