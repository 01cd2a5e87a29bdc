"""Corrupt stored bytes reach the native readers as CorruptFile, never as a pyo3 PanicException.

Issue 16, defect 8: corrupt data files reached the native reader through ``take()``,
index-served reads and compaction and ended in ``PanicException`` (a BaseException that
``except Exception`` does not catch) or in allocations sized by a corrupt length field. The
exhaustive corpus (every reader, truncations, bit flips, bounded fuzzing) is the cargo test
suite (``native/src/corrupt_tests.rs``, ``native/src/index/corrupt_tests.rs``); these tests
check the same through the Python entry points.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina import _native
from lamina.errors import CorruptFile, LaminaError
from lamina.planner import CompactionOptions, plan_compaction
from lamina.workers.compaction import GroupCompactor, GroupTask
from tests.lamina.helpers import SCHEMA, rows


def first_page_offset_moved_before_its_chunk(data: bytes) -> bytes:
    """The data file with the offset index of its first column chunk pointing before the chunk.

    The first chunk starts at byte 4 (after the magic); its offset index is encoded as
    ``19 1c 16 08 ...`` (field 1: a list of one PageLocation, whose i64 offset 4 is the zigzag
    varint 08). Clearing that bit moves the page to offset 0: parquet's page reader then
    subtracts the chunk start from it (an overflow, a panic in checked builds).
    """
    at = data.rfind(b"\x19\x1c\x16\x08")
    assert at > 0, "the first chunk's offset index was not found"
    out = bytearray(data)
    out[at + 3] = 0x00
    return bytes(out)


def one_fragment_table(uri: str) -> lamina.Table:
    t = lamina.create_table(uri, SCHEMA)
    t.append(rows(0, 3000), row_group_rows=1000)
    return t


def test_hostile_page_offsets_reach_take_and_indexed_reads_as_corrupt_file(tmp_path):
    t = one_fragment_table(str(tmp_path / "t"))
    t.create_index("id", "btree")
    frag = t.manifest.fragments[0]
    path = t.store.local_path(frag.path)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(first_page_offset_moved_before_its_chunk(data))
    t = lamina.open_table(str(tmp_path / "t"))
    with pytest.raises(CorruptFile, match=frag.path.split("/")[-1]):
        t.take([5, 1500])
    with pytest.raises(CorruptFile, match=frag.path.split("/")[-1]):
        t.to_arrow(filter="id = 5")  # served by the btree, then a point read of the data file


def test_corrupt_sources_fail_their_compaction_group_with_corrupt_file(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 3000), row_group_rows=1000)
    t.append(rows(3000, 500), row_group_rows=1000)
    options = CompactionOptions(target_rows_per_fragment=100_000, min_row_group_bytes=16 * 1024)
    plan = plan_compaction(t.manifest, options, t.uri)
    assert [g.mode for g in plan.groups] == ["hybrid"]
    frags = t.manifest.fragment_map()
    task = GroupTask(
        t.uri,
        None,
        plan.groups[0],
        tuple(frags[i] for i in plan.groups[0].fragment_ids),
        t.schema,
        t.write_options,
        options,
        False,
    )
    victim = t.store.local_path(task.fragments[0].path)
    with open(victim, "rb") as f:
        valid = f.read()
    rng = random.Random(16)
    variants = [("page offset before its chunk", first_page_offset_moved_before_its_chunk(valid))]
    variants += [(f"truncated to {n}", valid[:n]) for n in range(0, len(valid), max(1, len(valid) // 25))]
    for _ in range(60):  # flips where the footer, page indexes and last pages are
        pos = len(valid) - 1 - rng.randrange(min(len(valid), 6000))
        flipped = bytearray(valid)
        flipped[pos] ^= 1 << rng.randrange(8)
        variants.append((f"bit flip at {pos}", bytes(flipped)))
    corrupt = 0
    for how, variant in variants:
        with open(victim, "wb") as f:
            f.write(variant)
        r = GroupCompactor().run(task)  # a PanicException would escape here: it is not an Exception
        if not r.ok:
            assert r.error.startswith("CorruptFile") and task.fragments[0].path in r.error, (how, r.error)
            corrupt += 1
        elif how.startswith(("page offset", "truncated")):
            pytest.fail(f"{how}: compacted without an error")
    assert corrupt >= 25


def test_native_entry_points_name_the_object_in_lamina_errors(tmp_path):
    with pytest.raises(CorruptFile, match="_deletions/d.bin"):
        _native.decode_deletions(b"\x00garbage", "_deletions/d.bin")
    bitmap = _native.encode_deletions(pa.array([1, 5, 9], pa.uint32()))
    assert _native.decode_deletions(bitmap, "_deletions/d.bin", rows=10).to_pylist() == [1, 5, 9]
    with pytest.raises(CorruptFile, match="offset 9 of a fragment of 9 rows"):
        _native.decode_deletions(bitmap, "_deletions/d.bin", rows=9)
    with pytest.raises(CorruptFile, match="_wal/0001"):
        _native.wal_decode(b"\x05\x00\x00", pa.schema([("k", pa.int64())]), "_wal/0001")
    with pytest.raises(CorruptFile, match="_indices/i.idx"):
        _native.index_directory_range(b"x" * 40, 40, "_indices/i.idx")
    with pytest.raises(CorruptFile, match="_indices/i.idx"):
        _native.IndexSegment(b"x" * 32, b"", 32, "_indices/i.idx")
    garbage = tmp_path / "g.parquet"
    garbage.write_bytes(b"PAR1" + b"\xff" * 100 + b"PAR1")
    with pytest.raises(CorruptFile, match="g.parquet"):
        _native.take_rows_many([(str(garbage), str(garbage), None, 108, 1)], np.array([0], "<u4").tobytes(), ["id"], 1)
    with pytest.raises(CorruptFile, match="s3://b/g.parquet"):
        _native.take_rows_many(
            [("s3://b/g.parquet", None, garbage.read_bytes(), 108, 1)], np.array([0], "<u4").tobytes(), ["id"], 2
        )
    with pytest.raises(CorruptFile, match="manifest records 99"):
        _native.take_rows_many([(str(garbage), str(garbage), None, 99, 1)], np.array([0], "<u4").tobytes(), ["id"], 1)
    assert issubclass(CorruptFile, LaminaError) and issubclass(CorruptFile, Exception)


def test_written_files_carry_the_crc32c_computed_while_writing(tmp_path):
    """Issue 16, defect 9 (native part): every file the native code writes reports its checksum."""
    assert _native.checksum(b"123456789") == "crc32c:e3069283"  # the CRC-32C check value
    data = rows(0, 5000)
    path = str(tmp_path / "a.parquet")
    meta = _native.write_data_file(path, SCHEMA, data.to_batches(), row_group_rows=1000)
    assert meta["checksum"] == _native.file_checksum(path) == _native.checksum(open(path, "rb").read())
    out = str(tmp_path / "b.parquet")
    plan = [("copy", 0, 0), ("encode", 0, 1), ("copy", 0, 2), ("encode", 0, 3), ("encode", 0, 4)]
    meta = _native.rewrite_data_file([(path, pa.array([], pa.uint32()))], plan, SCHEMA, out, row_group_rows=1000)
    assert meta["row_groups_copied"] == 2 and meta["checksum"] == _native.file_checksum(out)
    seg = str(tmp_path / "s.idx")
    built = _native.build_index_segment("btree", [(0, data.column("id").combine_chunks())], seg)
    assert built["checksum"] == _native.file_checksum(seg)
    in_memory = _native.build_index_segment("btree", [(0, data.column("id").combine_chunks())])
    assert in_memory["checksum"] == _native.checksum(in_memory["data"]) == built["checksum"]
    merged = str(tmp_path / "m.idx")
    assert _native.merge_index_segments("btree", [(seg, "s.idx")], merged)["checksum"] == _native.file_checksum(merged)
    with pytest.raises(lamina.errors.StorageError, match="missing.parquet"):
        _native.file_checksum(str(tmp_path / "missing.parquet"))


def test_page_checksums_of_other_writers_are_verified(tmp_path):
    """Files written with Parquet page CRCs (pyarrow's write_page_checksum) are checked page by page."""
    import pyarrow.parquet as pq

    path = tmp_path / "crc.parquet"
    pq.write_table(
        pa.table({"id": pa.array(range(100_000), pa.int64())}),
        path,
        write_page_checksum=True,
        compression="zstd",
        data_page_size=8192,
        use_dictionary=False,
    )
    raw = bytearray(path.read_bytes())
    first_page = pq.ParquetFile(path).metadata.row_group(0).column(0).data_page_offset
    raw[first_page + 200] ^= 0x10  # inside the first page's compressed values
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptFile, match="Page CRC checksum mismatch"):
        _native.take_rows_many([(str(path), str(path), None, len(raw), 2)], np.array([0, 5], "<u4").tobytes(), ["id"], 1)
