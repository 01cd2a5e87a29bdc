"""The ``lamina`` console script, and the plan as the one decision: the dry run shows each row
group's action and the workers do exactly that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tomllib

import lamina
from lamina.compaction import compact
from lamina.jobs import cli
from lamina.jobs import compact as compact_job
from lamina.planner import plan_compaction
from tests.compaction_helpers import MIXED_OPTIONS, mixed_table

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_installs_the_lamina_script():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"lamina": "lamina.jobs.cli:main"}


def test_installed_script_lists_every_job():
    script = Path(sys.executable).parent / "lamina"
    assert script.exists(), "`make setup` installs the console script next to the venv's python"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for command in ("compact", "index", "ingest", "verify", "demo"):
        assert f"  {command} " in proc.stdout


def test_lamina_compact_is_python_m_jobs_compact(local_table_uri, capsys):
    mixed_table(local_table_uri)
    flags = ["--dry-run", "--set", "target_rows_per_fragment=8000", "--set", "min_row_group_bytes=65536"]
    assert cli.main(["compact", local_table_uri, *flags]) == 0
    via_script = capsys.readouterr().out
    assert compact_job.main([local_table_uri, *flags]) == 0
    assert capsys.readouterr().out == via_script
    assert "row groups: 2 copied, 0 re-encoded" in via_script
    assert "row groups: 1 copied, 8 re-encoded (3:0-7)" in via_script, "the hybrid group names the row groups it re-encodes"


def test_unknown_command_and_bad_flags_exit_2(capsys):
    assert cli.main(["compactt"]) == 2
    assert "unknown command 'compactt'" in capsys.readouterr().err
    assert cli.main([]) == 2
    assert cli.main(["compact", "/nowhere", "--set", "target_rows_per_fragment=-1"]) == 2


def test_dry_run_json_lists_every_row_group_action(local_table_uri, capsys):
    t = mixed_table(local_table_uri)
    assert (
        compact_job.main(
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
    groups = json.loads(capsys.readouterr().out)["plan"]["groups"]
    for g in groups:
        listed = [(fid, rg) for _, fid, rg in g["actions"]]
        frags = {f.id: f for f in t.manifest.fragments}
        assert listed == [(fid, rg) for fid in g["fragment_ids"] for rg in range(len(frags[fid].row_groups))]
    hybrid = next(g for g in groups if g["mode"] == "hybrid")
    assert {a for a, _, _ in hybrid["actions"]} == {"copy", "encode"}


def test_workers_do_what_the_plan_says(ray_cluster, local_table_uri):
    t = mixed_table(local_table_uri)
    before = t.to_arrow()
    planned = plan_compaction(t.manifest, MIXED_OPTIONS, t.uri)
    plan, summary = compact(local_table_uri, MIXED_OPTIONS)
    assert plan == planned, "planning is pure: the same manifest and options make the same plan"
    for g, done in zip(plan.groups, summary.groups):
        copies = sum(1 for a in g.actions if a.action == "copy")
        # each copied row group is one output row group; re-encoded rows are cut into new ones
        assert done["row_groups_copied"] == copies, g.mode
        assert (done["row_groups_encoded"] > 0) == (copies < len(g.actions)), g.mode
        assert done["status"] == "committed"
    assert lamina.open_table(local_table_uri).to_arrow().equals(before)
