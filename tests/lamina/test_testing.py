"""lamina.testing: the moto server keeps S3's promise that one conditional put of a key wins."""

from __future__ import annotations

import threading
import uuid

import boto3
from botocore.exceptions import ClientError

from lamina.testing import moto_server


def _racing_puts(endpoint: str, rounds: int, writers: int) -> list[int]:
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket = f"race-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    winners = []
    for r in range(rounds):
        won = []
        barrier = threading.Barrier(writers)

        def put(i: int) -> None:
            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                                  aws_access_key_id="testing", aws_secret_access_key="testing")
            barrier.wait()
            try:
                client.put_object(Bucket=bucket, Key=f"v/{r}", Body=str(i).encode(), IfNoneMatch="*")
                won.append(i)
            except ClientError as e:
                assert e.response["Error"]["Code"] == "PreconditionFailed"

        threads = [threading.Thread(target=put, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert s3.get_object(Bucket=bucket, Key=f"v/{r}")["Body"].read() == str(won[0]).encode()
        winners.append(len(won))
    return winners


def test_exactly_one_of_many_racing_conditional_puts_wins():
    with moto_server() as endpoint:
        assert _racing_puts(endpoint, rounds=20, writers=8) == [1] * 20
