"""Table.scanner: streamed reads equal a brute-force read of the files minus their deletions, for random
filters, projections, limits and offsets; reading stops at the limit; a reader keeps its version."""

from __future__ import annotations

import random
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.commit import commit
from lamina.deletion import read_deleted
from lamina.errors import InvalidArgument, InvalidFilter, LaminaError
from lamina.filter import parse_filter
from lamina.rewrite import full_rewrite
from lamina.scan import Scanner
from lamina.transaction import Rewrite
from tests.lamina.helpers import SCHEMA, HookedStore, compacted_table, rows

TEXT_FILTERS = [
    "id < {a}",
    "id >= {a} AND id < {b}",
    "id BETWEEN {a} AND {b}",
    "category = 'b'",
    "category IN ('a', 'c') OR id = {a}",
    "category IS NULL",
    "NOT (id < {a}) AND category != 'c'",
    "meta.a = {m}",
    "meta.b IS NOT NULL AND score < 0.5",
    "id IN ({a}, {b}, 3, 799, 1499)",
    "score > 0.25 OR id < {a}",
    "ts < TIMESTAMP '2024-01-01 00:10:00'",
    "FALSE",
]


def _expression_filters(a: int, b: int, m: int) -> list[pc.Expression]:
    return [
        (pc.field("id") >= a) & (pc.field("id") < b),
        pc.field("category").isin(["a", "b"]),
        pc.field("category").is_null() | (pc.field("score") > 0.9),
        pc.field(("meta", "a")) == m,
        ~(pc.field("id") > a),
        pc.field("id") * 2 > b,  # no tree term: evaluated, prunes nothing
    ]


def brute(t: lamina.Table) -> pa.Table:
    """Every live row, read with plain pyarrow from each fragment's file and its deletion file."""
    parts = []
    for frag in t.manifest.fragments:
        data = pq.read_table(pa.BufferReader(t.store.get(frag.path))).cast(SCHEMA)
        keep = np.ones(frag.rows, dtype=bool)
        keep[read_deleted(t.store, frag)] = False
        addr = (np.uint64(frag.id) << np.uint64(32)) | np.arange(frag.rows, dtype=np.uint64)
        parts.append(data.append_column("_rowaddr", pa.array(addr)).filter(pa.array(keep)))
    return pa.concat_tables(parts) if parts else SCHEMA.empty_table()


def expected(everything: pa.Table, schema: pa.Schema, flt, columns, limit, offset, with_addr) -> pa.Table:
    out = everything if flt is None else everything.filter(parse_filter(flt, schema).expression)
    names = list(schema.names) if columns is None else list(columns)
    start = offset or 0
    out = out.slice(start, None if limit is None else limit)  # slices of a table without columns keep every row
    return out.select(names + (["_rowaddr"] if with_addr else []))


def _case(rng: random.Random):
    a, b, m = rng.randrange(0, 1500), rng.randrange(0, 1600), rng.randrange(0, 100)
    a, b = min(a, b), max(a, b)
    if rng.random() < 0.3:
        flt = rng.choice(_expression_filters(a, b, m))
    elif rng.random() < 0.85:
        flt = rng.choice(TEXT_FILTERS).format(a=a, b=b, m=m)
    else:
        flt = None
    columns = None if rng.random() < 0.3 else rng.sample(SCHEMA.names, rng.randrange(0, 4))
    limit = None if rng.random() < 0.5 else rng.choice([0, 1, 7, 100, 5000])
    offset = None if rng.random() < 0.6 else rng.choice([0, 3, 250, 900, 5000])
    return flt, columns, limit, offset, rng.random() < 0.3, rng.choice([1, 13, 64, 300, 65536])


def _check(t: lamina.Table, everything: pa.Table, rng: random.Random, cases: int) -> None:
    for _ in range(cases):
        flt, columns, limit, offset, with_addr, batch = _case(rng)
        want = expected(everything, t.schema, flt, columns, limit, offset, with_addr)
        scanner = t.scanner(
            columns, flt, limit=limit, offset=offset, with_row_address=with_addr, batch_size=batch, readahead=rng.choice([1, 3])
        )
        what = f"filter={flt} columns={columns} limit={limit} offset={offset} batch={batch}"
        batches = list(scanner.to_batches())
        assert all(0 < b.num_rows <= batch for b in batches), what
        streamed = pa.Table.from_batches(batches, schema=scanner.schema)
        assert sum(b.num_rows for b in batches) == want.num_rows, what
        if want.num_columns:
            assert streamed.equals(want), what
            assert scanner.to_table().equals(want), what
            assert pa.table(scanner).equals(want), what  # the Arrow PyCapsule stream
        assert scanner.count_rows() == want.num_rows, what
        if flt is not None and limit is None and offset is None and not with_addr:
            assert t.to_arrow(columns, flt).equals(want.select(want.column_names)), what


