"""Maintenance job: every table of a catalog compacted, indexed and cleaned as its policy says, in one scheduled run.

    python -m lamina.jobs.maintain ROOT [--config FILE] [--namespace NS] [--table NAME ...] [--max-tables N]
                                 [--max-concurrency N] [--dry-run] [--json] [--storage-option k=v ...]

Parses the options, shows progress and prints the report; the work is
``lamina.maintenance.maintain`` (its flow: docs/ARCHITECTURE.md, "Data flow").
``--dry-run`` prints what each table would get and why, and changes nothing.

Exit status: 0 when every table is fine, 1 when any table (or the catalog's record) failed,
2 for bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lamina.errors import InvalidConfig, LaminaError
from lamina.jobs.cli import Progress, failed, log_to_stderr, storage_options
from lamina.maintenance import maintain
from lamina.planner.maintenance import MaintenancePolicy


def load_policy(config: str | None) -> MaintenancePolicy:
    """The policy of a YAML file (its ``maintenance:`` section, or the top level); the defaults without one."""
    if not config:
        return MaintenancePolicy()
    import yaml

    try:
        with open(config) as f:
            doc: Any = yaml.safe_load(f) or {}
    except OSError as e:
        raise InvalidConfig(f"cannot read config {config}: {e}") from None
    except yaml.YAMLError as e:
        raise InvalidConfig(f"config {config} is not valid YAML: {e}") from None
    if isinstance(doc, dict) and "maintenance" in doc:
        doc = doc["maintenance"] or {}
    try:
        return MaintenancePolicy.from_mapping(doc)
    except InvalidConfig as e:
        raise InvalidConfig(f"config {config}: {e}") from None


def main(argv: list[str] | None = None, prog: str = "python -m lamina.jobs.maintain") -> int:
    ap = argparse.ArgumentParser(
        prog=prog,
        description="Maintain every table of a Lamina catalog: compaction, index "
        "updates, WAL retirement and cleanup, as its policy says.",
    )
    ap.add_argument("root", help="catalog root: a local directory or s3://bucket/prefix")
    ap.add_argument("--config", help="YAML policy file (see configs/maintenance.yaml); defaults without it")
    ap.add_argument("--namespace", help="only the tables of this namespace (and the namespaces in it)")
    ap.add_argument("--table", dest="tables", action="append", metavar="NAME", help="only this table (repeatable)")
    ap.add_argument("--max-tables", type=int, help="at most N tables get actions in this run (the rest: next run)")
    ap.add_argument("--max-concurrency", type=int, help="Ray tasks (compaction groups, index parts) at once")
    ap.add_argument("--dry-run", action="store_true", help="print what each table would get and why; change nothing")
    ap.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE", help="S3 storage option")
    args = ap.parse_args(argv)
    log_to_stderr()
    if args.tables and args.namespace:
        print("error: --table and --namespace are exclusive: tables are named in full (namespace.table)", file=sys.stderr)
        return 2
    try:
        policy = load_policy(args.config)
        report = maintain(
            args.root,
            policy,
            storage_options=storage_options(args.storage_option),
            namespace=args.namespace,
            names=args.tables,
            max_tables=args.max_tables,
            max_concurrency=args.max_concurrency,
            dry_run=args.dry_run,
            progress=Progress("maintaining", "tables", enabled=not args.json),
        )
    except LaminaError as e:
        return failed(e)
    print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else report.describe())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
