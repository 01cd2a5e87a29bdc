"""Merge, update and schema changes against pylance and delta-rs on the same rows (issue 34 item 6).

    .venv/bin/python -m benchmarks.evolution [--rows 10000000] [--fragment-rows 1000000] [--source-rows 100000]
                                             [--runs 3] [--fragments 100000] [--peer-fragments N] [--check-keys 1000]
                                             [--only merge|update|schema ...] [--smoke] [--profile] [--json]

The table: ``--rows`` N rows (default 10,000,000) written as ``ceil(N / --fragment-rows)`` appends of about
1,000,000 rows each (one fragment, file or data file each: a realistic layout). Columns: ``id`` int64, 0..N-1 in
append order (an auto-increment key: each fragment holds one range of ids); ``qty`` int64 uniform 0..99; ``price``
float64 uniform [0, 100); ``value`` float64 uniform [0, 1); ``tag`` a 9-character string, one of 1,000. Every
contender is built from the same Arrow tables (not timed) with its defaults (Lamina zstd, pylance its v2 files,
deltalake snappy); "btree" contenders are a copy of the plain table with an index on ``id`` (Lamina
``create_index("id", "btree")``, pylance ``create_scalar_index("id", "BTREE")``). deltalake has no index.

Operations, each run on a fresh copy of the built table (``shutil.copytree``, then ``os.sync`` so that the
copy's write-back does not run during the clock; not timed) and timed from the opened table
(``lamina.open_table`` / ``lance.dataset`` / ``DeltaTable``, not timed: the same for all) to the commit; median
of ``--runs`` (3), contenders interleaved, the order rotating each run (a busy spell of the shared machine
slows all alike; the load average is printed at the start and the end). Bytes written: the sizes of the
files the operation added or changed in the table's directory; data files: those of them that hold rows
(Lamina and pylance ``data/``, delta ``*.parquet``).

  merge    a source of ``--source-rows`` (100,000) rows in random order: half the keys drawn from the table's
           (matched), half new (N, N+1, ...), every column with values the table does not hold.
             Lamina   ``t.merge(source, on="id").when_matched_update().when_not_matched_insert().execute()``
                      (``lamina.merge``), with the btree on ``id`` and without
             pylance  ``ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
                      .execute(source)``, with the BTREE scalar index on ``id`` and without
             delta    ``dt.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
                      .when_matched_update_all().when_not_matched_insert_all().execute()``
           Checked for every contender after every run: the inserted and updated counts it reports, N + new
           keys rows, every id once, and ``--check-keys`` (1,000) matched and as many inserted keys (random)
           hold the source's row, every column.
  update   ``value = value * 1.1`` where ``id % 100 = 7`` (1 % of the rows, spread over every fragment), on
           the btree tables (delta: its only table).
             Lamina   ``t.update(filter, expressions={"value": "value * 1.1"})``; Lamina's filter grammar has
                      no ``%``, so ``filter`` is the Arrow expression ``id - id / 100 * 100 == 7`` (integer
                      division: the same rows for ids >= 0), unless ``lamina.filter`` parses ``id % 100 = 7``
             pylance  ``ds.update({"value": "value * 1.1"}, where="id % 100 = 7")``
             delta    ``dt.update(updates={"value": "value * 1.1"}, predicate="id % 100 = 7")``
           Checked: the count each reports, N rows, and ``--check-keys`` updated and as many other rows (every
           column: updated ``value`` = the generated one x 1.1, the rest as generated).
  schema   add a column (all NULL: no data to write), rename ``qty`` to ``quantity``, drop ``tag``, and on the
           many-fragment table widen ``small`` from int32 to int64 (a column with a value in every fragment), one
           after the other on a fresh copy per run, each timed alone on the table handle the previous one left:
             Lamina   ``add_columns(pa.field("extra", pa.float64()))``, ``rename_column("qty", "quantity")``,
                      ``drop_columns(["tag"])``, ``alter_column("small", pa.int64())``; each must be one commit
                      (the version it returns is the one before + 1); after each run the table is checked: its
                      schema, its row count, and 100 rows read back (``quantity`` as written, ``extra`` NULL,
                      ``small`` as written). Found at run time: a method this checkout lacks prints n/a
             pylance  ``add_columns(pa.field("extra", pa.float64()))``, ``alter_columns({"path": "qty", "name":
                      "quantity"})``, ``drop_columns(["tag"])``, ``alter_columns({"path": "small", "data_type":
                      pa.int64()})``; on the main table also ``add_columns({"qty2": "qty * 2"})``, which writes a
                      data file per fragment (for scale). An operation that writes data files (this one and the
                      type change, which rewrites every fragment) runs in the first run only
             delta    ``alter.add_columns(Field("extra", "double"))``; deltalake 1.6 has no drop, rename or type
                      change of a column in its Python API (n/a)
           on the main table (N / 1M fragments; not built with ``--only schema``) and on tables of
           ``--fragments`` (100,000; the peers' ``--peer-fragments``, the same by default) fragments of one row
           each (0: not built), columns as above plus ``small`` int32: Lamina ``append(max_rows_per_file=1)``,
           pylance ``write_dataset(max_rows_per_file=1)``; delta one file written by ``write_deltalake``, the
           others hard links to copies of it under new names, committed as one append of add actions
           (``create_write_transaction``) and checkpointed. Per-run copies of these are hard links (no format
           changes a file it wrote: Lamina and pylance replace by rename). Timed on the opened table (open time
           printed), with the process's CPU time beside it (the rest is waiting: on a shared disk, mostly the
           commit's fsyncs). Written: the bytes of files added or changed (size, inode or mtime) under the
           table's directory, and of them those in data files: the target wants 0.

Targets (issue 34): merge with a key index <= 0.5x pylance's merge_insert (the faster of its two runs: with
and without its index) and <= 0.5x deltalake's merge; update of 1 % <= pylance's update; add, drop and rename
of a column <= 20 ms at 100,000 fragments with no data file written (the widening held to the same bound; a
verdict only at >= 100,000 fragments), with Lamina / peer ratios at the most fragments of the run beneath for
reference. Reference rows without a verdict: Lamina's merge against pylance's like for like (both with an
index, both without).

``--profile``: Lamina's merge (btree) and update once more each on a fresh copy under cProfile, the top
entries printed; the merge's key lookup also alone (the merge's join runs it on Arrow's threads, which
cProfile does not see); and each schema change on a fresh copy of the many-fragment table. Lamina's merge and
update are found at run time: a checkout without ``Table.merge`` / ``Table.update`` prints n/a for them (to run
another checkout's, put it first on ``PYTHONPATH``).

``--only schema`` (repeatable, with ``merge`` and ``update``): that part alone. ``--smoke``: every part small
(200,000 rows, 1,000 fragments, one run: about 10 s) to check the script. Default size: 10,000,000 rows and
100,000 fragments; about 6 minutes on the 2-core machine (most of it building, copying and checking tables;
Lamina writes the 100,000-fragment table in ~18 s, pylance in ~30 s, and pylance's type change rewrites its
100,000 files in 40-60 s). Temp dirs are removed at the end, also after a failure.
"""

