"""lamina.jobs.maintain over a catalog of tables in mixed states, on a real Ray cluster, locally and on S3.

Each table is built in one state (healthy, many small fragments, heavy deletions, an index with
uncovered fragments, old versions, applied WAL segments, maintenance switched off by its namespace
or back on by the table, a corrupt data file) and must get exactly the actions that state needs.
Short retentions come from catalog properties (``maintenance.retention_seconds = 0`` with
``maintenance.enforce_retention = false``), never from sleeping.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import lamina
from lamina.ingest import ShardApplier
from lamina.jobs.maintain import main
from lamina.maintenance import FAILED, OK, SKIPPED, maintain
from lamina.planner import CompactionOptions
from lamina.planner.maintenance import MaintenancePolicy
from lamina.store import open_store
from lamina.wal import WalWriter, list_segments, segment_prefix

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("tags", pa.list_(pa.string()))])
#: What the WAL's row codec can carry (no lists).
WAL_SCHEMA = pa.schema(list(SCHEMA)[:3])

#: Fragments under 100 rows are compaction candidates; the tables are built around that.
POLICY_YAML = """\
maintenance:
  compaction:
    target_rows_per_fragment: 100
    min_row_group_bytes: 0
"""
POLICY = MaintenancePolicy(compaction=CompactionOptions(target_rows_per_fragment=100, min_row_group_bytes=0))
SHORT_RETENTION = {"maintenance.retention_seconds": "0", "maintenance.enforce_retention": "false"}


def data(start: int, n: int, schema: pa.Schema = SCHEMA) -> pa.Table:
    ids = list(range(start, start + n))
    return (
        pa.table(
            {
                "id": ids,
                "name": [None if i % 5 == 0 else f"n{i}" for i in ids],
                "score": [i * 0.5 for i in ids],
                "tags": [[f"t{i % 3}"] * (i % 3) for i in ids],
            }
        )
        .select(schema.names)
        .cast(schema)
    )


# -- the states: build a table, return the actions maintenance must give it ------------------------
def healthy(cat, name):
    cat.create_table(name, SCHEMA).append(data(0, 200))
    return []


def small_fragments(cat, name):
    t = cat.create_table(name, SCHEMA)
    for k in range(5):
        t.append(data(k * 20, 20))
    return ["compact"]


def heavy_deletions(cat, name):
    t = cat.create_table(name, SCHEMA)
    t.append(data(0, 300))
    t.delete("id >= 150")
    return ["compact"]


def uncovered_index(cat, name):
    t = cat.create_table(name, SCHEMA)
    t.append(data(0, 200))
    t.create_index("id", "btree")
    t.append(data(200, 200))
    return ["update_index id_btree"]


def uncovered_but_compacted(cat, name):
    """The uncovered fragments are compacted, and the compaction indexes its output: no index update."""
    t = cat.create_table(name, SCHEMA)
    t.append(data(0, 200))
    t.create_index("name", "bitmap")
    for k in range(3):
        t.append(data(200 + k * 20, 20))
    return ["compact"]


def old_versions(cat, name):
    t = cat.create_table(name, SCHEMA)
    t.append(data(0, 200))
    t.append(data(200, 200))
    return ["cleanup"]


def wal_segments(cat, name):
    t = cat.create_table(name, WAL_SCHEMA)
    for shard in (0, 1):
        w = WalWriter(t.uri, shard, storage_options=cat.storage_options)
        for k in range(2):
            w.put_batch(data(shard * 1000 + k * 60, 60, WAL_SCHEMA))
            w.commit()
        applier = ShardApplier(t.uri, shard, cat.storage_options)
        applier.poll()
        applier.flush()
        w.close()
    return ["retire_wal", "cleanup"]


def corrupt(cat, name):
    t = cat.create_table(name, SCHEMA)
    for k in range(5):
        t.append(data(k * 20, 20))
    victim = t.manifest.fragments[2].path
    t.store.put(victim, t.store.get(victim)[:50])
    return ["compact"]


def frozen_by_namespace(cat, name):
    small_fragments(cat, name)
    return []


def thawed_by_table(cat, name):
    t = cat.create_table(name, SCHEMA, properties={"maintenance.compact": "true"})
    for k in range(5):
        t.append(data(k * 20, 20))
    return ["compact"]


#: (state, namespace, copies locally, copies on S3)
STATES: list[tuple[Callable[[Any, str], list[str]], str, int, int]] = [
    (healthy, "hot", 15, 2),
    (small_fragments, "hot", 7, 1),
    (heavy_deletions, "hot.eu", 6, 1),
    (uncovered_index, "hot.eu", 5, 1),
    (uncovered_but_compacted, "hot", 3, 1),
    (old_versions, "scratch", 4, 1),
    (wal_segments, "scratch.deep", 3, 1),
    (frozen_by_namespace, "frozen", 3, 1),
    (thawed_by_table, "frozen", 3, 1),
    (corrupt, "hot", 1, 1),
]
NAMESPACES = {
    "hot": None,
    "hot.eu": {"owner": "eu"},
    "scratch": SHORT_RETENTION,
    "scratch.deep": None,
    "frozen": {"maintenance.compact": "false"},
}


def build_catalog(root: str, opts: dict | None, s3: bool) -> tuple[Any, dict[str, list[str]]]:
    cat = lamina.connect(root, storage_options=opts)
    for ns, props in NAMESPACES.items():
        cat.create_namespace(ns, props)
    expected = {}
    for state, ns, local_copies, s3_copies in STATES:
        for i in range(s3_copies if s3 else local_copies):
            name = f"{ns}.{state.__name__}_{i}"
            expected[name] = state(cat, name)
    return cat, expected


def snapshot(root: str, opts: dict | None) -> dict[str, tuple[int, float]]:
    return {o.path: (o.size, o.modified) for o in open_store(root, opts).list("")}


def contents(cat, names) -> dict[str, pa.Table]:
    return {n: cat.open_table(n).to_arrow().sort_by("id") for n in names}


def run(argv: list[str], capsys) -> tuple[int, dict[str, Any]]:
    code = main(argv)
    out = capsys.readouterr().out
    return code, json.loads(out)


def option_flags(opts: dict | None) -> list[str]:
    return [f for k, v in (opts or {}).items() for f in ("--storage-option", f"{k}={v}")]


def labels(report_table: dict[str, Any], status: str | None = None) -> list[str]:
    return [
        f"{a['action']} {a['target']}" if a["target"] else a["action"]
        for a in report_table["actions"]
        if status is None or a["status"] == status
    ]


def test_maintain_a_catalog_of_tables_in_mixed_states(ray_cluster, table_location, tmp_path, capsys):
    root, opts = table_location
    s3 = opts is not None
    cat, expected = build_catalog(root, opts, s3)
    corrupt_name = next(n for n in expected if ".corrupt_" in n)
    config = tmp_path / "maintenance.yaml"
    config.write_text(POLICY_YAML)
    argv = [root, "--config", str(config), "--json", *option_flags(opts)]
    healthy_names = [n for n in expected if n != corrupt_name]
    before = contents(cat, healthy_names)
    versions_before = {n: cat.open_table(n).version for n in expected}

    # --dry-run: what each table would get, and nothing changes
    files = snapshot(root, opts)
    code, dry = run([*argv, "--dry-run"], capsys)
    assert code == 0 and dry["dry_run"] and dry["ok"]
    got = {t["name"]: labels(t) for t in dry["tables"]}
    assert got == expected
    for t in dry["tables"]:
        assert all(a["reason"] and a["status"] == "planned" for a in t["actions"])
        assert t["status"] == ("planned" if expected[t["name"]] else OK)
    assert snapshot(root, opts) == files, "a dry run writes nothing"
    planned = {t["name"]: t["plan"] for t in dry["tables"]}

    # the run: the right actions everywhere, the corrupt table fails alone
    code, report = run(argv, capsys)
    assert code == 1
    assert report["failed"] == [corrupt_name]
    by_name = {t["name"]: t for t in report["tables"]}
    assert sorted(by_name) == sorted(expected)
    for name, actions in expected.items():
        t = by_name[name]
        if name == corrupt_name:
            assert t["status"] == FAILED and labels(t, "failed") == ["compact"]
            assert "compact" in t["error"] and "data/" in t["error"], t["error"]
            continue
        assert t["status"] == OK and t["error"] is None, (name, t["error"])
        assert labels(t, "done") == actions, name
        assert t["rows_after"] == t["rows_before"] == before[name].num_rows
    assert report["catalog"]["status"] == OK and report["record_error"] is None

    # rows (every column) unchanged; the corrupt table untouched
    assert contents(cat, healthy_names) == before
    assert cat.open_table(corrupt_name).version == versions_before[corrupt_name]

    # each action had its effect
    for name, actions in expected.items():
        t = cat.open_table(name)
        if "compact" in actions and name != corrupt_name:
            assert len(t.manifest.fragments) == planned[name]["compaction"]["fragments_after"], name
            assert not any(f.deletion for f in t.manifest.fragments), name
        if actions == []:
            assert t.version == versions_before[name], f"{name} needed nothing and must not change"
        assert all(ix.uncovered_fragments == 0 for ix in t.list_indices()), name
        if "cleanup" in actions:
            assert [v.version for v in t.versions()] == [t.version], name
        if "retire_wal" in actions:
            for shard in (0, 1):
                assert list_segments(t.store, shard) == [0]
                assert [o.path for o in t.store.list(segment_prefix(shard, 0))] == [segment_prefix(shard, 0) + "claim"]

    # the catalog records the last maintenance of every table
    for name in expected:
        recorded = cat.describe_table(name).maintenance
        t = by_name[name]
        assert recorded["status"] == t["status"] and recorded["actions"] == labels(t, "done"), name
        assert recorded["version"] == cat.open_table(name).version
    assert "data/" in cat.describe_table(corrupt_name).maintenance["error"]

    # a second run right after finds nothing to do (but the corrupt table, still failing)
    second = maintain(root, POLICY, storage_options=opts, dry_run=True)
    assert {t.name: [a["action"] for a in t.actions] for t in second.tables if t.actions} == {corrupt_name: ["compact"]}
    assert second.catalog.actions == []


def test_a_bad_property_fails_its_table_alone_and_max_tables_defers_the_rest(ray_cluster, local_table_uri, capsys):
    cat = lamina.connect(local_table_uri)
    cat.create_namespace("ns")
    for i in range(4):
        small_fragments(cat, f"ns.t{i}")
    bad = cat.create_table("ns.bad", SCHEMA, properties={"maintenance.compaction.target_rows_per_fragment": "lots"})
    for k in range(5):
        bad.append(data(k * 20, 20))
    bad_version = bad.version
    before = contents(cat, [f"ns.t{i}" for i in range(4)])

    report = maintain(local_table_uri, POLICY, max_tables=2, max_concurrency=1)
    status = {t.name: t.status for t in report.tables}
    assert status == {"ns.bad": FAILED, "ns.t0": OK, "ns.t1": OK, "ns.t2": SKIPPED, "ns.t3": SKIPPED}
    bad_report = next(t for t in report.tables if t.name == "ns.bad")
    assert "ns.bad" in bad_report.error and "maintenance.compaction.target_rows_per_fragment" in bad_report.error
    assert bad_report.actions == [], "refused before planning: nothing of it changes"
    assert cat.open_table("ns.bad").version == bad_version
    skipped = next(t for t in report.tables if t.name == "ns.t2")
    assert "max_tables=2" in skipped.error and [a["status"] for a in skipped.actions] == [SKIPPED]
    assert report.failed == ["ns.bad"] and not report.ok
    assert contents(cat, [f"ns.t{i}" for i in range(4)]) == before
    assert cat.describe_table("ns.t2").maintenance is None, "a table not reached is not recorded"
    assert cat.describe_table("ns.t0").maintenance["actions"] == ["compact"]
    assert cat.describe_table("ns.bad").maintenance["status"] == FAILED

    # the next run takes the deferred tables; --table limits a run to the tables named
    assert main([local_table_uri, "--table", "ns.t2", "--table", "ns.t3", "--json", "--config", _config()]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {t["name"]: labels(t, "done") for t in out["tables"]} == {"ns.t2": ["compact"], "ns.t3": ["compact"]}


def _config() -> str:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(POLICY_YAML)
    return f.name


def test_bad_arguments_exit_2_and_change_nothing(local_table_uri, tmp_path, capsys):
    cat = lamina.connect(local_table_uri)
    cat.create_namespace("ns")
    small_fragments(cat, "ns.t")
    files = snapshot(local_table_uri, None)
    bad = tmp_path / "bad.yaml"
    bad.write_text("maintenance:\n  retention_seconds: 60\n")
    assert main([local_table_uri, "--config", str(bad)]) == 2
    assert "safety floor" in capsys.readouterr().err
    bad.write_text("maintenance:\n  compaction: {nope: 1}\n")
    assert main([local_table_uri, "--config", str(bad)]) == 2
    assert "unknown compaction option" in capsys.readouterr().err
    assert main([local_table_uri, "--namespace", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main([local_table_uri, "--max-tables", "0"]) == 2
    assert main([local_table_uri, "--namespace", "ns", "--table", "ns.t"]) == 2
    assert main([str(tmp_path / "no-catalog")]) == 2
    assert "no Lamina catalog" in capsys.readouterr().err
    assert not (tmp_path / "no-catalog").exists(), "maintenance never creates a catalog"
    assert snapshot(local_table_uri, None) == files


def test_unknown_table_fails_alone_and_dry_run_text(local_table_uri, capsys):
    cat = lamina.connect(local_table_uri)
    cat.create_namespace("ns")
    small_fragments(cat, "ns.t")
    assert main([local_table_uri, "--dry-run", "--table", "ns.t", "--table", "ns.gone", "--config", _config()]) == 1
    out = capsys.readouterr().out
    assert "ns.t: planned" in out and "compact [planned]: 1 group(s): 5 -> 1 fragments (5 small)" in out
    assert "ns.gone: failed" in out and "TableNotFound" in out
    assert "failed: ns.gone" in out


def test_lamina_maintain_is_python_m_jobs_maintain(local_table_uri, capsys):
    from lamina.jobs.cli import main as lamina_main

    cat = lamina.connect(local_table_uri)
    cat.create_namespace("ns")
    healthy(cat, "ns.t")
    assert lamina_main(["maintain", local_table_uri, "--dry-run"]) == 0
    assert "ns.t: ok, nothing to do" in capsys.readouterr().out
    lamina_main(["--help"])
    assert "maintain" in capsys.readouterr().out


def test_maintain_tables_outside_a_catalog(ray_cluster, tmp_path):
    from lamina.maintenance import maintain_tables

    uris = [str(tmp_path / "a"), str(tmp_path / "b")]
    a = lamina.create_table(uris[0], SCHEMA)
    for k in range(5):
        a.append(data(k * 20, 20))
    lamina.create_table(uris[1], SCHEMA).append(data(0, 200))
    before = [lamina.open_table(u).to_arrow() for u in uris]
    report = maintain_tables(uris, POLICY)
    assert report.ok and [t.done() for t in report.tables] == [["compact"], []]
    assert [lamina.open_table(u).to_arrow() for u in uris] == before
    assert len(lamina.open_table(uris[0]).manifest.fragments) == 1


def test_a_table_property_converges_its_old_schemas(ray_cluster, tmp_path):
    """Fragments at the target written in an earlier schema stay as they are, unless the table's maintenance
    policy asks (``maintenance.compaction.converge_schemas``): then they are re-encoded into today's schema."""
    cat = lamina.connect(str(tmp_path / "root"))
    cat.create_namespace("sales", None)
    wanted = {}
    for name, props in (("sales.kept", None), ("sales.converged", {"maintenance.compaction.converge_schemas": "true"})):
        t = cat.create_table(name, SCHEMA, properties=props)
        t.append(data(0, 200))
        t.add_columns(pa.field("region", pa.string()), defaults={"region": "eu"})
        t.rename_column("name", "label")
        wanted[name] = t.to_arrow().sort_by("id")
    report = maintain(cat.root, POLICY)
    assert report.ok
    assert {t.name: t.done() for t in report.tables} == {"sales.kept": [], "sales.converged": ["compact"]}
    for name, rows in wanted.items():
        t = cat.open_table(name)
        assert t.to_arrow().sort_by("id").equals(rows)
        assert [f.schema_id for f in t.manifest.fragments] == ([0] if name == "sales.kept" else [2])
