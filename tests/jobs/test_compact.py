"""lamina.jobs.compact on a real Ray cluster: every mode end to end, races, killed workers and drivers, failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lamina
from lamina.compaction import compact
from lamina.faults import FAULT_KILL_DRIVER_BEFORE_COMMIT, FAULT_KILL_WORKER
from lamina.jobs.compact import main
from lamina.planner import CompactionOptions
from tests.compaction_helpers import (
    DELETION_AWARE_COPIES,
    DELETION_AWARE_OPTIONS,
    EVOLVED_OPTIONS,
    MIXED_MODES,
    MIXED_OPTIONS,
    assert_rows_are_the_model,
    deletion_aware_table,
    evolved_table,
    mixed_table,
)
from tests.lamina.concurrent_writer import BASE_ROWS, appended_ids, deleted_ids
from tests.lamina.helpers import SCHEMA, ids_of, rows

REPO = Path(__file__).resolve().parents[2]


def test_every_mode_end_to_end(ray_cluster, table_location):
    uri, opts = table_location
    t = mixed_table(uri, opts)
    before = t.to_arrow()
    plan, summary = compact(uri, MIXED_OPTIONS, storage_options=opts)
    assert [(g.mode, g.reason) for g in plan.groups] == MIXED_MODES
    assert summary.failed_groups == 0 and len(summary.committed_versions) == 1
    after = lamina.open_table(uri, storage_options=opts)
    assert after.to_arrow().equals(before), "rows must be equal and in the same order"
    assert (summary.fragments_before, summary.fragments_after) == (8, 4)
    assert summary.rows_before == summary.rows_after == before.num_rows
    assert [f.deleted_rows for f in after.fragments()] == [0] * 4, "deletions materialized"
    copied = {g["mode"]: g for g in summary.groups}
    assert copied["binary_copy"]["row_groups_copied"] == 2 and copied["hybrid"]["row_groups_copied"] == 1


def test_clean_row_groups_next_to_deletions_are_copied_end_to_end(ray_cluster, table_location, capsys):
    uri, opts = table_location
    t = deletion_aware_table(uri, opts)
    before = t.to_arrow()
    if opts is None:  # --dry-run names each row group copied if clean, and why
        argv = [uri, "--dry-run", "--set", "target_rows_per_fragment=60000", "--set", "min_row_group_bytes=65536"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "hybrid       reason=some_row_groups_small_or_deleted" in out
        assert "fragment 4: rg 0-2 copy_if_clean: maybe_deleted (the fragment has 3 deleted rows" in out
    plan, summary = compact(uri, DELETION_AWARE_OPTIONS, storage_options=opts)
    assert [g.mode for g in plan.groups] == ["hybrid"] and summary.failed_groups == 0
    (g,) = summary.groups
    assert g["row_groups_copied"] == len(DELETION_AWARE_COPIES) and g["status"] == "committed"
    assert [line for line in g["resolved"] if ": encode" in line] == [
        "fragment 1 rg 1: encode (deleted (6 rows))",
        "fragment 4 rg 2: encode (deleted (3 rows))",
    ]
    after = lamina.open_table(uri, storage_options=opts)
    assert after.to_arrow().equals(before) and [f.deleted_rows for f in after.fragments()] == [0]


def test_dry_run_writes_nothing_and_json_summary(ray_cluster, local_table_uri, capsys):
    t = mixed_table(local_table_uri)
    files = sorted(o.path for o in t.store.list(""))
    assert (
        main(
            [
                local_table_uri,
                "--dry-run",
                "--json",
                "--set",
                "target_rows_per_fragment=8000",
                "--set",
                "min_row_group_bytes=65536",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert [(g["mode"], g["reason"]) for g in out["plan"]["groups"]] == MIXED_MODES
    assert sorted(o.path for o in t.store.list("")) == files
    assert lamina.open_table(local_table_uri).version == t.version

    assert main([local_table_uri, "--json", "--set", "target_rows_per_fragment=8000", "--partial-commit-every", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in (
        "table",
        "read_version",
        "committed_versions",
        "groups",
        "fragments_before",
        "fragments_after",
        "rows_before",
        "rows_after",
        "retries",
        "seconds",
    ):
        assert key in out
    assert len(out["committed_versions"]) == 4, "one commit per finished group"
    for g in out["groups"]:
        assert {"mode", "reason", "fragment_ids", "rows", "bytes_in", "bytes_out", "seconds"} <= set(g)
        assert g["status"] == "committed"


def test_an_evolved_table_end_to_end(ray_cluster, local_table_uri, capsys):
    t, model = evolved_table(local_table_uri)
    flags = ["--set", "target_rows_per_fragment=8000", "--set", f"min_row_group_bytes={EVOLVED_OPTIONS.min_row_group_bytes}"]
    assert main([local_table_uri, "--dry-run", *flags]) == 0
    out = capsys.readouterr().out
    assert "binary_copy  reason=all_row_groups_large     fragments [0,1]" in out
    assert "written in schema v0, its sources'" in out
    assert "hybrid       reason=schema v2 vs v5          fragments [2,3,4]" in out
    assert "fragment 2: rg 0 encode: schema v2 vs v5" in out
    assert "3 fragments written in earlier ones (v0: 2, v2: 1)" in out

    plan, summary = compact(local_table_uri, EVOLVED_OPTIONS)  # on Ray
    assert [(g["mode"], g["reason"], g["schema_id"], g["status"]) for g in summary.groups] == [
        ("binary_copy", "all_row_groups_large", 0, "committed"),
        ("hybrid", "schema v2 vs v5", 5, "committed"),
    ]
    t.reload()
    assert_rows_are_the_model(t, model)

    assert main([local_table_uri, "--json", "--set", "converge_schemas=true", *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(g["mode"], g["reason"], g["status"]) for g in out["groups"]] == [("full_rewrite", "schema v0 vs v5", "committed")]
    t.reload()
    assert {f.schema_id for f in t.manifest.fragments} == {5} and t.manifest.schemas == {}
    assert_rows_are_the_model(t, model)


def test_bad_config_exits_2(local_table_uri, tmp_path, capsys):
    lamina.create_table(local_table_uri, SCHEMA)
    assert main([local_table_uri, "--set", "target_rows_per_fragment=-1"]) == 2
    bad = tmp_path / "c.yaml"
    bad.write_text("compaction: {nope: 1}\n")
    assert main([local_table_uri, "--config", str(bad)]) == 2
    assert "unknown compaction option" in capsys.readouterr().err


def test_compaction_racing_appenders_and_deleters(ray_cluster, local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in range(0, BASE_ROWS, 50):
        t.append(rows(start, 50))
    workers = 2
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.lamina.concurrent_writer", local_table_uri, str(w), str(workers)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        for w in range(workers)
    ]
    options = CompactionOptions(target_rows_per_fragment=200, partial_commit_every=1, max_concurrency=2)
    _, first = compact(local_table_uri, options)
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
    _, second = compact(local_table_uri, options)  # what the writers added meanwhile
    expected = set(range(BASE_ROWS))
    for w in range(workers):
        expected -= set(deleted_ids(w, workers))
        expected |= set(appended_ids(w))
    got = ids_of(lamina.open_table(local_table_uri))
    assert len(got) == len(set(got)) and set(got) == expected
    assert first.failed_groups == second.failed_groups == 0


def test_killed_worker_is_retried_and_orphans_are_cleaned(ray_cluster, local_table_uri, tmp_path):
    t = mixed_table(local_table_uri)
    before = t.to_arrow()
    marker = tmp_path / "killed-once"
    _, summary = compact(
        local_table_uri,
        MIXED_OPTIONS.with_overrides(max_concurrency=1),
        runtime_env={"env_vars": {FAULT_KILL_WORKER: str(marker)}},
    )
    assert marker.exists(), "a worker was SIGKILLed mid-group"
    assert summary.failed_groups == 0
    after = lamina.open_table(local_table_uri)
    assert after.to_arrow().equals(before)
    referenced = after.manifest.referenced_paths()
    orphans = [o.path for o in after.store.list("data/") if o.path not in referenced]
    old_files = {f.path for f in t.manifest.fragments}
    assert len([o for o in orphans if o not in old_files]) == 1, "the killed attempt's output is an orphan"
    after.cleanup(older_than=0, enforce_retention=False)
    assert {o.path for o in after.store.list("data/")} == {p for p in after.manifest.referenced_paths() if p.startswith("data/")}
    assert lamina.open_table(local_table_uri).to_arrow().equals(before)


def test_driver_killed_before_commit_leaves_table_unchanged(ray_cluster, local_table_uri):
    t = mixed_table(local_table_uri)
    address = ray_cluster.get_runtime_context().gcs_address
    proc = subprocess.run(
        [sys.executable, "-m", "lamina.jobs.compact", local_table_uri, "--json", "--set", "target_rows_per_fragment=8000"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": address, FAULT_KILL_DRIVER_BEFORE_COMMIT: "1"},
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    after = lamina.open_table(local_table_uri)
    assert after.version == t.version and after.to_arrow().equals(t.to_arrow())
    written = [o.path for o in after.store.list("data/") if o.path not in after.manifest.referenced_paths()]
    assert len(written) == 4, "outputs were written, then abandoned uncommitted"


def test_corrupt_source_fails_its_group_and_others_commit(ray_cluster, local_table_uri):
    t = mixed_table(local_table_uri)
    victim = t.manifest.fragments[2]  # in the hybrid group
    data = t.store.get(victim.path)
    t.store.put(victim.path, data[:100])
    _, summary = compact(local_table_uri, MIXED_OPTIONS)
    assert summary.failed_groups == 1
    [failed] = [g for g in summary.groups if g["status"] == "failed"]
    assert victim.path in failed["error"] and failed["fragment_ids"] == [2, 3]
    assert sum(1 for g in summary.groups if g["status"] == "committed") == 3
    after = lamina.open_table(local_table_uri)
    assert [f.id for f in after.fragments()][1:3] == [2, 3], "the failed group's fragments are untouched"


def test_stable_row_ids_and_deletions_through_compaction(ray_cluster, local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA, stable_row_ids=True)
    for start in range(0, 4000, 1000):
        t.append(rows(start, 1000), row_group_rows=1000)
    t.delete("id IN (5, 1500)")  # group (0, 1): full rewrite; group (2, 3): binary copy
    before = t.to_arrow(columns=["id"], with_row_id=True, with_row_address=True)
    _, summary = compact(local_table_uri, CompactionOptions(target_rows_per_fragment=2000, min_row_group_bytes=0))
    assert summary.failed_groups == 0 and {g["mode"] for g in summary.groups} == {"binary_copy", "full_rewrite"}
    after = lamina.open_table(local_table_uri).to_arrow(columns=["id"], with_row_id=True, with_row_address=True)
    assert after.column("id").equals(before.column("id")) and after.column("_rowid").equals(before.column("_rowid"))
    assert not after.column("_rowaddr").equals(before.column("_rowaddr")), "addresses move, ids do not"


def test_runs_limited_by_max_plan_fragments_compact_a_table_in_turns(ray_cluster, local_table_uri, capsys):
    t = lamina.create_table(local_table_uri, SCHEMA)
    for k in range(12):
        t.append(rows(k * 10, 10))
    before = t.to_arrow()
    argv = [local_table_uri, "--set", "target_rows_per_fragment=40", "--set", "max_plan_fragments=4"]
    assert main(argv + ["--dry-run"]) == 0
    assert "plan limited to 4 fragments (max_plan_fragments)" in capsys.readouterr().out
    counts = [len(lamina.open_table(local_table_uri).fragments())]
    for _ in range(6):
        assert main(argv) == 0
        counts.append(len(lamina.open_table(local_table_uri).fragments()))
        if counts[-1] == counts[-2]:
            break
    assert counts[:4] == [12, 9, 6, 3] and counts[-1] == 3, counts  # 4 fragments into 1 per run, then nothing to do
    assert lamina.open_table(local_table_uri).to_arrow().equals(before)


def test_dry_run_of_a_clustered_table_prints_the_clustering_and_the_run_clusters_it(ray_cluster, local_table_uri, capsys):
    t = lamina.create_table(local_table_uri, SCHEMA)
    for k in range(16):
        t.append(rows(k * 125, 125))  # 125 rows: tier 3 of ratio 4, cascading into one sorted run
    t.set_clustering(["score", "ts"], curve="hilbert")
    before, files = t.to_arrow(), sorted(o.path for o in t.store.list(""))
    argv = [
        local_table_uri,
        "--set",
        "target_rows_per_fragment=250",
        "--set",
        "cluster_tier_ratio=4",
        "--set",
        "cluster_merge_width=4",
    ]
    assert main(argv + ["--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"plan for {local_table_uri} at version {t.version}: 1 groups (1 cluster), 16 -> 8 fragments"
    assert lines[1].startswith(
        "  group    0: cluster      reason=merges 4 unclustered fragments of tier 3 (~4^3 rows each; cluster_merge_width 4); "
        "then 4 sorted runs of tier 4 (~4^4 rows each; cluster_merge_width 4) into one sorted run (hilbert) "
        "fragments [0..15] (16)"
    )
    assert lines[2] == "              sorts its rows along the curve into ~8 fragments"
    size = sum(f.file_bytes for f in t.manifest.fragments)
    assert lines[3] == f"  clustering hilbert on score, ts: 16 runs (16 unclustered fragments) -> 1 runs; rewrites {size:,} bytes"
    depth = lines[4].removeprefix("  overlap depth (fragments a point filter reads), now -> predicted after this run: ")
    (score, now, _, after), (ts, ts_now, _, ts_after) = (part.split(" ") for part in depth.split(", "))
    # score is spread over every fragment; ts already follows the appends (one fragment per instant).
    assert (score, ts, float(ts_now)) == ("score", "ts", 1.0) and float(now) > 15
    assert after == ts_after == "2.83"  # one run of 8 fragments over 2 keys: about 8^(1/2) per key value
    assert sorted(o.path for o in t.store.list("")) == files and lamina.open_table(local_table_uri).version == t.version

    assert main(argv + ["--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    c = out["plan"]["clustering"]
    assert (c["columns"], c["curve"], c["runs_before"], c["runs_after"], c["bytes_rewritten"]) == (
        ["score", "ts"],
        "hilbert",
        16,
        1,
        size,
    )
    assert set(c["depth_before"]) == set(c["depth_after_predicted"]) == {"score", "ts"}
    assert out["clustering"]["clustered_fragments"] == 0 and out["clustering"]["fragments"] == 16
    assert [g["mode"] for g in out["plan"]["groups"]] == ["cluster"] and "actions" not in out["plan"]["groups"][0]

    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "clustering after the run: 1 runs; point filters score: depth " in text
    latest = lamina.open_table(local_table_uri)
    assert latest.stats().clustering.clustered_fragments == len(latest.fragments()) > 1
    assert latest.to_arrow().sort_by("id").equals(before.sort_by("id"))
    assert main(argv + ["--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(f"plan for {local_table_uri} at version {latest.version}: 0 groups (nothing to do)")
