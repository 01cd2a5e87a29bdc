"""Group commit on a local catalog: writers of one host take turns through an advisory ``flock``, and
the writer whose turn it is applies, in its own rewrite, the requests the others queued meanwhile (one
rewrite and one commit for every writer waiting), with a claim protocol that a writer stopping at any
point leaves for the next one to settle. An optimisation only: put-if-absent decides every commit."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from lamina.errors import CommitStateUnknown
from lamina.manifest import try_load_manifest
from lamina.store import ObjectStore
from lamina.store.base import remove_quietly
from lamina.store.local import LocalStore

#: Local catalogs only: writers on one host take turns through an advisory ``flock`` on this file under the
#: catalog table's directory, so that none of them wastes a rewrite on a race it would lose. An optimisation
#: only: put-if-absent of the next version decides every commit, a writer that cannot open or take the lock
#: in ``LOCK_WAIT_SECONDS`` goes ahead without it, and S3 never uses it.
LOCK_FILE = "_writer.lock"
LOCK_WAIT_SECONDS = 10.0
#: Local catalogs only: where writers waiting for their turn queue their requests (``Queue``), and how many
#: queued requests one rewrite applies at most.
QUEUE_DIR = "_queue"
MAX_BATCH = 256
#: Outcomes of queued requests whose writer never collected them (it stopped) are removed after this long.
UNCOLLECTED_SECONDS = 3600.0


class Queue:
    """Local catalogs: requests of this host's writers waiting for their turn, applied by the writer that has
    it in its own rewrite (group commit: one rewrite and one commit for every writer waiting). Files under
    ``<root>/_catalog/_queue/`` (docs/FORMAT.md §12), each written whole (temp file, rename):

    ``<id>.req``      a request (``mutations.apply``'s data), ``<id>`` = its time in ns and a random suffix (FIFO order)
    ``<id>.taken``    taken (renamed) by the writer with the turn: its writer can no longer withdraw it
    ``<id>.claimed``  taken into a rewrite: the request, its outcome, the rewrite's transaction uuid and version
    ``<id>.out``      its outcome once that rewrite committed (or refused it), for its writer to collect

    Only the writer holding the turn claims. A claim left by a writer that stopped before finishing is settled
    by the next one (``recover``): handed out if that version carries the claim's transaction, else queued
    again. Nothing here is fsynced: a request is not acknowledged before the version applying it is durable,
    and after a crash of the host its writer is gone too."""

    def __init__(self, store: ObjectStore):
        assert isinstance(store, LocalStore), "a queue is a local catalog's (try_turn gave a descriptor)"
        self.dir = os.path.join(store.root, QUEUE_DIR)

    def _path(self, rid: str, kind: str) -> str:
        return os.path.join(self.dir, f"{rid}.{kind}")

    def _write(self, rid: str, kind: str, doc: dict[str, Any]) -> None:
        os.makedirs(self.dir, exist_ok=True)
        tmp = os.path.join(self.dir, f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self._path(rid, kind))

    def _read(self, rid: str, kind: str) -> dict[str, Any] | None:
        try:
            with open(self._path(rid, kind)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def _names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return []

    def post(self, request: dict[str, Any]) -> str:
        rid = f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}"
        self._write(rid, "req", request)
        return rid

    def withdraw(self, rid: str) -> bool:
        """Takes a request back; False when a rewrite claimed it (or it was already handed out)."""
        try:
            os.unlink(self._path(rid, "req"))
            return True
        except FileNotFoundError:
            return False

    def withdraw_matching(self, match: Callable[[dict[str, Any]], bool]) -> None:
        """Takes back every queued request ``match`` accepts (a writer settling a request of its own)."""
        for rid in [n[: -len(".req")] for n in self._names() if n.endswith(".req")]:
            body = self._read(rid, "req") or {}
            if match(body):
                self.withdraw(rid)

    def collect(self, rid: str) -> dict[str, Any] | None:
        """The outcome of request ``rid``, once handed out (then removed), else None."""
        out = self._read(rid, "out")
        if out is not None:
            remove_quietly(self._path(rid, "out"))
        return out

    def await_outcome(self, rid: str, seconds: float, root: str) -> dict[str, Any] | None:
        """The outcome of a request claimed by the writer that has the turn, waited for up to ``seconds``;
        None if the claim was given back (its rewrite lost a race) and the request withdrawn."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            out = self.collect(rid)
            if out is not None:
                return out
            if self.withdraw(rid):
                return None
            time.sleep(0.005)
        raise CommitStateUnknown(
            f"catalog {root}: request {rid} was taken into a rewrite by another writer of this "
            f"host that has not finished within {seconds:.0f} s; whether it was applied is "
            f"unknown: list or describe the catalog to find out"
        )

    def take(self, limit: int, include: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` queued requests, oldest first (and ``include``'s, wherever it is), each taken by an
        atomic rename to ``<id>.taken``: a request its writer withdrew meanwhile is not taken."""
        rids = [n[:-4] for n in self._names() if n.endswith(".req")]
        taken = []
        for rid in rids[:limit] + ([include] if include is not None and include in rids[limit:] else []):
            try:
                os.rename(self._path(rid, "req"), self._path(rid, "taken"))
            except FileNotFoundError:
                continue
            body = self._read(rid, "taken")
            if body is not None:
                taken.append((rid, body))
        return taken

    def give_back(self, rids: list[str]) -> None:
        for rid in rids:
            try:
                os.rename(self._path(rid, "taken"), self._path(rid, "req"))
            except FileNotFoundError:
                pass

    def claim(self, claims: dict[str, dict[str, Any]], txn_uuid: str, version: int) -> None:
        """Records, before the commit, what committing ``txn_uuid`` as ``version`` does to each request."""
        for rid, doc in claims.items():
            self._write(rid, "claimed", {**doc, "txn": txn_uuid, "version": version})
            remove_quietly(self._path(rid, "taken"))

    def unclaim(self, claims: dict[str, dict[str, Any]]) -> None:
        """Back to the queue: the rewrite that claimed them did not commit."""
        for rid, doc in claims.items():
            self._write(rid, "req", doc["request"])
            remove_quietly(self._path(rid, "claimed"))

    def hand_out(self, outcomes: dict[str, dict[str, Any]], from_claims: bool = False) -> None:
        """Makes outcomes collectable: the claims of a committed rewrite, or refusals nothing was written for."""
        for rid, doc in outcomes.items():
            if from_claims:
                try:
                    os.replace(self._path(rid, "claimed"), self._path(rid, "out"))
                except FileNotFoundError:  # never expected; the commit stands either way
                    self._write(rid, "out", doc)
            else:
                self._write(rid, "out", doc)
                remove_quietly(self._path(rid, "taken"))

    def recover(self, store: ObjectStore, table_uuid: str | None) -> None:
        """Settles the claims of a writer that stopped between claiming and handing out (this writer has the
        turn, so no other is at work), and removes outcomes nobody collected for ``UNCOLLECTED_SECONDS``."""
        now = time.time()
        names = self._names()
        claims = {n[: -len(".claimed")] for n in names if n.endswith(".claimed")}
        for name in names:
            rid, _, kind = name.rpartition(".")
            if kind == "claimed":
                doc = self._read(rid, "claimed")
                if doc is None:
                    continue
                m = try_load_manifest(store, int(doc["version"]), table_uuid)
                if m is not None and m.record.uuid == doc["txn"]:
                    os.replace(self._path(rid, "claimed"), self._path(rid, "out"))
                else:
                    self.unclaim({rid: doc})
            elif kind == "taken":  # taken by a writer that stopped before claiming: queued again
                if rid in claims:
                    remove_quietly(self._path(rid, "taken"))
                else:
                    self.give_back([rid])
            elif kind == "out" or name.startswith(".tmp-"):
                try:
                    if now - os.stat(os.path.join(self.dir, name)).st_mtime > UNCOLLECTED_SECONDS:
                        remove_quietly(os.path.join(self.dir, name))
                except FileNotFoundError:
                    pass


def try_turn(store: ObjectStore) -> tuple[int | None, str]:
    """This host's writer turn on a local catalog, if free now: (descriptor holding the ``flock``, "held"),
    (an open descriptor to wait on, "busy"), or (None, "none": not local, or no locking here)."""
    import fcntl

    if not isinstance(store, LocalStore):
        return None, "none"
    try:
        fd = os.open(os.path.join(store.root, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None, "none"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, "held"
    except BlockingIOError:
        return fd, "busy"
    except OSError:  # no flock on this filesystem
        os.close(fd)
        return None, "none"


def wait_turn(fd: int) -> bool:
    """Waits up to ``LOCK_WAIT_SECONDS`` for the ``flock`` on ``fd``: True once held. False: not had in time (or
    lost), and ``fd`` is no longer the caller's: a waiting thread closes it once it gets the lock, so that a
    holder stuck for longer never holds anyone up."""
    import fcntl

    done, state = threading.Event(), {"abandoned": False, "held": False}
    guard = threading.Lock()

    def wait() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = True
        except OSError:
            held = False
        with guard:
            state["held"] = held
            if state["abandoned"] or not held:
                os.close(fd)
            done.set()

    threading.Thread(target=wait, name="lamina-catalog-lock", daemon=True).start()
    done.wait(LOCK_WAIT_SECONDS)
    with guard:
        if done.is_set():
            return state["held"]
        state["abandoned"] = True
    return False
