"""One racing writer process for test_concurrency: appends its own rows and deletes its share of the base rows.

    python -m tests.lamina.concurrent_writer URI WORKER WORKERS [ENDPOINT]

Prints one JSON line: the versions this process committed.
"""

from __future__ import annotations

import json
import sys

import lamina
from tests.lamina.helpers import rows

APPENDS = 4
DELETE_BATCHES = 3
BASE_ROWS = 800


def appended_ids(worker: int) -> list[int]:
    return [1_000_000 * (worker + 1) + k * 10 + j for k in range(APPENDS) for j in range(10)]


def deleted_ids(worker: int, workers: int) -> list[int]:
    return [i for i in range(BASE_ROWS) if i % workers == worker and i % 3 != 0]


def main() -> None:
    uri, worker, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    opts = None
    if len(sys.argv) > 4:
        opts = {
            "endpoint_url": sys.argv[4],
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "region": "us-east-1",
        }
    table = lamina.open_table(uri, storage_options=opts)
    mine = deleted_ids(worker, workers)
    chunks = [mine[i::DELETE_BATCHES] for i in range(DELETE_BATCHES)]
    committed = []
    for k in range(APPENDS):
        table.append(rows(1_000_000 * (worker + 1) + k * 10, 10))
        committed.append(table.version)
        if k < DELETE_BATCHES:
            table.reload()  # delete what is there now, racing the others' appends and deletes
            n = table.delete(f"id IN ({', '.join(map(str, chunks[k]))})")
            assert n == len(chunks[k]), (n, len(chunks[k]))
            committed.append(table.version)
    print(json.dumps({"worker": worker, "versions": committed}))


if __name__ == "__main__":
    main()
