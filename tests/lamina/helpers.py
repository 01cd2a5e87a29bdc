"""Small data builders shared by the storage tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("category", pa.string()),
    ("ts", pa.timestamp("us")),
    ("score", pa.float64()),
    ("vec", pa.list_(pa.float32(), 4)),
    ("meta", pa.struct([("a", pa.int32()), ("b", pa.string())])),
])


def rows(start: int, n: int, seed: int = 0) -> pa.Table:
    """``n`` rows with ids ``start..start+n``: ints, strings, timestamps, vectors, structs with nulls."""
    rng = np.random.default_rng(seed + start)
    ids = np.arange(start, start + n, dtype=np.int64)
    meta = [None if i % 7 == 0 else {"a": int(i % 100), "b": None if i % 3 == 0 else f"b{i % 5}"} for i in ids.tolist()]
    return pa.table({
        "id": ids,
        "category": pa.array([("a", "b", "c", None)[i % 4] for i in ids.tolist()]),
        "ts": pa.array(np.datetime64("2024-01-01T00:00:00", "us") + ids.astype("timedelta64[s]")),
        "score": rng.random(n),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 4, dtype=np.float32)), 4),
        "meta": pa.array(meta, type=SCHEMA.field("meta").type),
    }, schema=SCHEMA)


def ids_of(table) -> list[int]:
    return sorted(table.to_arrow(columns=["id"]).column("id").to_pylist())


def put_next_version(t, **changes) -> int:
    """Writes the table's next version: its current manifest with ``changes``, properly encoded
    (a valid checksum: only the content lies). Returns the version written."""
    from lamina.manifest import encode_manifest, lay_out, manifest_path, write_segments

    m = t.manifest
    nxt, segments = lay_out(m.replace(version=m.version + 1, **changes))
    write_segments(t.store, segments)
    assert t.store.put_if_absent(manifest_path(nxt.version), encode_manifest(nxt, laid_out=True))
    return nxt.version


class BeatenOnce:
    """A store whose first manifest put lets ``other()`` run (and commit that version) first, then tries ours."""

    def __init__(self, inner, other):
        self._inner, self._other, self.fired = inner, other, 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def put_if_absent(self, path, data):
        if path.startswith("_versions/") and not self.fired:
            self.fired += 1
            self._other()
        return self._inner.put_if_absent(path, data)


def delete_every_object(uri: str, opts: dict | None) -> None:
    """What a user does to a table's location behind Lamina's back: ``rm -r``, or an S3 prefix delete."""
    import shutil

    import boto3

    if opts is None:
        shutil.rmtree(uri)
        return
    bucket, prefix = uri[len("s3://"):].split("/", 1)
    s3 = boto3.client("s3", endpoint_url=opts["endpoint_url"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])


def hold_catalog_turn(cat) -> int:
    """Takes the host's writer turn of a local catalog, as another writer at work would: the descriptor."""
    import fcntl
    import os

    import lamina.catalog

    fd = os.open(os.path.join(cat.table.store.root, lamina.catalog.LOCK_FILE), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def catalog_queue_files(cat) -> list[str]:
    """The names in a local catalog's request queue (temporary files left out)."""
    import os

    import lamina.catalog

    d = os.path.join(cat.table.store.root, lamina.catalog.QUEUE_DIR)
    return sorted(n for n in os.listdir(d) if not n.startswith(".tmp-")) if os.path.isdir(d) else []


def left_after_drop(uri: str, opts: dict | None) -> list[str]:
    """Every object at ``uri`` but the tombstone a drop leaves there (its latest version, docs/FORMAT.md §9.1)."""
    from lamina.manifest import latest_version, load_manifest, manifest_path
    from lamina.store import open_store

    store = open_store(uri, opts)
    latest = latest_version(store)
    tomb = manifest_path(latest) if latest is not None and load_manifest(store, latest).dropped else None
    return sorted(o.path for o in store.list("") if o.path != tomb)
