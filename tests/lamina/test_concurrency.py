"""Many real processes appending and deleting against one table at once: nothing lost, nothing twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lamina
from tests.lamina.concurrent_writer import APPENDS, BASE_ROWS, DELETE_BATCHES, appended_ids, deleted_ids
from tests.lamina.helpers import SCHEMA, ids_of, rows

WORKERS = 8
REPO = Path(__file__).resolve().parents[2]


def _seed(uri, opts):
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for start in range(0, BASE_ROWS, 200):
        t.append(rows(start, 200))
    return t


def _race(uri, endpoint=None):
    procs = []
    for w in range(WORKERS):
        args = [sys.executable, "-m", "tests.lamina.concurrent_writer", uri, str(w), str(WORKERS)]
        args += [endpoint] if endpoint else []
        procs.append(
            subprocess.Popen(
                args,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        )
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _check(uri, opts, results, seeded_version):
    t = lamina.open_table(uri, storage_options=opts)
    expected = set(range(BASE_ROWS))
    for w in range(WORKERS):
        expected -= set(deleted_ids(w, WORKERS))
        expected |= set(appended_ids(w))
    got = ids_of(t)
    assert len(got) == len(set(got)), "a row was duplicated"
    assert set(got) == expected
    commits_per_worker = APPENDS + DELETE_BATCHES
    versions = [v.version for v in t.versions()]
    assert versions == list(range(1, seeded_version + WORKERS * commits_per_worker + 1)), "versions must be contiguous"
    claimed = [v for r in results for v in r["versions"]]
    assert len(claimed) == len(set(claimed)) == WORKERS * commits_per_worker, "two writers claimed one version"
    assert set(claimed) == set(range(seeded_version + 1, versions[-1] + 1)), "a commit was lost"


def test_eight_processes_race_on_local_table(local_table_uri):
    seeded = _seed(local_table_uri, None).version
    _check(local_table_uri, None, _race(local_table_uri), seeded)


def test_eight_processes_race_on_s3_table(s3_table_uri, s3_options, moto_server):
    seeded = _seed(s3_table_uri, s3_options).version
    _check(s3_table_uri, s3_options, _race(s3_table_uri, moto_server), seeded)


def test_ray_tasks_append_to_s3_table(ray_cluster, s3_table_uri, s3_options):
    ray = ray_cluster
    lamina.create_table(s3_table_uri, SCHEMA, storage_options=s3_options)

    @ray.remote(max_retries=0)
    def append(uri, opts, start):
        t = lamina.open_table(uri, storage_options=opts)
        return t.append(rows(start, 50))

    versions = ray.get([append.remote(s3_table_uri, s3_options, s) for s in range(0, 200, 50)])
    assert sorted(versions) == [2, 3, 4, 5]
    t = lamina.open_table(s3_table_uri, storage_options=s3_options)
    assert ids_of(t) == list(range(200))
