"""Command-line pieces shared by the jobs, and the ``lamina`` console script that dispatches to them.

lamina compact|index|ingest|maintain|verify|files|upgrade|demo ARGS...   ==   python -m lamina.jobs.<command> ARGS...
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from typing import Any

from lamina.errors import InvalidArgument, InvalidConfig, LaminaError


def log_to_stderr() -> None:
    """Timestamped log lines on stderr (progress of long runs); stdout is kept for results."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)


def failed(error: LaminaError) -> int:
    """Prints a job's error; returns its exit status: 2 for bad arguments or configuration, else 1."""
    print(f"error: {error}", file=sys.stderr)
    return 2 if isinstance(error, InvalidArgument) else 1


def storage_options(items: list[str]) -> dict[str, Any] | None:
    """``--storage-option key=value`` flags as a dict (None when there are none)."""
    if not items:
        return None
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise InvalidConfig(f"--storage-option {item!r}: expected key=value")
        out[k.strip()] = v.strip()
    return out


class Progress:
    """``progress(done, total)`` for the library's long calls: a bar on a terminal, else a log line
    every ``interval`` seconds (and at the end). ``enabled=False`` shows nothing."""

    def __init__(self, what: str, unit: str, enabled: bool = True, interval: float = 10.0):
        self.what, self.unit, self.enabled, self.interval = what, unit, enabled, interval
        self.tty = enabled and sys.stderr.isatty()
        self.started = self.last = time.perf_counter()
        self.log = logging.getLogger(f"lamina.{what.split()[0]}")

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        elapsed = now - self.started
        if self.tty:
            width = 30
            filled = int(width * done / max(1, total))
            sys.stderr.write(f"\r{self.what} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {self.unit} {elapsed:5.1f}s")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif now - self.last >= self.interval or done == total:
            self.last = now
            self.log.info("%s: %d/%d %s done, %.1f s", self.what, done, total, self.unit, elapsed)


#: ``lamina <command>``: the job module each command runs (its ``main(argv, prog)``).
COMMANDS = {
    "compact": "compact a table on Ray (plan, rewrite groups, commit)",
    "index": "build or update a btree, bitmap or full-text index on Ray",
    "ingest": "apply a table's WAL with Ray actors",
    "verify": "check every file of a table version against its manifest",
    "files": "list a table version's data files and the rows of each it holds (for other engines)",
    "upgrade": "convert a table's latest version to the current manifest format",
    "maintain": "compact, index and clean every table of a catalog as its policy says (scheduled)",
    "demo": "the README's main job: a local table filled by Ray tasks, then compacted",
}


def main(argv: list[str] | None = None) -> int:
    """The ``lamina`` console script: ``lamina <command> ARGS`` runs ``python -m lamina.jobs.<command> ARGS``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        usage = "usage: lamina <command> [ARGS...]   (lamina <command> --help for its flags)\n\ncommands:\n" + "\n".join(
            f"  {name:{width}s}  {what}" for name, what in COMMANDS.items()
        )
        if args and args[0] not in ("-h", "--help"):
            print(f"lamina: unknown command {args[0]!r}\n\n{usage}", file=sys.stderr)
            return 2
        print(usage, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    job = importlib.import_module(f"lamina.jobs.{args[0]}")
    return job.main(args[1:], prog=f"lamina {args[0]}")


if __name__ == "__main__":
    sys.exit(main())
