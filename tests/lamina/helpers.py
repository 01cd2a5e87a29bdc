"""Small data builders shared by the storage tests, and the one store wrapper they disturb storage with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("category", pa.string()),
        ("ts", pa.timestamp("us")),
        ("score", pa.float64()),
        ("vec", pa.list_(pa.float32(), 4)),
        ("meta", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    ]
)


def rows(start: int, n: int, seed: int = 0) -> pa.Table:
    """``n`` rows with ids ``start..start+n``: ints, strings, timestamps, vectors, structs with nulls."""
    rng = np.random.default_rng(seed + start)
    ids = np.arange(start, start + n, dtype=np.int64)
    meta = [None if i % 7 == 0 else {"a": int(i % 100), "b": None if i % 3 == 0 else f"b{i % 5}"} for i in ids.tolist()]
    return pa.table(
        {
            "id": ids,
            "category": pa.array([("a", "b", "c", None)[i % 4] for i in ids.tolist()]),
            "ts": pa.array(np.datetime64("2024-01-01T00:00:00", "us") + ids.astype("timedelta64[s]")),
            "score": rng.random(n),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 4, dtype=np.float32)), 4),
            "meta": pa.array(meta, type=SCHEMA.field("meta").type),
        },
        schema=SCHEMA,
    )


def ids_of(table) -> list[int]:
    return sorted(table.to_arrow(columns=["id"]).column("id").to_pylist())


def compacted_table(uri: str, opts) -> tuple[Any, int]:
    """Deletions in several fragments, one fragment all deleted, then two fragments rewritten into one (the
    replaced files stay under data/ until cleanup) and a delete in the new file. Returns the table and
    the version before the rewrite."""
    import lamina
    from lamina.commit import commit
    from lamina.rewrite import full_rewrite
    from lamina.transaction import Rewrite

    t = lamina.create_table(uri, SCHEMA, storage_options=opts, row_group_rows=300)
    t.append(rows(0, 1000), max_rows_per_file=400)  # fragments of 400, 400, 200 rows
    t.append(rows(1000, 500))
    t.delete("category = 'a' AND id < 700")  # fragments 0 and 1
    t.delete("id BETWEEN 1200 AND 1210 OR id = 1499")  # fragment 3, its last row too
    t.delete("id >= 800 AND id < 1000")  # all of fragment 2: it leaves the version
    before = t.version
    first_two = [f.id for f in t.fragments()][:2]
    commit(t.store, Rewrite(t.version, [full_rewrite(t.store, t.manifest, first_two, t.write_options)]), t.manifest)
    t = t.reload()
    t.delete("id IN (1, 2, 3, 799)")  # in the rewritten file: its first rows, and its last
    return t, before


def in_table_types(table: pa.Table) -> pa.Table:
    """DuckDB gives the fixed-size vector column back as a variable-size list: the table's types again."""
    vec = pa.FixedSizeListArray.from_arrays(pa.concat_arrays([c.flatten() for c in table.column("vec").chunks]), 4)
    return table.set_column(table.schema.get_field_index("vec"), "vec", vec).cast(SCHEMA)


def put_next_version(t, **changes) -> int:
    """Writes the table's next version: its current manifest with ``changes``, properly encoded
    (a valid checksum: only the content lies). Returns the version written."""
    from lamina.manifest import encode_manifest, lay_out, manifest_path, write_segments

    m = t.manifest
    nxt, segments = lay_out(m.replace(version=m.version + 1, **changes))
    write_segments(t.store, segments)
    assert t.store.put_if_absent(manifest_path(nxt.version), encode_manifest(nxt, laid_out=True))
    return nxt.version


def as_format_1(m: Any) -> bytes:
    """Manifest ``m`` as a format-1 root (every fragment in the root, no segments), as Lamina wrote before
    manifest segments: the old tables the readers must still open."""
    import hashlib
    import json
    import os

    from lamina.manifest import encode_manifest
    from lamina.manifest.codec import _canonical

    before = os.environ.get("LAMINA_MANIFEST_INLINE_FRAGMENTS")
    os.environ["LAMINA_MANIFEST_INLINE_FRAGMENTS"] = str(1 << 30)
    try:
        body = json.loads(encode_manifest(m.replace(segments=(), segment_lists=(), fragments=tuple(m.fragments))))
    finally:
        if before is None:
            del os.environ["LAMINA_MANIFEST_INLINE_FRAGMENTS"]
        else:
            os.environ["LAMINA_MANIFEST_INLINE_FRAGMENTS"] = before
    body.pop("checksum")
    body.pop("segments")
    body.pop("fragment_count")
    body["format_version"] = 1
    body["checksum"] = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
    return json.dumps(body, sort_keys=True, indent=1).encode()


