"""Decoding a manifest (lamina/manifest/codec.py): each field of a fragment and index entry is checked, a
reopened table keeps every field the planner and readers use, a transaction sidecar belongs to its version,
and JSON that is not a Lamina manifest, or a manifest of a newer format, is refused.

The manifests here are re-encoded (valid manifest checksum), so only the field checks can catch
what is wrong, and the error must name the manifest and the fragment or index. Each case pins a
behaviour that once survived mutation testing (docs/RELIABILITY.md, "Mutation testing").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import time

import pytest

import lamina
from lamina.errors import CorruptFile
from lamina.manifest import DeletionFile, encode_manifest, manifest_path
from lamina.planner import CompactionOptions, plan_compaction
from lamina.planner.eligibility import BINARY_COPY
from tests.lamina.helpers import SCHEMA, ids_of, put_next_version, rows

# Fragments held in the root and fragments in manifest segments are checked by different code: both.
pytestmark = pytest.mark.usefixtures("manifest_layout")


def _table(uri, **kwargs):
    t = lamina.create_table(uri, SCHEMA, **kwargs)
    t.append(rows(0, 100))
    t.append(rows(100, 100))
    return t


def _with_fragment0(t, **changes):
    m = t.manifest
    f0 = dataclasses.replace(m.fragments[0], **changes)
    return put_next_version(t, fragments=(f0,) + m.fragments[1:])


def _where(t, version):
    return re.escape(t.store.describe(manifest_path(version)))


@pytest.mark.parametrize(
    "changes,problem",
    [
        ({"path": "elsewhere/0.parquet"}, r"data file 'elsewhere/0.parquet' is not under data/"),
        ({"path": "data/../../escape.parquet"}, r"path 'data/../../escape.parquet'"),
        ({"deletion": DeletionFile("/abs/0.bin", 1, None)}, r"path '/abs/0.bin'"),
        ({"checksum": 12345678}, r"malformed checksum 12345678"),
        ({"checksum": "crc32c:0123"}, r"malformed checksum 'crc32c:0123'"),
        ({"checksum": "md5:01234567"}, r"malformed checksum 'md5:01234567'"),
        ({"checksum": "crc32c:012345678"}, r"malformed checksum 'crc32c:012345678'"),
        ({"deletion": DeletionFile("data/0.bin", 1, None)}, r"deletion file 'data/0.bin' is not under _deletions/"),
        ({"deletion": DeletionFile("_deletions/0.bin", 1, "crc32c:xyz")}, r"malformed checksum 'crc32c:xyz'"),
        ({"rows": 101}, r"row counts are inconsistent \(rows=101, deleted=0\)"),
    ],
)
def test_malformed_fragment_entry_is_corrupt_naming_manifest_and_fragment(local_table_uri, changes, problem):
    t = _table(local_table_uri)
    version = _with_fragment0(t, **changes)
    with pytest.raises(CorruptFile, match=rf"manifest {_where(t, version)} fragment 0: {problem}"):
        lamina.open_table(local_table_uri)
    assert ids_of(lamina.open_table(local_table_uri, version=version - 1)) == list(range(200))


def test_well_formed_checksums_are_accepted(local_table_uri):
    t = _table(local_table_uri)
    checksum = t.manifest.fragments[0].checksum
    assert checksum is not None and checksum.startswith("crc32c:") and len(checksum) == len("crc32c:") + 8
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(200))


def test_malformed_index_segment_is_corrupt_naming_manifest_and_index(local_table_uri):
    t = _table(local_table_uri)
    t.create_index("id", "btree", name="by_id")
    ix = t.manifest.indices[0]
    bad = dataclasses.replace(ix, segments=(dataclasses.replace(ix.segments[0], path="data/seg.idx"),))
    version = put_next_version(t, indices=(bad,))
    with pytest.raises(
        CorruptFile,
        match=rf"manifest {_where(t, version)} index 'by_id': "
        r"segment 'data/seg.idx' is not under _indices/",
    ):
        lamina.open_table(local_table_uri)


def test_reopened_table_keeps_every_field_the_planner_and_readers_use(local_table_uri):
    """File versions, row-group sizes, checksums, index segments survive the manifest round trip."""
    t = _table(local_table_uri, stable_row_ids=True)
    t.create_index("id", "btree", name="by_id")
    t.delete("id < 3")
    reopened = lamina.open_table(local_table_uri)
    assert reopened.manifest.fragments == t.manifest.fragments
    assert reopened.manifest.indices == t.manifest.indices
    assert [f.row_ids for f in reopened.manifest.fragments] == [((0, 100),), ((100, 200),)]
    plan = plan_compaction(reopened.manifest, CompactionOptions(min_row_group_bytes=0))
    # deletions: fragment 0's one row group holds deleted rows and is re-encoded, fragment 1 is copied
    # (issue 14's deletion-aware copy; without the deletion the plan is a binary copy, below)
    assert [(g.fragment_ids, g.mode) for g in plan.groups] == [((0, 1), "hybrid")]
    assert [a.action for a in plan.groups[0].actions] == ["encode", "copy"]
    t.reload()
    undeleted = lamina.open_table(local_table_uri, version=4)
    plan = plan_compaction(undeleted.manifest, CompactionOptions(min_row_group_bytes=0))
    assert [(g.fragment_ids, g.mode) for g in plan.groups] == [((0, 1), BINARY_COPY)]
    got = reopened.to_arrow(columns=["id"], with_row_id=True)
    assert got.column(got.num_columns - 1).to_pylist() == list(range(3, 200))


def test_fragment_whose_rows_are_all_deleted_is_still_a_valid_manifest(local_table_uri):
    t = _table(local_table_uri)
    t.delete("id < 99")
    f0 = t.manifest.fragments[0]
    version = _with_fragment0(t, deletion=dataclasses.replace(f0.deletion, deleted_rows=100))
    m = lamina.open_table(local_table_uri).manifest
    assert m.version == version and m.fragments[0].deleted_rows == m.fragments[0].rows == 100


def test_transaction_sidecar_is_kept_with_its_version(local_table_uri):
    """A sidecar (a transaction record too large to inline) belongs to its version: cleanup keeps it."""
    t = _table(local_table_uri)
    t.store.put("_transactions/big.json", b"{}")
    put_next_version(t, transaction={**t.manifest.transaction, "uuid": "e" * 32, "sidecar": "_transactions/big.json"})
    t.store.put("_transactions/orphan.json", b"{}")
    then = time.time() - 3 * 3600
    for name in ("big.json", "orphan.json"):
        os.utime(os.path.join(local_table_uri, "_transactions", name), (then, then))
    latest = lamina.open_table(local_table_uri)
    assert "_transactions/big.json" in latest.manifest.referenced_paths()
    assert latest.cleanup(older_than=dt.timedelta(hours=2)).files_removed == 1
    assert t.store.exists("_transactions/big.json") and not t.store.exists("_transactions/orphan.json")


def _put_raw(t, body):
    import json

    version = t.version + 1
    assert t.store.put_if_absent(manifest_path(version), json.dumps(body).encode())
    return version


@pytest.mark.parametrize("body", [[1, 2, 3], {"format": "delta.log", "version": 4}])
def test_json_that_is_not_a_lamina_manifest_is_corrupt(local_table_uri, body):
    t = _table(local_table_uri)
    version = _put_raw(t, body)
    with pytest.raises(
        CorruptFile,
        match=rf"manifest {_where(t, version)} is corrupt: "
        r"not a Lamina manifest\. Open an earlier version",
    ):
        lamina.open_table(local_table_uri)


def test_manifest_of_a_newer_format_asks_for_an_upgrade(local_table_uri):
    import json

    from lamina.errors import LaminaError

    t = _table(local_table_uri)
    body = json.loads(encode_manifest(t.manifest.replace(version=t.version + 1)))
    body["format_version"] = 99
    version = _put_raw(t, body)
    with pytest.raises(
        LaminaError,
        match=rf"manifest {_where(t, version)} has format version 99; "
        r"this Lamina reads versions 1, 2, 3: upgrade Lamina",
    ):
        lamina.open_table(local_table_uri)
