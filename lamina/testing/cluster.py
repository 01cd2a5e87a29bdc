"""A local Ray for tests, in its own temp dir, whose workers reach a moto server on loopback."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from lamina.testing.moto import DUMMY_AWS_ENV


@contextlib.contextmanager
def local_ray(*, num_cpus: int = 2, temp_dir: str | None = None, env: dict[str, str] | None = None) -> Iterator[Any]:
    """Starts a local Ray (``num_cpus`` CPUs, no dashboard, ``RAY_AUTH_MODE=disabled``) with its temp dir in
    ``temp_dir`` (default: a fresh one, removed at the end) and yields the ``ray`` module; stops it at the end.

    Workers get the AWS credentials and region of this process (moto's dummies when unset) and
    ``env``, so tasks given ``MotoS3.storage_options`` reach the server. If Ray is already
    running in this process it is used as it is and left running.
    """
    import ray

    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    own_dir = temp_dir is None
    where = tempfile.mkdtemp(prefix="lamina-ray-") if own_dir else str(temp_dir)
    worker_env = {**{k: os.environ.get(k, v) for k, v in DUMMY_AWS_ENV.items()}, "RAY_AUTH_MODE": "disabled", **(env or {})}
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        _temp_dir=where,
        log_to_driver=False,
        runtime_env={"env_vars": worker_env},
        configure_logging=False,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        if own_dir:
            shutil.rmtree(where, ignore_errors=True)


__all__ = ["local_ray"]