class Hook:
    """One rule of a ``HookedStore``: the calls it takes (a method, a path prefix or predicate, a number of
    times) and what it does to each: runs ``before()`` first, replaces the call (``instead(real, *args,
    **kwargs)``), or raises ``fail(path)`` (after the call went through, with ``lands``)."""

    def __init__(
        self,
        method: str,
        when: Callable[[Any], bool],
        times: int | None,
        before: Callable[[], Any] | None,
        instead: Callable[..., Any] | None,
        fail: Callable[[Any], BaseException] | None,
        lands: bool,
    ):
        self.method, self.when, self.times = method, when, times
        self.before, self.instead, self.fail, self.lands = before, instead, fail, lands
        self.fired = 0

    def takes(self, method: str, target: Any) -> bool:
        return method == self.method and (self.times is None or self.fired < self.times) and self.when(target)

    def run(self, real: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        self.fired += 1
        if self.before is not None:
            self.before()
        if self.instead is not None:
            return self.instead(real, *args, **kwargs)
        if self.fail is not None:
            if self.lands:
                real(*args, **kwargs)
            raise self.fail(args[0] if args else None)
        return real(*args, **kwargs)


class HookedStore:
    """The one recording, fault-injecting wrapper of the tests: every call goes through to ``inner`` (an
    ``ObjectStore``, or a boto3 client) and is recorded in ``calls`` as (method, first argument), except
    those a hook added with ``on`` takes. Attributes that are not methods are ``inner``'s own.

        store = HookedStore(t.store).on("put_if_absent", prefix="_versions/", times=1,
                                        fail=lambda path: StorageError(f"connection reset writing {path}"), lands=True)
    """

    def __init__(self, inner: Any):
        self.inner = inner
        self.calls: list[tuple[str, Any]] = []
        self.hooks: list[Hook] = []

    def on(
        self,
        method: str,
        *,
        prefix: str | None = None,
        path: str | None = None,
        when: Callable[[Any], bool] | None = None,
        times: int | None = None,
        before: Callable[[], Any] | None = None,
        instead: Callable[..., Any] | None = None,
        fail: Callable[[Any], BaseException] | None = None,
        lands: bool = False,
    ) -> HookedStore:
        """Adds a hook on the calls of ``method`` whose first argument starts with ``prefix``, is ``path``, or
        satisfies ``when`` (all calls if none is given), at most ``times`` times; earlier hooks take a call first."""

        def matches(target: Any) -> bool:
            return (
                (prefix is None or (isinstance(target, str) and target.startswith(prefix)))
                and (path is None or target == path)
                and (when is None or when(target))
            )

        self.hooks.append(Hook(method, matches, times, before, instead, fail, lands))
        return self

    @property
    def fired(self) -> int:
        """How many calls the hooks took."""
        return sum(h.fired for h in self.hooks)

    def paths(self, method: str, prefix: str = "") -> list[Any]:
        """The first arguments of the recorded calls of ``method`` starting with ``prefix``, in order."""
        return [p for m, p in self.calls if m == method and (not prefix or (isinstance(p, str) and p.startswith(prefix)))]

    def count(self, method: str) -> int:
        return sum(1 for m, _ in self.calls if m == method)

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        if name.startswith("_") or not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            target = args[0] if args else None
            self.calls.append((name, target))
            hook = next((h for h in self.hooks if h.takes(name, target)), None)
            return real(*args, **kwargs) if hook is None else hook.run(real, args, kwargs)

        return call


def BeatenOnce(inner: Any, other: Callable[[], Any]) -> HookedStore:
    """A store whose first manifest put lets ``other()`` run (and commit that version) first, then tries ours."""
    return HookedStore(inner).on("put_if_absent", prefix="_versions/", times=1, before=other)


def delete_every_object(uri: str, opts: dict | None) -> None:
    """What a user does to a table's location behind Lamina's back: ``rm -r``, or an S3 prefix delete."""
    import shutil

    import boto3

    if opts is None:
        shutil.rmtree(uri)
        return
    bucket, prefix = uri[len("s3://") :].split("/", 1)
    s3 = boto3.client(
        "s3",
        endpoint_url=opts["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
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


def bytes_read(store: Any, run: Callable[[], Any]) -> int:
    """Bytes ``store`` read (``lamina.io_stats``) while ``run()`` ran, every cache cleared first."""
    import lamina
    from lamina.cache import clear_caches
    from lamina.store.scheduler import stats_delta

    clear_caches()
    before = lamina.io_stats()
    run()
    return stats_delta(before).get(store.io_domain, {}).get("bytes_read", 0)
