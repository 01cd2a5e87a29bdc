"""The chaos soak, short (benchmarks/soak.py; `make soak` runs it for minutes): writers, WAL producers and
appliers, compaction, index builds and cleanup on one S3 table behind the fault proxy, with SIGKILLs."""

from __future__ import annotations

import pytest

from benchmarks.soak import COVERED, SoakConfig, run_soak


@pytest.mark.timeout(600)
def test_short_soak_on_s3_with_faults_and_kills_loses_doubles_and_resurrects_nothing(ray_cluster, lamina_moto, tmp_path):
    cfg = SoakConfig(
        backend="s3",
        seconds=35,
        seed=13,
        writers=3,
        producers=1,
        fault_rate=0.03,
        kill_every=3.0,
        retention_seconds=25.0,
        compact_target_rows=1_000,
        stop_timeout=180.0,
    )
    result = run_soak(cfg, tmp_path, server=lamina_moto)
    print(result.describe())
    assert result.anomalies == []
    assert all(result.coverage[op] >= 1 for op in COVERED), result.coverage
    assert sum(result.kills.values()) >= 1 and sum(result.faults.values()) >= 1
    assert result.rows_checked > 0 and result.index_checks > 0