def test_random_scans_equal_a_brute_force_read(table_location):
    """Deletions in several fragments, a fragment wholly deleted, a rewrite before cleanup (the replaced
    files still under data/) and a delete in the new file; then an older version."""
    uri, opts = table_location
    t, before = compacted_table(uri, opts)
    t.create_index("id", "btree")
    t.create_index("category", "bitmap")
    rng = random.Random(20261127)
    _check(t, brute(t), rng, 60)
    old = t.checkout(before)
    _check(old, brute(old), rng, 25)


def test_large_fragments_stream_in_row_group_pieces(tmp_path, monkeypatch):
    """A fragment of many row groups is read a few row groups at a time; the rows are the same."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA, row_group_rows=100)
    t.append(rows(0, 3000))
    t.delete(pc.equal(pc.bit_wise_and(pc.field("id"), 7), 0))  # deletions everywhere
    everything = brute(t)
    pieces = []
    real = Scanner._read

    def counting(self, unit, columns):
        out = real(self, unit, columns)
        pieces.append(out.num_rows)
        return out

    monkeypatch.setattr(Scanner, "_read", counting)
    got = pa.Table.from_batches(list(t.scanner(batch_size=250).to_batches()))
    monkeypatch.undo()
    assert got.equals(everything.drop_columns(["_rowaddr"]))
    assert len(pieces) == 15 and max(pieces) <= 250  # 3000 rows in runs of two 100-row groups, minus deletions
    _check(t, everything, random.Random(7), 20)


def test_units_in_flight_never_exceed_readahead(tmp_path, monkeypatch):
    """The memory bound: at most ``readahead`` pieces are being read (or held unread) at once."""
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(12):
        t.append(rows(i * 100, 100))
    real = Scanner._read
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def tracked(self, unit, columns):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        return real(self, unit, columns)

    monkeypatch.setattr(Scanner, "_read", tracked)
    n = 0
    for batch in t.scanner(readahead=3).to_batches():
        n += batch.num_rows
        with lock:
            state["now"] -= 1  # the piece is consumed
    assert n == 1200
    assert state["most"] <= 3


def test_limit_without_filter_opens_one_file(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for i in range(8):
        t.append(rows(i * 500, 500))
    t.delete("id < 3")
    hooked = HookedStore(t.store)
    view = lamina.Table(hooked, t.manifest, opts)  # type: ignore[arg-type]
    for stream in (True, False):
        hooked.calls.clear()
        scanner = view.scanner(limit=10, offset=5)
        got = pa.Table.from_batches(list(scanner.to_batches())) if stream else scanner.to_table()
        assert got.column("id").to_pylist() == list(range(8, 18))
        opened = {str(arg) for name, arg in hooked.calls if str(arg).startswith("data/")}
        assert len(opened) == 1, hooked.calls
    hooked.calls.clear()
    assert view.scanner(limit=10, offset=1200).to_table().column("id").to_pylist() == list(range(1203, 1213))
    assert len({str(arg) for _, arg in hooked.calls if str(arg).startswith("data/")}) == 1


def test_a_reader_keeps_its_version_through_compaction_and_cleanup(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for i in range(6):
        t.append(rows(i * 200, 200))
    t.delete(pc.equal(pc.bit_wise_and(pc.field("id"), 3), 0))
    want = brute(t).drop_columns(["_rowaddr"])
    batches = t.scanner(batch_size=50, readahead=1).to_batches()
    first = [next(batches)]
    writer = lamina.open_table(uri, storage_options=opts)
    ids = [f.id for f in writer.fragments()]
    commit(
        writer.store,
        Rewrite(writer.version, [full_rewrite(writer.store, writer.manifest, ids, writer.write_options)]),
        writer.manifest,
    )
    writer.reload().delete("id < 100")
    writer.cleanup()  # within retention: the files this reader needs stay
    got = pa.Table.from_batches(first + list(batches))
    assert got.equals(want)
    assert lamina.open_table(uri, storage_options=opts).count_rows() == want.num_rows - 75


def test_bad_arguments_and_filters_are_refused_before_reading(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 100))
    for bad in (pc.field("nope") > 1, pc.field("category") > 5, "nope = 1", "id <"):
        with pytest.raises(InvalidFilter):
            t.scanner(filter=bad)
        with pytest.raises(InvalidFilter):
            t.dataset().scanner(filter=bad)
    with pytest.raises(LaminaError, match="nope"):
        t.scanner(["nope"])
    for kwargs in ({"batch_size": 0}, {"limit": -1}, {"offset": -2}, {"readahead": 0}, {"batch_size": True}):
        with pytest.raises(InvalidArgument):
            t.scanner(**kwargs)
    with pytest.raises(InvalidArgument, match="no fragment 99"):
        t.scanner(fragments=[99])
    with pytest.raises(InvalidArgument, match="stable row ids"):
        t.scanner(with_row_id=True)


def test_fragments_and_explain(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(4):
        t.append(rows(i * 100, 100))
    second = t.fragments()[1]
    got = t.scanner(["id"], fragments=[second]).to_table()
    assert got.column("id").to_pylist() == list(range(100, 200))
    assert t.scanner(["id"], "id >= 150", fragments=[second.id]).count_rows() == 50
    assert t.scanner(fragments=[second.id], offset=90).count_rows() == 10
    text = t.scanner(["id"], "id = 5", limit=3).explain()
    assert "zone maps" in text and "stops after 3 rows" in text and "columns id" in text


def test_zero_columns_count_rows(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 1000), max_rows_per_file=300)
    t.delete(pc.equal(pc.bit_wise_and(pc.field("id"), 3), 0))
    assert t.scanner([]).to_table().num_rows == 750
    assert t.scanner([], "id < 500", offset=10, limit=100).to_table().num_rows == 100
    assert t.count_rows("id < 500") == 375
    assert sum(b.num_rows for b in t.scanner([], batch_size=100).to_batches()) == 750


def test_limit_zero_reads_nothing(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(4):
        t.append(rows(i * 100, 100))
    hooked = HookedStore(t.store)
    view = lamina.Table(hooked, t.manifest)  # type: ignore[arg-type]
    for flt in (None, "id >= 0"):
        scanner = view.scanner(filter=flt, limit=0)
        assert scanner.to_table().num_rows == 0 and scanner.count_rows() == 0 and list(scanner.to_batches()) == []
    assert not [c for c in hooked.calls if str(c[1]).startswith("data/")]


def test_a_stream_continued_on_an_io_thread_does_not_wait_on_its_own_pool(tmp_path):
    """A stream handed to a task on the I/O pool (one thread here) reads its queued pieces itself."""
    import subprocess
    import sys

    script = f"""