from __future__ import annotations

import abc
import argparse
import cProfile
import inspect
import io
import json
import math
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lamina
from lamina.errors import InvalidFilter
from lamina.filter import parse_filter

SCHEMA = pa.schema(
    [("id", pa.int64()), ("qty", pa.int64()), ("price", pa.float64()), ("value", pa.float64()), ("tag", pa.string())]
)
UPDATE_SQL = "id % 100 = 7"
UPDATE_EXPR = "value * 1.1"
#: ``id % 100 = 7`` for ids >= 0 in Arrow's terms (integer division truncates): Lamina's filter has no ``%``.
UPDATE_ARROW = pc.field("id") - pc.field("id") / 100 * 100 == 7
MERGE = ("lamina/btree", "lamina", "pylance/btree", "pylance", "deltalake")
UPDATE = ("lamina/btree", "pylance/btree", "deltalake")
MiB = 1 << 20


# -- data ------------------------------------------------------------------------------------------------
class Scene:
    """The table's rows (kept: the checks compare with them), the merge source and the keys checked."""

    def __init__(self, rows: int, fragment_rows: int, source_rows: int, check_keys: int, seed: int):
        rng = np.random.default_rng(seed)
        self.rows, self.fragments = rows, max(1, math.ceil(rows / fragment_rows))
        tags = pa.array([f"tag-{i:05d}" for i in range(1000)], pa.string())
        cuts = np.linspace(0, rows, self.fragments + 1).astype(np.int64)
        self.data = [
            pa.table(
                {
                    "id": np.arange(lo, hi, dtype=np.int64),
                    "qty": rng.integers(0, 100, hi - lo, dtype=np.int64),
                    "price": rng.random(hi - lo) * 100,
                    "value": rng.random(hi - lo),
                    "tag": tags.take(pa.array(rng.integers(0, 1000, hi - lo))),
                },
                schema=SCHEMA,
            )
            for lo, hi in zip(cuts[:-1], cuts[1:])
        ]
        self.table = pa.concat_tables(self.data)  # row i holds id i
        self.matched = rng.choice(rows, min(source_rows // 2, rows), replace=False).astype(np.int64)
        self.new = np.arange(rows, rows + source_rows - len(self.matched), dtype=np.int64)
        ids = np.concatenate([self.matched, self.new])
        rng.shuffle(ids)
        n = len(ids)
        self.source = pa.table(
            {
                "id": ids,
                "qty": rng.integers(1000, 2000, n, dtype=np.int64),
                "price": rng.random(n) * 100 + 100,
                "value": rng.random(n) + 10,
                "tag": pa.array([f"src-{i:06d}" for i in range(n)], pa.string()),
            },
            schema=SCHEMA,
        )
        k = min(check_keys, len(self.matched))
        self.check_matched = np.sort(rng.choice(self.matched, k, replace=False))
        self.check_new = np.sort(rng.choice(self.new, min(check_keys, len(self.new)), replace=False))
        hits = np.arange(7, rows, 100, dtype=np.int64)
        self.updated_rows = len(hits)
        self.check_updated = np.sort(rng.choice(hits, min(check_keys, len(hits)), replace=False))
        self.check_other = np.sort(rng.choice(rows, min(check_keys, rows), replace=False))
        self.check_other = self.check_other[self.check_other % 100 != 7]

    def source_rows(self, ids: np.ndarray) -> pa.Table:
        return self.source.filter(pc.is_in(self.source["id"], pa.array(ids))).sort_by("id")

    def updated(self, ids: np.ndarray) -> pa.Table:
        """The generated rows ``ids`` as the update leaves them."""
        rows = self.table.take(pa.array(ids))
        hit = pc.equal(pc.subtract(rows["id"], pc.multiply(pc.divide(rows["id"], 100), 100)), 7)
        value = pc.if_else(hit, pc.multiply(rows["value"], 1.1), rows["value"])
        return rows.set_column(SCHEMA.get_field_index("value"), SCHEMA.field("value"), value)


# -- files -----------------------------------------------------------------------------------------------
class Stat(NamedTuple):
    size: int
    inode: int
    mtime_ns: int


class Written(NamedTuple):
    """What an operation wrote in a table's directory: files added or changed (a file replaced by a rename is
    a new inode), and those of them that hold rows."""

    bytes: int
    data_bytes: int
    data_files: int


def listing(path: str) -> dict[str, Stat]:
    """Every file under ``path`` (relative): its size, inode and mtime."""
    out: dict[str, Stat] = {}
    stack = [path]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                else:
                    st = e.stat(follow_symlinks=False)
                    out[os.path.relpath(e.path, path)] = Stat(st.st_size, st.st_ino, st.st_mtime_ns)
    return out


def written(before: dict[str, Stat], after: dict[str, Stat], is_data: Callable[[str], bool]) -> Written:
    """Bytes of the files added or changed, and of those that hold rows."""
    new = {p: st.size for p, st in after.items() if before.get(p) != st}
    data = [n for p, n in new.items() if is_data(p)]
    return Written(sum(new.values()), sum(data), len(data))


def fresh_copy(src: str, dst: str, link: bool = False) -> None:
    """A copy of the table at ``src`` (``link``: hard links), on disk before the clock starts: the kernel's
    write-back of the copy would otherwise compete with the timed operation (and with its fsyncs)."""
    shutil.copytree(src, dst, copy_function=os.link if link else shutil.copy2)
    os.sync()


# -- contenders ------------------------------------------------------------------------------------------
class Contender(abc.ABC):
    """One format with or without a key index: its built table, and how it merges, updates and reads back."""

    label = ""

    def __init__(self, name: str, base: str):
        self.name, self.base = name, base
        self.why = ""  # not empty: not available in this run, and why

    @abc.abstractmethod
    def build(self, scene: Scene, plain: str | None) -> None:
        """Writes the table at ``self.base`` (from ``plain``, a copy of the same format without the index, if given)."""

    @abc.abstractmethod
    def open(self, path: str) -> Any: ...

    @abc.abstractmethod
    def merge(self, handle: Any, source: pa.Table) -> tuple[int, int]:
        """Runs the merge; returns (inserted, updated) as the format reports them."""

    @abc.abstractmethod
    def update(self, handle: Any) -> int:
        """Runs the update; returns the rows updated as the format reports them."""

    @abc.abstractmethod
    def count(self, path: str) -> int: ...

    @abc.abstractmethod
    def read(self, path: str, columns: list[str] | None = None, ids: np.ndarray | None = None) -> pa.Table:
        """``columns`` of the rows (with ``ids``: those rows, by id), in the table's types."""

    def is_data(self, rel: str) -> bool:
        return rel.startswith("data" + os.sep)


class LaminaContender(Contender):
    def __init__(self, name: str, base: str, index: bool):
        super().__init__(name, base)
        self.index = index
        if not hasattr(lamina.Table, "merge") or not hasattr(lamina.Table, "update"):
            self.why = f"n/a (this checkout's lamina.Table has no merge/update: {os.path.dirname(lamina.__file__)})"
        self.filter: str | pc.Expression = UPDATE_ARROW
        try:
            parse_filter(UPDATE_SQL, SCHEMA)
            self.filter = UPDATE_SQL
        except InvalidFilter:  # no %: the Arrow expression of the same rows
            pass
        update = getattr(lamina.Table, "update", None)
        self.expressions = update is not None and "expressions" in inspect.signature(update).parameters

    def build(self, scene: Scene, plain: str | None) -> None:
        if plain is not None:
            shutil.copytree(plain, self.base)
            t = lamina.open_table(self.base)
        else:
            t = lamina.create_table(self.base, SCHEMA)
            for d in scene.data:
                t.append(d)
        if self.index:
            t.create_index("id", "btree")

    def open(self, path: str) -> Any:
        return lamina.open_table(path)

    def merge(self, handle: Any, source: pa.Table) -> tuple[int, int]:
        r = handle.merge(source, on="id").when_matched_update().when_not_matched_insert().execute()
        return r.inserted, r.updated

    def update(self, handle: Any) -> int:
        if self.expressions:
            return int(handle.update(self.filter, expressions={"value": UPDATE_EXPR}))
        raise RuntimeError("lamina.Table.update takes no expressions= in this checkout")

    def count(self, path: str) -> int:
        return lamina.open_table(path).count_rows()

    def read(self, path: str, columns: list[str] | None = None, ids: np.ndarray | None = None) -> pa.Table:
        flt = None if ids is None else pc.field("id").isin(pa.array(ids))
        return lamina.open_table(path).to_arrow(columns=columns, filter=flt)


class LanceContender(Contender):
    def __init__(self, name: str, base: str, index: bool):
        super().__init__(name, base)
        self.index = index
        try:
            import lance

            self.lance: Any = lance
        except ImportError:
            self.why = "n/a (pylance not installed: pip install .[bench])"

    def build(self, scene: Scene, plain: str | None) -> None:
        if plain is not None:
            shutil.copytree(plain, self.base)
        else:
            for i, d in enumerate(scene.data):
                self.lance.write_dataset(d, self.base, mode="create" if i == 0 else "append")
        if self.index:
            self.lance.dataset(self.base).create_scalar_index("id", "BTREE")

    def open(self, path: str) -> Any:
        return self.lance.dataset(path)

    def merge(self, handle: Any, source: pa.Table) -> tuple[int, int]:
        r = handle.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
        return r["num_inserted_rows"], r["num_updated_rows"]

    def update(self, handle: Any) -> int:
        return int(handle.update({"value": UPDATE_EXPR}, where=UPDATE_SQL)["num_rows_updated"])

    def count(self, path: str) -> int:
        return self.lance.dataset(path).count_rows()

    def read(self, path: str, columns: list[str] | None = None, ids: np.ndarray | None = None) -> pa.Table:
        flt = None if ids is None else pc.field("id").isin(pa.array(ids))
        return self.lance.dataset(path).to_table(columns=columns, filter=flt)


class DeltaContender(Contender):
    def __init__(self, name: str, base: str):
        super().__init__(name, base)
        try:
            import deltalake

            self.deltalake: Any = deltalake
        except ImportError:
            self.why = "n/a (deltalake not installed: pip install .[bench])"

    def build(self, scene: Scene, plain: str | None) -> None:
        for d in scene.data:
            self.deltalake.write_deltalake(self.base, d, mode="append")

    def open(self, path: str) -> Any:
        return self.deltalake.DeltaTable(path)

    def merge(self, handle: Any, source: pa.Table) -> tuple[int, int]:
        r = (
            handle.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        return r["num_target_rows_inserted"], r["num_target_rows_updated"]

    def update(self, handle: Any) -> int:
        return int(handle.update(updates={"value": UPDATE_EXPR}, predicate=UPDATE_SQL)["num_updated_rows"])

    def count(self, path: str) -> int:
        return self.deltalake.DeltaTable(path).to_pyarrow_dataset().count_rows()

    def read(self, path: str, columns: list[str] | None = None, ids: np.ndarray | None = None) -> pa.Table:
        flt = None if ids is None else pc.field("id").isin(pa.array(ids))
        return self.deltalake.DeltaTable(path).to_pyarrow_dataset().to_table(columns=columns, filter=flt)

    def is_data(self, rel: str) -> bool:
        return rel.endswith(".parquet") and not rel.startswith("_delta_log")


def contenders(root: str) -> dict[str, Contender]:
    def at(name: str) -> str:
        return os.path.join(root, name.replace("/", "-"))

    return {
        "lamina/btree": LaminaContender("lamina/btree", at("lamina/btree"), True),
        "lamina": LaminaContender("lamina", at("lamina"), False),
        "pylance/btree": LanceContender("pylance/btree", at("pylance/btree"), True),
        "pylance": LanceContender("pylance", at("pylance"), False),
        "deltalake": DeltaContender("deltalake", at("deltalake")),
    }


# -- checks ----------------------------------------------------------------------------------------------
def same(got: pa.Table, want: pa.Table) -> bool:
    got = got.select(SCHEMA.names).cast(SCHEMA).sort_by("id")
    return got.num_rows == want.num_rows and got.equals(want.select(SCHEMA.names).cast(SCHEMA))


def close(got: pa.Table, want: pa.Table) -> bool:
    """Same rows, ``value`` to a relative 1e-12 (``value * 1.1`` computed by each engine), the rest exactly."""
    got = got.select(SCHEMA.names).cast(SCHEMA).sort_by("id")
    want = want.select(SCHEMA.names).cast(SCHEMA)
    if got.num_rows != want.num_rows:
        return False
    rest = [n for n in SCHEMA.names if n != "value"]
    return got.select(rest).equals(want.select(rest)) and bool(
        np.allclose(got["value"].to_numpy(), want["value"].to_numpy(), rtol=1e-12, atol=0)
    )


def check_merge(c: Contender, path: str, scene: Scene, reported: tuple[int, int]) -> str:
    n = scene.rows + len(scene.new)
    ids = c.read(path, ["id"])["id"]
    problems = []
    if reported != (len(scene.new), len(scene.matched)):
        problems.append(f"reported inserted, updated {reported}, want {(len(scene.new), len(scene.matched))}")
    count = c.count(path)
    if count != n or len(ids) != n:
        problems.append(f"{count:,} rows ({len(ids):,} read), want {n:,}")
    distinct = pc.count_distinct(ids).as_py()
    if distinct != len(ids):
        problems.append(f"{len(ids) - distinct:,} ids appear more than once")
    for what, keys in (("matched", scene.check_matched), ("inserted", scene.check_new)):
        if not same(c.read(path, ids=keys), scene.source_rows(keys)):
            problems.append(f"the {len(keys):,} {what} keys checked do not hold the source's rows")
    if problems:
        raise AssertionError(f"{c.name} merge, {path}: " + "; ".join(problems))
    return f"{n:,} rows, ids distinct, {len(scene.check_matched):,} matched + {len(scene.check_new):,} inserted rows = source"


def check_update(c: Contender, path: str, scene: Scene, reported: int) -> str:
    problems = []
    if reported != scene.updated_rows:
        problems.append(f"reported {reported:,} rows updated, want {scene.updated_rows:,}")
    count = c.count(path)
    if count != scene.rows:
        problems.append(f"{count:,} rows, want {scene.rows:,}")
    for what, keys in (("updated", scene.check_updated), ("other", scene.check_other)):
        if not close(c.read(path, ids=keys), scene.updated(keys)):
            problems.append(f"the {len(keys):,} {what} rows checked differ from the expected values")
    if problems:
        raise AssertionError(f"{c.name} update, {path}: " + "; ".join(problems))
    return (
        f"{reported:,} updated, {scene.rows:,} rows, {len(scene.check_updated):,} updated + {len(scene.check_other):,} other rows"
    )


# -- merge and update ------------------------------------------------------------------------------------
def timed_runs(
    op: str, names: list[str], cs: dict[str, Contender], scene: Scene, root: str, runs: int
) -> dict[str, dict[str, Any]]:
    """``op`` ("merge" or "update") ``runs`` times per contender, each on a fresh copy, checked; contenders
    interleaved, the order rotating."""
    out: dict[str, dict[str, Any]] = {n: {"s": [], "bytes": [], "data_files": [], "checked": ""} for n in names}
    for r in range(runs):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            c = cs[name]
            path = os.path.join(root, f"run-{op}-{r}-{name.replace('/', '-')}")
            fresh_copy(c.base, path)
            before = listing(path)
            handle = c.open(path)
            t0 = time.perf_counter()
            got = c.merge(handle, scene.source) if op == "merge" else c.update(handle)
            took = time.perf_counter() - t0
            nbytes, _, files = written(before, listing(path), c.is_data)
            del handle
            checked = check_merge(c, path, scene, got) if op == "merge" else check_update(c, path, scene, got)
            shutil.rmtree(path)
            o = out[name]
            o["s"].append(took)
            o["bytes"].append(nbytes)
            o["data_files"].append(files)
            o["checked"] = checked
            print(f"  {op} run {r + 1}/{runs} {name:14} {took:7.2f} s  {nbytes / MiB:8.1f} MiB written", flush=True)
    for o in out.values():
        o["median_s"] = statistics.median(o["s"])
    return out


def profile(op: str, c: Contender, scene: Scene, root: str, top: int = 25) -> str:
    """Lamina's ``op`` once more on a fresh copy under cProfile: the top entries by cumulative and own time.
    A merge joins in Arrow's Acero, whose threads pull the key scan (cProfile sees this thread only): the
    scan a merge's key lookup makes is profiled alone too, as ``to_arrow(columns=["id"], filter=id IN keys)``
    on another fresh copy."""
    out = io.StringIO()

    def run(what: str, fn: Callable[[Any], Any]) -> None:
        path = os.path.join(root, f"profile-{op}")
        fresh_copy(c.base, path)
        handle = c.open(path)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        fn(handle)
        prof.disable()
        out.write(f"-- {what}: {time.perf_counter() - t0:.2f} s under the profiler\n")
        shutil.rmtree(path)
        stats = pstats.Stats(prof, stream=out).strip_dirs()
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top // 2)

    if op == "merge":
        run("merge", lambda t: c.merge(t, scene.source))
        keys = pc.field("id").isin(scene.source["id"])
        run("the merge's key lookup alone", lambda t: t.to_arrow(columns=["id"], filter=keys))
    else:
        run("update", c.update)
    return out.getvalue()


# -- schema changes --------------------------------------------------------------------------------------
#: The many-fragment tables: the main columns and ``small`` int32, the column the widening changes (it holds
#: a value in every fragment, so a format that stores the type with each file's data has work to do).
SCHEMA_MANY = SCHEMA.append(pa.field("small", pa.int32()))
ADD, COMPUTED, RENAME, DROP, WIDEN = "add extra (NULL)", "add qty2 = qty * 2", "rename qty", "drop tag", "widen small"
SCHEMA_OPS = (ADD, COMPUTED, RENAME, DROP, WIDEN)
#: The Lamina method each operation calls (the checkout may not have them all: those it lacks print n/a).
LAMINA_SCHEMA_API = {ADD: "add_columns", RENAME: "rename_column", DROP: "drop_columns", WIDEN: "alter_column"}


def many_rows(n: int) -> pa.Table:
    """``n`` rows, one per fragment: ``id`` 0..n-1, ``qty`` and ``small`` id % 100."""
    ids = np.arange(n, dtype=np.int64)
    cols = {"id": ids, "qty": ids % 100, "price": np.ones(n), "value": np.ones(n), "tag": pa.repeat("tag", n)}
    return pa.table({**cols, "small": (ids % 100).astype(np.int32)}, schema=SCHEMA_MANY)


def lamina_many(path: str, fragments: int) -> None:
    """A Lamina table of ``fragments`` fragments of one row each: one append of a file per row."""
    lamina.create_table(path, SCHEMA_MANY).append(many_rows(fragments), max_rows_per_file=1)


def lance_many(lance: Any, path: str, fragments: int) -> None:
    """A pylance table of ``fragments`` fragments of one row each."""
    lance.write_dataset(many_rows(fragments), path, max_rows_per_file=1)


def delta_many(deltalake: Any, path: str, fragments: int) -> None:
    """A delta table of ``fragments`` files of one row each: one written, the rest hard links to copies of it
    under new names (a copy per 1,000 links: a file system caps an inode's links), committed as one append and
    checkpointed."""
    deltalake.write_deltalake(path, many_rows(1))
    dt = deltalake.DeltaTable(path)
    add = pa.table(dt.get_add_actions(flatten=False)).to_pylist()[0]
    stats = json.dumps(
        {"numRecords": 1, "minValues": add["min"], "maxValues": add["max"], "nullCount": add["null_count"]}, default=str
    )
    mtime = add["modification_time"]
    mtime = int(mtime.timestamp() * 1000) if hasattr(mtime, "timestamp") else int(mtime)
    written = os.path.join(path, add["path"])
    actions = []
    for i in range(1, fragments):
        name = f"part-{i:06d}-linked.parquet"
        if i % 1000 == 1:
            shutil.copyfile(written, os.path.join(path, name))
            source = os.path.join(path, name)
        else:
            os.link(source, os.path.join(path, name))
        actions.append(deltalake.transaction.AddAction(name, add["size_bytes"], {}, mtime, True, stats))
    if actions:
        dt.create_write_transaction(actions, mode="append", schema=dt.schema())
    deltalake.DeltaTable(path).create_checkpoint()


def build_many(c: Contender, path: str, fragments: int) -> None:
    if isinstance(c, LaminaContender):
        lamina_many(path, fragments)
    elif isinstance(c, LanceContender):
        lance_many(c.lance, path, fragments)
    else:
        assert isinstance(c, DeltaContender)
        delta_many(c.deltalake, path, fragments)


def lamina_schema_why() -> str:
    """Empty if this checkout's ``lamina.Table`` has at least one of the schema changes, else why not."""
    if any(hasattr(lamina.Table, m) for m in LAMINA_SCHEMA_API.values()):
        return ""
    return f"n/a (this checkout's lamina.Table has no schema evolution: {os.path.dirname(lamina.__file__)})"


def schema_ops(c: Contender, scene: str) -> list[tuple[str, Callable[[Any], Any]]]:
    """The operations run on ``c``'s table of ``scene`` ("main" or "many": only it has ``small``), in order:
    add, (pylance on the main table: a computed add, for scale), rename, drop, widen."""
    many = scene == "many"
    ops: list[tuple[str, Callable[[Any], Any]]]
    if isinstance(c, LaminaContender):
        ops = [
            (ADD, lambda t: t.add_columns(pa.field("extra", pa.float64()))),
            (RENAME, lambda t: t.rename_column("qty", "quantity")),
            (DROP, lambda t: t.drop_columns(["tag"])),
        ]
        if many:
            ops.append((WIDEN, lambda t: t.alter_column("small", pa.int64())))
        return [(op, fn) for op, fn in ops if hasattr(lamina.Table, LAMINA_SCHEMA_API[op])]
    if isinstance(c, LanceContender):
        ops = [(ADD, lambda ds: ds.add_columns(pa.field("extra", pa.float64())))]
        if not many:
            ops.append((COMPUTED, lambda ds: ds.add_columns({"qty2": "qty * 2"})))
        ops.append((RENAME, lambda ds: ds.alter_columns({"path": "qty", "name": "quantity"})))
        ops.append((DROP, lambda ds: ds.drop_columns(["tag"])))
        if many:
            ops.append((WIDEN, lambda ds: ds.alter_columns({"path": "small", "data_type": pa.int64()})))
        return ops
    assert isinstance(c, DeltaContender)
    field = c.deltalake.Field("extra", "double", nullable=True)
    return [(ADD, lambda dt: dt.alter.add_columns(field))]


def peer_lacks(c: Contender, op: str) -> str:
    """Why ``c`` has no figure for ``op`` (after a run in which it had none)."""
    if isinstance(c, DeltaContender) and op in (RENAME, DROP, WIDEN):
        return f"n/a (deltalake {c.deltalake.__version__}: no drop, rename or type change of a column in its Python API)"
    if isinstance(c, LaminaContender):
        if op == COMPUTED:
            return "n/a (add_columns adds NULL or constant columns; no computed column)"
        if not hasattr(lamina.Table, LAMINA_SCHEMA_API.get(op, "")):
            return f"n/a (this checkout's lamina.Table has no {LAMINA_SCHEMA_API[op]})"
    return ""


def check_lamina_schema(path: str, base: pa.Schema, done: list[str], qty: Callable[[np.ndarray], np.ndarray]) -> str:
    """After the operations ``done`` on a Lamina table of ``base``'s columns: its schema, its row count (the same)
    and, for 100 ids, ``quantity`` (``qty(ids)``), ``extra`` NULL and ``small`` (id % 100, int64 if widened)."""
    want = [(f.name, f.type) for f in base]
    if ADD in done:
        want.append(("extra", pa.float64()))
    if RENAME in done:
        want = [("quantity" if n == "qty" else n, ty) for n, ty in want]
    if DROP in done:
        want = [(n, ty) for n, ty in want if n != "tag"]
    if WIDEN in done:
        want = [(n, pa.int64() if n == "small" else ty) for n, ty in want]
    t = lamina.open_table(path)
    got = [(f.name, f.type) for f in t.schema]
    problems = [] if got == want else [f"schema {got}, want {want}"]
    rows = t.count_rows()
    ids = np.linspace(0, rows - 1, min(100, rows)).astype(np.int64)
    read = t.to_arrow(filter=pc.field("id").isin(pa.array(ids))).sort_by("id")
    if read.num_rows != len(ids) or read.schema.names != [n for n, _ in want]:
        problems.append(f"{read.num_rows} rows with columns {read.schema.names} read for {len(ids)} ids")
    else:
        q = "quantity" if RENAME in done else "qty"
        if not np.array_equal(read[q].to_numpy(), qty(ids)):
            problems.append(f"{q} differs from the rows written")
        if ADD in done and read["extra"].null_count != len(ids):
            problems.append("extra is not NULL in every row read")
        if "small" in read.schema.names and not np.array_equal(read["small"].to_numpy(), ids % 100):
            problems.append("small differs from the rows written")
    if problems:
        raise AssertionError(f"lamina schema changes {done}, {path}: " + "; ".join(problems))
    return f"schema as expected, {rows:,} rows, {len(ids)} rows read back"


def schema_changes(
    cs: list[Contender],
    tables: dict[str, dict[str, str]],
    fragments: dict[str, dict[str, int]],
    root: str,
    runs: int,
    qty: dict[str, Callable[[np.ndarray], np.ndarray]],
) -> list[dict[str, Any]]:
    """Each contender's schema operations on each of its tables (``tables[scene][name]``, of
    ``fragments[scene][name]`` fragments): per run a fresh copy (hard links), opened, then the operations one
    after the other on that handle, each timed alone to its commit; contenders interleaved, the order rotating.
    An operation that wrote a data file (pylance's computed add and type change rewrite every fragment) runs in
    the first run only.
    Lamina's tables are checked after each run (``qty[scene]``: the ``qty`` of ids), and each operation must
    be one commit (the version it returns is the previous one + 1)."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in range(runs):
        for scene, paths in tables.items():
            order = [c for c in cs if c.name in paths]
            for c in order[r % len(order) :] + order[: r % len(order)]:
                path = os.path.join(root, f"run-schema-{r}-{scene}-{c.name.replace('/', '-')}")
                fresh_copy(paths[c.name], path, link=True)
                t0 = time.perf_counter()
                handle = c.open(path)
                opened = time.perf_counter() - t0
                before = listing(path)
                done: list[str] = []
                for op, fn in schema_ops(c, scene):
                    if any(rows.get((op, c.name, scene), {}).get("data_files", [])):
                        continue  # it rewrote data files in the first run: once is figure enough, and slow
                    version = handle.version if isinstance(c, LaminaContender) else None
                    t0, cpu0 = time.perf_counter(), time.process_time()
                    got = fn(handle)
                    took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
                    after = listing(path)
                    w = written(before, after, c.is_data)
                    before = after
                    done.append(op)
                    n = fragments[scene][c.name]
                    row = rows.setdefault(
                        (op, c.name, scene),
                        {
                            "op": op,
                            "contender": c.name,
                            "scene": scene,
                            "fragments": n,
                            "s": [],
                            "cpu_s": [],
                            "open_s": [],
                            "bytes": [],
                            "data_bytes": [],
                            "data_files": [],
                            "commits": [],
                        },
                    )
                    row["s"].append(took)
                    row["cpu_s"].append(cpu)
                    row["open_s"].append(opened)
                    row["bytes"].append(w.bytes)
                    row["data_bytes"].append(w.data_bytes)
                    row["data_files"].append(w.data_files)
                    if version is not None:
                        if got != handle.version:
                            raise AssertionError(f"lamina {op} returned version {got}, the table is at {handle.version}")
                        row["commits"].append(got - version)
                    print(
                        f"  schema run {r + 1}/{runs} {scene:4} {c.name:10} {op:20} {took * 1e3:9.1f} ms "
                        f"{w.bytes / 1024:9.1f} KiB written, {w.data_files} data files",
                        flush=True,
                    )
                del handle
                if isinstance(c, LaminaContender):
                    base = SCHEMA_MANY if scene == "many" else SCHEMA
                    checked = check_lamina_schema(path, base, done, qty[scene])
                    for op in done:
                        rows[(op, c.name, scene)]["checked"] = checked
                shutil.rmtree(path)
    out = list(rows.values())
    for row in out:
        row["median_s"] = statistics.median(row["s"])
    return sorted(out, key=lambda x: (SCHEMA_OPS.index(x["op"]), x["fragments"], x["contender"]))


def profile_schema(c: Contender, src: str, root: str, top: int = 20) -> str:
    """Lamina's schema operations once more on a fresh copy of ``src``, each under its own cProfile."""
    out = io.StringIO()
    path = os.path.join(root, "profile-schema")
    fresh_copy(src, path, link=True)
    handle = c.open(path)
    for op, fn in schema_ops(c, "many"):
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        fn(handle)
        prof.disable()
        out.write(f"-- {op}: {(time.perf_counter() - t0) * 1e3:.1f} ms under the profiler\n")
        stats = pstats.Stats(prof, stream=out).strip_dirs()
        stats.sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top // 2)
    del handle
    shutil.rmtree(path)
    return out.getvalue()


# -- the run ---------------------------------------------------------------------------------------------
def checkout() -> str:
    """Where ``lamina`` was imported from, and its git commit (``+`` if the work tree has changes)."""
    where = os.path.dirname(os.path.dirname(os.path.abspath(lamina.__file__)))
    try:
        rev = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        )
        return f"{where} @ {rev}{'+' if dirty.stdout.strip() else ''}" if rev else where
    except OSError:
        return where


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "MISSED")


PARTS = ("merge", "update", "schema")
#: The sizes' defaults, and ``--smoke``'s: every part at a size that runs in seconds (options given are kept).
SIZES = dict(rows=10_000_000, fragment_rows=1_000_000, source_rows=100_000, runs=3, fragments=100_000, check_keys=1000)
SMOKE = dict(rows=200_000, fragment_rows=50_000, source_rows=4_000, runs=1, fragments=1_000, check_keys=100)
#: The issue's bound for a schema change, and the table size it holds at.
SCHEMA_BOUND_S, SCHEMA_BOUND_FRAGMENTS = 0.020, 100_000


def size(nbytes: float) -> str:
    return f"{nbytes / MiB:.2f} MiB" if nbytes >= MiB else f"{nbytes / 1024:.1f} KiB"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, help="rows in the table (N; 10,000,000)")
    ap.add_argument("--fragment-rows", type=int, help="rows per append (one fragment each; 1,000,000)")
    ap.add_argument("--source-rows", type=int, help="merge source rows: half matched, half new (100,000)")
    ap.add_argument("--runs", type=int, help="timed runs per operation and contender (median; 3)")
    ap.add_argument(
        "--fragments",
        "--schema-fragments",
        dest="fragments",
        type=int,
        help="fragments (one row each) of the schema-change tables (0: none; 100,000)",
    )
    ap.add_argument("--peer-fragments", type=int, help="fragments of the peers' schema-change tables (default: --fragments)")
    ap.add_argument("--only", action="append", choices=PARTS, help="run this part only (repeatable); schema alone: no main table")
    ap.add_argument("--smoke", action="store_true", help="a run of seconds: " + ", ".join(f"{k} {v:,}" for k, v in SMOKE.items()))
    ap.add_argument("--check-keys", type=int, help="keys spot-checked per kind after each run (1,000)")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--profile", action="store_true", help="cProfile Lamina's merge (btree), update and schema changes once each")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON (after the table)")
    args = ap.parse_args(argv)
    for k, v in (SMOKE if args.smoke else SIZES).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.rows < 100 or args.source_rows < 2 or args.runs < 1 or args.fragment_rows < 1:
        ap.error("--rows >= 100, --source-rows >= 2, --runs >= 1 and --fragment-rows >= 1")
    parts = [p for p in PARTS if p in (args.only or PARTS)]
    peer_fragments = args.fragments if args.peer_fragments is None else args.peer_fragments

    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="lamina-evo-")
    result: dict[str, Any] = {"parts": parts, "rows": args.rows, "source_rows": args.source_rows, "runs": args.runs}
    profiles: dict[str, str] = {}
    merges: dict[str, dict[str, Any]] = {}
    updates: dict[str, dict[str, Any]] = {}
    schema: list[dict[str, Any]] = []
    scene: Scene | None = None
    cs = contenders(root)
    # Lamina in the schema part: its main table is the merge's plain one; it needs the schema API only.
    lam_schema = LaminaContender("lamina", cs["lamina"].base, False)
    lam_schema.why = lamina_schema_why()
    schema_cs = [c for c in (lam_schema, cs["pylance"], cs["deltalake"]) if not c.why]
    try:
        build: dict[str, float] = {}
        if "merge" in parts or "update" in parts:
            t0 = time.perf_counter()
            scene = Scene(args.rows, args.fragment_rows, args.source_rows, args.check_keys, args.seed)
            build["data"] = time.perf_counter() - t0
            for name in ("lamina", "lamina/btree", "pylance", "pylance/btree", "deltalake"):
                c = cs[name]
                if c.why:
                    continue
                plain = cs[name.split("/")[0]].base if name.endswith("/btree") else None
                t0 = time.perf_counter()
                c.build(scene, plain)
                build[name] = time.perf_counter() - t0
            result["fragments"] = scene.fragments
        result["build_s"] = build
        result["lamina"] = checkout()
        versions = {"python": sys.version.split()[0], "pyarrow": pa.__version__}
        for mod in ("lance", "deltalake"):
            if mod in sys.modules:
                versions["pylance" if mod == "lance" else mod] = sys.modules[mod].__version__
        result["versions"] = versions
        print(f"parts: {', '.join(parts)}")
        if scene is not None:
            print(
                f"{args.rows:,} rows in {scene.fragments} fragments (ids 0..N-1 in append order), {len(scene.source):,} "
                f"source rows ({len(scene.matched):,} matched, {len(scene.new):,} new); median of {args.runs} runs, "
                "each on a fresh copy"
            )
        print(f"lamina: {result['lamina']}; " + ", ".join(f"{k} {v}" for k, v in versions.items()))
        for c in (lam_schema, cs["pylance"], cs["deltalake"]):
            if c.why and "schema" in parts:
                print(f"schema changes, {c.name}: {c.why}")
        result["load_before"] = os.getloadavg()
        print("load average (1, 5, 15 min) at the start: " + ", ".join(f"{x:.1f}" for x in result["load_before"]))
        if build:
            print("build (s, not timed in the figures): " + ", ".join(f"{k} {v:.1f}" for k, v in build.items()), flush=True)

        if scene is not None and "merge" in parts:
            merges = timed_runs("merge", [n for n in MERGE if not cs[n].why], cs, scene, root, args.runs)
        if scene is not None and "update" in parts:
            updates = timed_runs("update", [n for n in UPDATE if not cs[n].why], cs, scene, root, args.runs)

        if "schema" in parts and schema_cs:
            tables: dict[str, dict[str, str]] = {}
            fragments: dict[str, dict[str, int]] = {}
            qty: dict[str, Callable[[np.ndarray], np.ndarray]] = {"many": lambda ids: ids % 100}
            if scene is not None:
                main_scene = scene
                tables["main"] = {c.name: c.base for c in schema_cs if os.path.isdir(c.base)}
                fragments["main"] = {c.name: scene.fragments for c in schema_cs}
                qty["main"] = lambda ids: main_scene.table["qty"].to_numpy()[ids]
            if args.fragments > 0:
                tables["many"], fragments["many"] = {}, {}
                for c in schema_cs:
                    n = args.fragments if c is lam_schema else peer_fragments
                    path = os.path.join(root, f"many-{c.name}")
                    t0 = time.perf_counter()
                    build_many(c, path, n)
                    build[f"{c.name} {n:,} fragments"] = took = time.perf_counter() - t0
                    tables["many"][c.name], fragments["many"][c.name] = path, n
                    print(f"  built {c.name} with {n:,} fragments of one row in {took:.1f} s", flush=True)
                if peer_fragments != args.fragments:
                    print(
                        f"  the peers' tables have {peer_fragments:,} fragments, Lamina's {args.fragments:,} (--peer-fragments)"
                    )
            schema = schema_changes(schema_cs, tables, fragments, root, args.runs, qty)
            if args.profile and lam_schema.name in tables.get("many", {}):
                profiles["schema changes"] = profile_schema(lam_schema, tables["many"][lam_schema.name], root)

        lam = cs["lamina/btree"]
        if args.profile and not lam.why and scene is not None:
            if "merge" in parts:
                profiles["merge"] = profile("merge", lam, scene, root)
            if "update" in parts:
                profiles["update"] = profile("update", lam, scene, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    # -- report ------------------------------------------------------------------------------------------
    def med(table: dict[str, dict[str, Any]], name: str) -> float | None:
        return table[name]["median_s"] if name in table else None

    if scene is not None and "merge" in parts:
        print()
        print(f"merge: {len(scene.source):,} source rows into {args.rows:,} rows; seconds from the opened table to the commit")
        print(f"  {'contender':14} {'median s':>9}  {'runs':24} {'written MiB':>11} {'data files':>10}  check")
        for name in MERGE:
            if name not in merges:
                print(f"  {name:14} {cs[name].why}")
                continue
            m = merges[name]
            runs = " ".join(f"{x:.2f}" for x in m["s"])
            print(
                f"  {name:14} {m['median_s']:9.2f}  {runs:24} {statistics.median(m['bytes']) / MiB:11.1f} "
                f"{int(statistics.median(m['data_files'])):10d}  {m['checked']}"
            )
    lam_filter = cs["lamina/btree"].filter if isinstance(cs["lamina/btree"], LaminaContender) else UPDATE_SQL
    if scene is not None and "update" in parts:
        print()
        print(
            f"update: {UPDATE_EXPR!r} where {UPDATE_SQL} ({scene.updated_rows:,} rows); Lamina's filter: "
            + (UPDATE_SQL if isinstance(lam_filter, str) else f"the Arrow expression {lam_filter} (its grammar has no %)")
        )
        print(f"  {'contender':14} {'median s':>9}  {'runs':24} {'written MiB':>11} {'data files':>10}  check")
        for name in UPDATE:
            if name not in updates:
                print(f"  {name:14} {cs[name].why}")
                continue
            u = updates[name]
            runs = " ".join(f"{x:.2f}" for x in u["s"])
            print(
                f"  {name:14} {u['median_s']:9.2f}  {runs:24} {statistics.median(u['bytes']) / MiB:11.1f} "
                f"{int(statistics.median(u['data_files'])):10d}  {u['checked']}"
            )
    if "schema" in parts:
        print()
        print(
            "schema changes: ms from the opened table to the commit, one after the other on the same handle (open ms "
            "beside them); cpu: the process's CPU time in it (the rest is waiting: fsync, I/O); written: median bytes the "
            "operation added or changed, of them in data files; commits: versions it made (Lamina)"
        )
        w = max([7, *(len(" ".join(f"{x * 1e3:.1f}" for x in row["s"])) for row in schema)])  # the runs column
        print(
            f"  {'operation':20} {'contender':10} {'fragments':>9} {'median ms':>10} {'runs ms':{w}} {'cpu ms':>7} "
            f"{'open ms':>8} {'written':>11} {'data bytes':>10} {'data files':>10} {'commits':>7}"
        )
        for op in SCHEMA_OPS:
            for row in (x for x in schema if x["op"] == op):
                runs = " ".join(f"{x * 1e3:.1f}" for x in row["s"])
                commits = ",".join(str(x) for x in sorted(set(row["commits"]))) or "-"
                cpu = statistics.median(row["cpu_s"]) * 1e3
                print(
                    f"  {op:20} {row['contender']:10} {row['fragments']:9,} {row['median_s'] * 1e3:10.1f} {runs:{w}} {cpu:7.1f} "
                    f"{statistics.median(row['open_s']) * 1e3:8.1f} {size(statistics.median(row['bytes'])):>11} "
                    f"{max(row['data_bytes']):10,} {max(row['data_files']):10,} {commits:>7}"
                )
            for c in schema_cs:
                if not any(x["op"] == op and x["contender"] == c.name for x in schema) and peer_lacks(c, op):
                    print(f"  {op:20} {c.name:10} {peer_lacks(c, op)}")
        checked = {(x["contender"], x["scene"]): x["checked"] for x in schema if x.get("checked")}
        for (name, scene_name), text in checked.items():
            print(f"  check, {name} {scene_name} table after each run: {text}")

    # -- targets -----------------------------------------------------------------------------------------
    targets: list[tuple[str, float | None, bool | None, str]] = []

    def ratio(ours: float | None, peer: float | None, bound: float | None, label: str) -> None:
        """A ratio of two medians of this run; ``bound`` None: printed for reference, no verdict."""
        if ours is None or peer is None:
            targets.append((label, None, None, "n/a (a contender did not run)"))
            return
        r = ours / peer
        targets.append((label, r, None if bound is None else r <= bound, f"{r:.2f} ({ours:.2f} s / {peer:.2f} s)"))

    if "merge" in parts:
        lm = med(merges, "lamina/btree")
        lance_best = min((x for x in (med(merges, "pylance/btree"), med(merges, "pylance")) if x is not None), default=None)
        ratio(lm, lance_best, 0.5, "merge, lamina/btree / pylance merge_insert (faster of its two) <= 0.5")
        ratio(lm, med(merges, "deltalake"), 0.5, "merge, lamina/btree / deltalake merge <= 0.5")
    if "update" in parts:
        ratio(med(updates, "lamina/btree"), med(updates, "pylance/btree"), 1.0, "update 1 %, lamina / pylance update <= 1.0")
    if "merge" in parts:
        ratio(
            med(merges, "lamina/btree"), med(merges, "pylance/btree"), None, "  (reference) merge, lamina/btree / pylance/btree"
        )
        ratio(med(merges, "lamina"), med(merges, "pylance"), None, "  (reference) merge, lamina / pylance, no index")
    if "schema" in parts:

        def largest(op: str, name: str) -> dict[str, Any] | None:
            return max(
                (x for x in schema if x["op"] == op and x["contender"] == name), key=lambda x: x["fragments"], default=None
            )

        bound = f"<= {SCHEMA_BOUND_S * 1e3:.0f} ms at {SCHEMA_BOUND_FRAGMENTS:,} fragments, no data file written"
        for op, what in ((ADD, "add column"), (RENAME, "rename column"), (DROP, "drop column"), (WIDEN, "widen int32 -> int64")):
            ours = largest(op, lam_schema.name)
            if ours is None:
                why = lam_schema.why or peer_lacks(lam_schema, op) or "n/a (no table with the column: --fragments 0)"
                targets.append((f"{what} {bound}", None, None, why))
            else:
                ms, data = ours["median_s"], max(ours["data_bytes"])
                ok = ms <= SCHEMA_BOUND_S and data == 0 if ours["fragments"] >= SCHEMA_BOUND_FRAGMENTS else None
                fig = f"{ms * 1e3:.1f} ms, {data} data bytes at {ours['fragments']:,}"
                targets.append((f"{what} {bound}", ms, ok, fig))
            for c in (c for c in schema_cs if c is not lam_schema):
                peer = largest(op, c.name)
                if peer is None:
                    continue
                at = f"{c.name} at {peer['fragments']:,} fragments"
                pfig = f"{peer['median_s'] * 1e3:.1f} ms, {max(peer['data_files']):,} data files"
                if ours is None:
                    targets.append((f"  (reference) {at}", None, None, pfig))
                else:
                    r = ours["median_s"] / peer["median_s"]
                    targets.append((f"  (reference) lamina / {at}", r, None, f"{r:.3g} (vs {pfig})"))
    print()
    print(f"targets (issue 34){f', {args.rows:,} rows' if scene is not None else ''}")
    for label, _, ok, fig in targets:
        mark = "" if label.startswith("  (reference)") else verdict(ok)
        print(f"  {label:76} {fig:>40}  {mark}")
    for name, text in profiles.items():
        print(f"\ncProfile, Lamina {name}, one run:\n{text}")
    total = time.perf_counter() - started
    result["load_after"] = os.getloadavg()
    print(f"\n(total {total:.0f} s; load average at the end " + ", ".join(f"{x:.1f}" for x in result["load_after"]) + ")")
    result.update(
        merge=merges,
        update=updates,
        schema=schema,
        update_filter_lamina=str(lam_filter),
        targets=[{"target": t[0], "figure": t[1], "met": t[2]} for t in targets],
        unavailable={n: c.why for n, c in cs.items() if c.why},
        total_s=total,
    )
    if args.json:
        print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
