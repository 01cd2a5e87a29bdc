"""The native decoded-chunk cache keeps a row group's long-string column (8–32 MiB decoded), so a
second point read of the same fragment decodes nothing (issue 14 item 5: FTS hit rows)."""

import pyarrow as pa

import lamina
from lamina import _native
from lamina.cache import clear_caches

MiB = 1 << 20


def _doc_table(path: str, rows: int, doc_bytes: int) -> lamina.Table:
    schema = pa.schema([("id", pa.int64()), ("doc", pa.string())])
    t = lamina.create_table(path, schema)
    docs = [f"{i:08d}" + "x" * (doc_bytes - 8) for i in range(rows)]
    t.append(pa.table({"id": pa.array(range(rows), pa.int64()), "doc": docs}, schema=schema), row_group_rows=rows)
    return lamina.open_table(path)


def test_a_column_chunk_of_12_mib_decoded_is_cached(tmp_path):
    rows, doc_bytes = 12_000, 1_000  # one row group; `doc` ~12 MB uncompressed: above the old 8 MiB limit
    t = _doc_table(str(tmp_path / "t"), rows, doc_bytes)
    (frag,) = t.manifest.fragments
    wanted = [(frag.id << 32) | o for o in (3, 4_321, 11_999)]
    clear_caches()
    try:
        _native.clear_native_caches(64 * MiB, 256 * MiB)
        first = t.take(wanted, ["doc"])
        entries, held, _, _, misses = _native.native_cache_stats()["chunks"]
        assert entries == 1 and held > 8 * MiB and misses == 1  # the whole `doc` chunk, decoded once and kept
        again = t.take(wanted[::-1], ["doc"])
        assert _native.native_cache_stats()["chunks"][3:] == (1, 1)  # the second read: a hit, nothing decoded
        assert again.column("doc").to_pylist() == first.column("doc").to_pylist()[::-1]
        assert [d[:8] for d in first.column("doc").to_pylist()] == ["00000003", "00004321", "00011999"]
    finally:
        _native.clear_native_caches(64 * MiB, 256 * MiB)


def test_a_chunk_above_a_quarter_of_the_budget_is_read_by_pages_and_not_kept(tmp_path):
    rows, doc_bytes = 2_000, 1_000  # `doc` ~2 MB uncompressed
    t = _doc_table(str(tmp_path / "t"), rows, doc_bytes)
    (frag,) = t.manifest.fragments
    wanted = [(frag.id << 32) | o for o in (0, 1_999)]
    clear_caches()
    try:
        _native.clear_native_caches(64 * MiB, 6 * MiB)  # a quarter: 1.5 MiB < the chunk, though the chunk fits
        got = t.take(wanted, ["doc"])
        assert _native.native_cache_stats()["chunks"][:2] == (0, 0)
        assert [d[:8] for d in got.column("doc").to_pylist()] == ["00000000", "00001999"]
        _native.clear_native_caches(64 * MiB, 16 * MiB)  # a quarter: 4 MiB: kept
        assert t.take(wanted, ["doc"]).equals(got)
        assert _native.native_cache_stats()["chunks"][0] == 1
    finally:
        _native.clear_native_caches(64 * MiB, 256 * MiB)
