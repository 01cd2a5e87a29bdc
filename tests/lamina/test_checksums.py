"""Every data, deletion and index file has a CRC32C in the manifest; a flipped bit is reported as
``CorruptFile`` naming the file (or by ``verify``), never returned as rows (issue 16, defect 9)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

import lamina
from lamina import _native
from lamina.errors import CorruptFile
from tests.lamina.helpers import SCHEMA, ids_of, rows

ROOT = Path(__file__).resolve().parents[2]


def _crc(store, path):
    return _native.checksum(store.get(path))


def test_every_file_a_version_needs_has_its_checksum_in_the_manifest(table_location):
    from lamina.commit import commit
    from lamina.datafile import WriteOptions
    from lamina.rewrite import full_rewrite
    from lamina.transaction import Rewrite

    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 300))
    t.append(rows(300, 300))
    t.delete("id < 20")
    base = t.manifest  # a compaction output
    commit(t.store, Rewrite(base.version, [full_rewrite(t.store, base, [f.id for f in base.fragments], WriteOptions())]), base)
    t.reload()
    t.append(rows(600, 100))
    t.create_index("id", "btree")
    t.create_index("category", "bitmap")
    t.delete("id IN (400, 650)")
    m = t.manifest
    files = 0
    for f in m.fragments:
        assert f.checksum == _crc(t.store, f.path)
        files += 1
        if f.deletion:
            assert f.deletion.checksum == _crc(t.store, f.deletion.path)
            files += 1
    for ix in m.indices:
        for seg in ix.segments:
            assert seg.checksum == _crc(t.store, seg.path)
            files += 1
    assert files >= 4
    report = t.verify()
    assert report.ok and report.files_checked == files and report.without_checksum == 0


def _flip(path: Path, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))


def test_flipped_bits_in_a_data_file_are_never_returned_as_rows(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 2000), row_group_rows=500)
    expected = t.to_arrow()
    path = Path(t.store.local_path(t.manifest.fragments[0].path))
    original = path.read_bytes()
    rng = random.Random(9)
    for bit in rng.sample(range(len(original) * 8), 300):
        _flip(path, bit)
        try:
            with pytest.raises(CorruptFile, match=path.name):
                t.to_arrow()
            report = t.verify()
            assert not report.ok and path.name in report.problems[0]
        finally:
            path.write_bytes(original)
    assert t.to_arrow().equals(expected) and t.verify().ok


def test_flipped_bit_in_a_deletion_file_is_corrupt_not_other_deletions(local_table_uri):
    import lamina.deletion

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    t.delete("id IN (3, 50, 77)")
    path = Path(t.store.local_path(t.manifest.fragments[0].deletion.path))
    original = path.read_bytes()
    for bit in range(0, len(original) * 8, 3):
        _flip(path, bit)
        lamina.deletion._CACHE.clear()  # a process that never read it
        try:
            with pytest.raises(CorruptFile, match="deletion file"):
                lamina.open_table(local_table_uri).to_arrow()
        finally:
            path.write_bytes(original)
    lamina.deletion._CACHE.clear()
    assert ids_of(lamina.open_table(local_table_uri)) == [i for i in range(100) if i not in (3, 50, 77)]


def test_compaction_never_copies_a_damaged_source_under_a_fresh_checksum(table_location, tmp_path):
    from lamina.datafile import WriteOptions
    from lamina.planner import CompactionOptions, plan_compaction
    from lamina.workers.compaction import GroupCompactor, tasks_for

    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for start in range(0, 4000, 1000):
        t.append(rows(start, 1000), row_group_rows=1000)
    victim = t.manifest.fragments[1]
    data = bytearray(t.store.get(victim.path))
    data[len(data) // 3] ^= 0x10  # inside a column chunk: a binary copy would splice it as is
    t.store.delete([victim.path])
    t.store.put(victim.path, bytes(data))
    options = CompactionOptions(target_rows_per_fragment=8000, min_row_group_bytes=1)
    plan = plan_compaction(t.manifest, options, t.uri)
    assert plan.groups and plan.groups[0].mode == "binary_copy"
    task = tasks_for(plan, t.manifest, uri, opts, WriteOptions(), options.read_batch_bytes)[0]
    result = GroupCompactor().run(task)
    assert not result.ok and "CorruptFile" in result.error and victim.path in result.error
    assert [o.path for o in t.store.list("data/")] == sorted(f.path for f in t.manifest.fragments)


def test_verify_names_missing_truncated_and_corrupt_files(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in range(0, 300, 100):
        t.append(rows(start, 100))
    t.create_index("id", "btree")
    a, b, c = (Path(t.store.local_path(f.path)) for f in t.manifest.fragments)
    a.unlink()
    b.write_bytes(b.read_bytes()[:-10])
    seg = Path(t.store.local_path(t.manifest.indices[0].segments[0].path))
    _flip(seg, 100)
    report = t.verify()
    assert not report.ok and len(report.problems) == 3
    text = "\n".join(report.problems)
    assert f"{a.name} is missing" in text and f"{b.name} is" in text and "truncated" in text
    assert "index segment" in text and "corrupt" in text
    out = subprocess.run([sys.executable, "-m", "lamina.jobs.verify", local_table_uri], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and "3 problem(s)" in out.stdout and a.name in out.stdout


def test_verify_job_on_a_healthy_table(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    out = subprocess.run(
        [sys.executable, "-m", "lamina.jobs.verify", local_table_uri, "--json"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    import json

    report = json.loads(out.stdout)
    assert report["ok"] and report["files_checked"] == 1
    bad = subprocess.run(
        [sys.executable, "-m", "lamina.jobs.verify", local_table_uri, "--threads", "0"], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--threads" in bad.stderr


def _segmented_table(uri, appends):
    """A table laid out in manifest segments (tests/conftest.py keeps them small): one fragment per append."""
    t = lamina.create_table(uri, SCHEMA)
    for start in range(0, appends * 10, 10):
        t.append(rows(start, 10))
    t = lamina.open_table(uri)
    assert t.verify().ok
    return t


def test_verify_reports_missing_and_corrupt_manifest_segments_and_keeps_going(local_table_uri):
    t = _segmented_table(local_table_uri, 12)
    m = t.manifest
    assert len(m.segments) >= 3, "laid out in several manifest segments"
    gone, bad, intact = m.segments[0], m.segments[1], m.segments[-1]
    Path(t.store.local_path(gone.path)).unlink()
    _flip(Path(t.store.local_path(bad.path)), 200)
    victim = intact.fragments[0]  # a data file listed by a segment that is still sound
    Path(t.store.local_path(victim.path)).unlink()

    report = t.verify()  # in this process the segments are cached: verify reads storage, not the cache
    text = "\n".join(report.problems)
    assert not report.ok and len(report.problems) == 3, text
    assert f"manifest segment {t.store.describe(gone.path)} is missing" in text
    assert f"manifest segment {t.store.describe(bad.path)}" in text and "checksum" in text
    assert f"{Path(victim.path).name} is missing" in text
    assert report.manifest_objects_checked == len(m.segments) + len(m.segment_lists)

    out = subprocess.run([sys.executable, "-m", "lamina.jobs.verify", local_table_uri], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    assert gone.path in out.stdout and bad.path in out.stdout and Path(victim.path).name in out.stdout
    assert "3 problem(s)" in out.stdout


def test_verify_reports_a_missing_manifest_segment_list(local_table_uri):
    t = _segmented_table(local_table_uri, 24)
    m = t.manifest
    assert m.segment_lists, "enough segments for the root to name some through a segment list"
    lst = m.segment_lists[0]
    Path(t.store.local_path(lst.path)).unlink()
    report = t.verify()
    assert not report.ok and any(f"manifest segment list {t.store.describe(lst.path)} is missing" in p for p in report.problems)
    # A fresh process cannot list what the list named: the report says so, and the job exits 1.
    out = subprocess.run(
        [sys.executable, "-m", "lamina.jobs.verify", local_table_uri, "--json"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 1, out.stderr
    import json

    fresh = json.loads(out.stdout)
    assert not fresh["ok"] and lst.path in "\n".join(fresh["problems"])
