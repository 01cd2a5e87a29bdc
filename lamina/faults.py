"""Test-only fault injection shared by the workers and drivers.

``LAMINA_FAULT_KILL_WORKER`` names a marker file: the first task to reach a kill
point creates it and SIGKILLs its own process; later tasks (the Ray retry) see
the marker and go on. Unset in production: the checks cost one getenv.
"""

from __future__ import annotations

import os
import signal

FAULT_KILL_WORKER = "LAMINA_FAULT_KILL_WORKER"


def maybe_die(variable: str = FAULT_KILL_WORKER) -> None:
    """SIGKILLs this process the first time any process reaches here with ``variable`` set."""
    marker = os.environ.get(variable)
    if marker:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


#: Set (to anything): the compaction driver SIGKILLs itself after the outputs are written, before committing.
FAULT_KILL_DRIVER_BEFORE_COMMIT = "LAMINA_FAULT_KILL_DRIVER_BEFORE_COMMIT"


def maybe_kill_driver() -> None:
    """SIGKILLs this process if ``FAULT_KILL_DRIVER_BEFORE_COMMIT`` is set."""
    if os.environ.get(FAULT_KILL_DRIVER_BEFORE_COMMIT):
        os.kill(os.getpid(), signal.SIGKILL)