import lamina
from lamina.io_pool import io_pool
from tests.lamina.helpers import SCHEMA, rows
t = lamina.create_table({str(tmp_path / "t")!r}, SCHEMA)
for i in range(5):
    t.append(rows(i * 100, 100))
batches = t.scanner(batch_size=100).to_batches()
first = next(batches).num_rows
print(first + io_pool().submit(lambda: sum(b.num_rows for b in batches)).result())
"""
    env = dict(__import__("os").environ, LAMINA_IO_THREADS="1")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "500"


def test_fragments_must_be_a_list(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for bad in (5, "3"):
        with pytest.raises(InvalidArgument, match="fragment ids"):
            t.scanner(fragments=bad)


def test_a_filter_the_zone_maps_prove_for_every_row_is_not_evaluated_there(tmp_path, monkeypatch):
    """A fragment whose zone maps put every row inside the filter is returned without evaluating it (deletions
    still apply); one that may hold a row outside it, or a NULL, is filtered; the rows equal a filtered read."""
    import lamina.scan as scan_module

    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    for ids in (list(range(0, 100)), list(range(100, 200)), [None, 1, 2]):
        t.append(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]}, schema=schema))
    t.delete("id = 50")
    seen: list[bool] = []
    real = scan_module.read_fragment

    def spy(store, fragment, schema, columns=None, flt=None, **kw):
        seen.append(flt is None)
        return real(store, fragment, schema, columns, flt, **kw)

    monkeypatch.setattr(scan_module, "read_fragment", spy)
    got = t.to_arrow(filter="id >= 0 AND id < 150")
    assert seen == [True, False, False]  # 0..99 proven; 100..199 partly; the NULL makes the filter NULL there
    want = [i for i in range(150) if i != 50] + [1, 2]
    assert sorted(got.column("id").to_pylist()) == sorted(want)
    assert got.column("v").to_pylist() == [f"v{i}" for i in got.column("id").to_pylist()]
