"""lamina.jobs.index on a real Ray cluster: builds over local and S3 tables, updates, every compaction
mode keeping indices exact and covering, a racing compaction, a killed build worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa

import lamina
from lamina.faults import FAULT_KILL_WORKER
from lamina.filter import parse_filter
from lamina.index import IndexOptions
from lamina.jobs.compact import compact
from lamina.jobs.index import main, run
from tests.compaction_helpers import MIXED_MODES, MIXED_OPTIONS, mixed_table
from tests.lamina.helpers import rows

REPO = Path(__file__).resolve().parents[2]
FILTERS = [
    "id = 5000",
    "id IN (3, 4100, 17999, 30000, 99999)",
    "id >= 15950 AND id < 16150",
    "category = 'b' AND id BETWEEN 8000 AND 8100",
    "category IN ('a', 'c') AND id > 31900",
    "category = 'zzz'",
]
SMALL = IndexOptions(task_rows=5000, segment_rows=12000)


def assert_exact(t: lamina.Table) -> None:
    everything = t.to_arrow(with_row_address=True)
    for flt in FILTERS:
        want = everything.filter(parse_filter(flt, t.schema).expression)
        got = t.to_arrow(filter=flt, with_row_address=True)
        assert got.equals(want), f"{flt}: {got.num_rows} rows, brute force {want.num_rows}"


def search_rows(t: lamina.Table, text: str) -> int:
    return t.search(text, "category", k=100000).num_rows


def test_job_builds_every_kind_local_and_s3(ray_cluster, table_location, capsys):
    uri, opts = table_location
    t = mixed_table(uri, opts)
    for column, kind in (("id", "btree"), ("category", "bitmap"), ("category", "fts")):
        result = run(uri, column, kind, options=SMALL, storage_options=opts)
        assert result.action == "create" and result.uncovered_after == 0
        assert result.segments == 3 and result.fragments == 8, result  # 32,000 rows in segments of <= 12,000
    t = lamina.open_table(uri, storage_options=opts)
    assert not [o.path for o in t.store.list("_indices/") if "part-" in o.path], "parts are removed after the merge"
    assert_exact(t)
    assert search_rows(t, "b") == t.count_rows("category = 'b'")

    t.append(rows(40000, 3000))
    t.delete("id >= 4000 AND id < 4100")
    assert_exact(t)
    argv = [uri, "--update", "--name", "id_btree", "--json"]
    argv += sum((["--storage-option", f"{k}={v}"] for k, v in (opts or {}).items()), [])
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["action"] == "update" and out["fragments"] == 1 and out["uncovered_after"] == 0
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "none"
    assert_exact(lamina.open_table(uri, storage_options=opts))


def test_job_refuses_bad_arguments(ray_cluster, local_table_uri, capsys):
    mixed_table(local_table_uri)
    assert main([local_table_uri, "--column", "nope", "--kind", "btree"]) == 2
    assert "no such column" in capsys.readouterr().err
    assert main([local_table_uri, "--column", "vec", "--kind", "bitmap"]) == 2
    assert "not supported" in capsys.readouterr().err
    assert main([local_table_uri, "--update", "--name", "missing"]) == 1
    assert "no index named 'missing'" in capsys.readouterr().err
    assert lamina.open_table(local_table_uri).list_indices() == []


def test_every_compaction_mode_keeps_indices_exact_and_covering(ray_cluster, table_location):
    uri, opts = table_location
    t = mixed_table(uri, opts)
    for column, kind in (("id", "btree"), ("category", "bitmap"), ("category", "fts")):
        t.create_index(column, kind, options=SMALL)
    plan, summary = compact(uri, MIXED_OPTIONS, storage_options=opts)
    assert [(g.mode, g.reason) for g in plan.groups] == MIXED_MODES and summary.failed_groups == 0
    after = lamina.open_table(uri, storage_options=opts)
    for info in after.list_indices():
        assert info.uncovered_fragments == 0, f"{info.name} lost coverage in the rewrite commit"
    assert "scan for 0 fragment(s)" in after.explain("id = 5000")
    assert_exact(after)
    assert search_rows(after, "a") == after.count_rows("category = 'a'")
    # segments of the replaced fragments are gone from the manifest (their files go at cleanup)
    for ix in after.manifest.indices:
        assert len(set(ix.coverage(after.manifest.fragment_map()).values())) == len(ix.segments)
    after.cleanup(older_than=0, enforce_retention=False)
    referenced = after.manifest.referenced_paths()
    assert {o.path for o in after.store.list("_indices/")} == {p for p in referenced if p.startswith("_indices/")}
    assert_exact(lamina.open_table(uri, storage_options=opts))


def test_index_build_racing_a_compaction_is_never_stale(ray_cluster, local_table_uri):
    t = mixed_table(local_table_uri)
    t.create_index("category", "bitmap")
    errors: list[BaseException] = []

    def build():
        try:
            lamina.open_table(local_table_uri).create_index(
                "id", "btree", options=IndexOptions(task_rows=2000, segment_rows=4000)
            )
        except BaseException as e:  # reported below
            errors.append(e)

    address = ray_cluster.get_runtime_context().gcs_address
    proc = subprocess.Popen(
        [sys.executable, "-m", "lamina.jobs.compact", local_table_uri, "--json", "--set", "target_rows_per_fragment=8000"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": address},
    )
    builder = threading.Thread(target=build)
    builder.start()
    builder.join(300)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert not errors, errors
    final = lamina.open_table(local_table_uri)
    ops = [v.operation for v in final.versions()][-2:]
    assert sorted(ops) == ["create_index", "rewrite"], ops
    assert_exact(final)
    t = lamina.open_table(local_table_uri)
    t.update_index("id_btree")
    assert all(i.uncovered_fragments == 0 for i in t.list_indices())
    assert_exact(t)


def test_killed_build_worker_is_retried(ray_cluster, local_table_uri, tmp_path):
    mixed_table(local_table_uri)
    marker = tmp_path / "killed-once"
    result = run(
        local_table_uri,
        "id",
        "btree",
        options=SMALL,
        max_concurrency=1,
        runtime_env={"env_vars": {FAULT_KILL_WORKER: str(marker)}},
    )
    assert marker.exists(), "a build worker was SIGKILLed after writing its part"
    assert result.uncovered_after == 0
    t = lamina.open_table(local_table_uri)
    assert_exact(t)
    t.cleanup(older_than=0, enforce_retention=False)
    assert {o.path for o in t.store.list("_indices/")} == set(t.manifest.indices[0].files)


def test_table_pickles_into_ray_tasks_and_reads_through_indices(ray_cluster, local_table_uri):
    t = mixed_table(local_table_uri)
    t.create_index("id", "btree")

    @ray_cluster.remote
    def lookup(table, flt):
        return table.to_arrow(filter=flt).num_rows, table.explain(flt)

    n, plan = ray_cluster.get(lookup.remote(t, "id = 5000"))
    assert n == 1 and "index 'id_btree'" in plan
    assert isinstance(t.to_arrow(filter="id = 5000"), pa.Table)


def test_job_builds_over_files_of_earlier_schemas(ray_cluster, local_table_uri):
    """Ray build tasks read each fragment's column through the schema its file was written in (the column's
    field, with its id, travels with the task): a renamed column, a name dropped and added again, a default."""
    t = lamina.create_table(local_table_uri, rows(0, 1).schema, row_group_rows=500)
    for k in range(4):
        t.append(rows(1000 * k, 1000))
    t.rename_column("category", "kind")
    t.drop_columns("score")
    t.add_columns(pa.field("score", pa.float64()), defaults={"score": -1.0})
    t.add_columns(pa.field("category", pa.string()))
    for column, kind in (("kind", "bitmap"), ("kind", "fts"), ("score", "btree"), ("category", "bitmap")):
        result = run(local_table_uri, column, kind, options=SMALL)
        assert result.action == "create" and result.uncovered_after == 0
    t = lamina.open_table(local_table_uri)
    for flt in (
        "kind = 'b'",
        "score = -1.0",
        "score > 0",
        "category IS NULL",
        "category = 'a'",
        "kind IN ('a', 'c') AND id < 900",
    ):
        assert t.to_arrow(filter=flt).equals(t.to_arrow(filter=flt, use_index=False)), flt
    assert t.count_rows("score = -1.0") == 4000 and t.count_rows("category = 'a'") == 0
    assert search_rows(t.checkout(t.version), "b") == 0  # search_rows names "category": the new, empty column
    assert t.search("b", "kind", k=100000).num_rows == t.count_rows("kind = 'b'")
