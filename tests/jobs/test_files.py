"""``lamina files``: a version's files and their live rows, and the DuckDB query docs/OPERATIONS.md builds from its JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pyarrow as pa

import lamina
from lamina.jobs import cli
from lamina.jobs import files as files_job
from tests.lamina.helpers import compacted_table, in_table_types

REPO = Path(__file__).resolve().parents[2]


def documented_sql() -> str:
    """The DuckDB example of docs/OPERATIONS.md's "Reading the files with another engine"."""
    text = (REPO / "docs" / "OPERATIONS.md").read_text()
    section = text[text.index("## Reading the files with another engine") :]
    return re.search(r"```sql\n(.*?)```", section, re.S).group(1)


def test_json_lists_the_live_files_and_the_documented_query_reads_the_table(local_table_uri, tmp_path, capsys):
    t, before = compacted_table(local_table_uri, None)
    assert files_job.main([local_table_uri, "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert doc == {
        "uri": t.uri,
        "version": t.version,
        "live_rows": t.count_rows(),
        "files": [f.to_dict() for f in t.live_files()],
    }
    assert cli.main(["files", local_table_uri, "--json"]) == 0
    assert capsys.readouterr().out == out, "lamina files is python -m lamina.jobs.files"

    listing = tmp_path / "files.json"
    listing.write_text(out)
    got = duckdb.connect().sql(documented_sql().replace("'files.json'", f"'{listing}'")).arrow()
    got = in_table_types(got.read_all() if isinstance(got, pa.RecordBatchReader) else got)
    assert got.sort_by("id").equals(t.to_arrow().sort_by("id"))

    assert files_job.main([local_table_uri, "--json", "--version", str(before)]) == 0
    old = json.loads(capsys.readouterr().out)
    assert old["version"] == before and old["files"] == [f.to_dict() for f in t.checkout(before).live_files()]
    assert old["live_rows"] == 1500 - 175 - 12 - 200 != doc["live_rows"]


def test_one_line_per_file(local_table_uri, capsys):
    t, _ = compacted_table(local_table_uri, None)
    assert files_job.main([local_table_uri]) == 0
    *lines, summary = capsys.readouterr().out.splitlines()
    assert lines == [f"{f.uri}  rows {f.rows}  live {f.live_rows}  deleted {len(f.deleted)}" for f in t.live_files()]
    assert summary.startswith(f"{t.uri} version {t.version}: {len(lines)} files, {t.count_rows():,} live rows of ")


def test_no_table_is_a_clear_error(tmp_path, capsys):
    nowhere = str(tmp_path / "nowhere")
    assert files_job.main([nowhere, "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: no Lamina table at {nowhere}")


def test_a_missing_version_and_bad_options(local_table_uri, capsys):
    lamina.create_table(local_table_uri, pa.schema([("id", pa.int64())]))
    assert files_job.main([local_table_uri, "--version", "7"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "7" in err and local_table_uri in err
    assert files_job.main([local_table_uri, "--storage-option", "region"]) == 2
    assert "expected key=value" in capsys.readouterr().err
