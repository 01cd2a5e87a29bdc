"""Real processes racing merges, deletes, compactions, WAL flushes and schema changes on one table:
replaying every committed op in version order on a model gives the table's rows at every version:
no row lost, doubled or brought back, whatever schema each write was made in.

Each process (``tests.lamina.changing_writer``) prints the ops it committed with the version each read
and made. The model replays them in commit order: a merge upserts its keys, a WAL flush inserts, a delete
removes the keys in its range that the version it read held (a delete's filter is evaluated on the version
it read: docs/FORMAT.md §8), compactions and schema changes change no row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import lamina
from tests.lamina.changing_writer import SHARED_KEYS

REPO = Path(__file__).resolve().parents[2]
ROLES = [("merge", 0), ("merge", 1), ("delete", 2), ("wal", 3), ("compact", 4), ("alter", 5)]
OPS = 10


def _race(uri: str) -> list[dict]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.lamina.changing_writer", uri, role, str(w), str(OPS), str(100 + w)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
        )
        for role, w in ROLES
    ]
    records = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        records += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return records


def test_merges_deletes_compactions_wal_flushes_and_schema_changes_race_without_losing_a_row(local_table_uri):
    t = lamina.create_table(local_table_uri, pa.schema([("key", pa.int64()), ("val", pa.int64())]))
    for start in range(0, SHARED_KEYS, 50):
        t.append(pa.table({"key": pa.array(range(start, start + 50), pa.int64()), "val": pa.array([-1] * 50, pa.int64())}))
    t.create_index("key", "btree")
    seeded = t.version
    records = _race(local_table_uri)
    committed = sorted((r for r in records if "version" in r), key=lambda r: r["version"])
    versions = [r["version"] for r in committed]
    assert len(versions) == len(set(versions)), "two ops claimed one version"
    latest = lamina.open_table(local_table_uri)
    assert versions == list(range(seeded + 1, latest.version + 1)), "a version has no op (or an op no version)"
    assert {r["op"] for r in committed} == {"merge", "delete", "wal", "compact", "alter"}, "every kind of op must land"

    model = {k: -1 for k in range(SHARED_KEYS)}
    snapshots = {seeded: dict(model)}
    for r in committed:
        if r["op"] in ("merge", "wal"):
            model.update(zip(r["keys"], r["vals"]))
        elif r["op"] == "delete":
            seen = snapshots[r["read"]]
            for k in range(r["lo"], r["hi"]):
                if k in seen:
                    model.pop(k, None)
        snapshots[r["version"]] = dict(model)

    for version, expected in snapshots.items():
        view = latest.checkout(version)
        got = view.to_arrow(columns=["key", "val"])
        keys = got.column("key").to_pylist()
        assert len(keys) == len(set(keys)), f"version {version}: a row is there twice"
        assert dict(zip(keys, got.column("val").to_pylist())) == expected, f"version {version}"
    for flt in ("key < 100", "key >= 10000"):
        assert latest.to_arrow(filter=flt).equals(latest.to_arrow(filter=flt, use_index=False))
