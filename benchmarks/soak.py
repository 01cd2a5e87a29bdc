"""Chaos soak (issue 13): everything that writes a table, at once, under S3 faults and SIGKILLs;
a model of every write checks the end.

    python -m benchmarks.soak [--backend local|s3|both] [--seconds 180] [--seed 1] [--writers 8]
                              [--producers 2] [--fault-rate 0.03] [--kill-every 3] [--retention 120] [--json]
    make soak                 the same with SOAK_SECONDS / SOAK_SEED / SOAK_BACKEND (docs/RELIABILITY.md, "Last soak")

On one table (on S3 behind ``lamina.testing``'s fault proxy, or on a local directory), for
``--seconds``: writer processes append rows with unique ids and delete some of their own by id
filter; WAL producer processes commit rows (and deletes) that 2 applier actors flush; a
compaction loop (``lamina.compaction.compact``, ``partial_commit_every=1``), an index loop
(``build_index(update=True)`` on Ray) and a cleanup loop (short retention) run; every
``--kill-every`` seconds or so a random writer, producer, Ray task worker, applier or job
process is SIGKILLed (and restarted). Every process logs each call before it starts and how it
ended (fsynced), so a killed call is "maybe". The checker then drains the WAL and checks: every
committed row present exactly once with the values written, no deleted, doubled or never-written
row, "maybe" rows at most once, versions contiguous, every index equal to a scan, no
unreferenced file after a final cleanup, every error a caller saw a ``LaminaError`` naming the
table. ``run_soak`` returns the figures; ``anomalies`` must be empty.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
#: Row ids of process ``wid`` are ``wid * ID_BLOCK + n``: unique across every process of a run.
ID_BLOCK = 10**9
SCHEMA = pa.schema([("id", pa.int64()), ("wid", pa.int64()), ("cat", pa.string()), ("v", pa.float64()), ("payload", pa.string())])
CATS = 7
INDICES = (("id", "btree", "id_btree"), ("cat", "bitmap", "cat_bitmap"))
SHARDS = 2
#: Calls a run makes at least once each (``SoakResult.coverage``).
COVERED = ("append", "delete", "wal_commit", "compact", "index_update", "cleanup")


@dataclass
class SoakConfig:
    """One soak run's knobs (``make soak`` sets ``seconds``, ``seed``, ``backend``)."""

    backend: str = "s3"  # "s3" (behind the fault proxy) or "local"
    seconds: float = 180.0
    seed: int = 1
    writers: int = 8
    producers: int = 2
    fault_rate: float = 0.03
    kill_every: float = 3.0  # mean seconds between SIGKILLs
    retention_seconds: float = 120.0  # the cleanup loop's older_than: longer than the longest write (FORMAT, cleanup)
    compact_target_rows: int = 2_000
    stop_timeout: float = 120.0  # seconds a process gets to finish its call once told to stop


def rows_for(ids: Any) -> pa.Table:
    """The row every process writes for each id: every column is a function of the id, so the checker knows it."""
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "wid": ids // ID_BLOCK,
            "cat": [f"c{i % CATS}" for i in ids.tolist()],
            "v": ids.astype(np.float64) * 0.5,
            "payload": [f"{i:x}-{(i * 2654435761) % 2**32:08x}" for i in ids.tolist()],
        },
        schema=SCHEMA,
    )


# -- the processes' side: a log per process, one role per process ---------------------------------------


class OpLog:
    """A process's log: one JSON line when a call starts and one when it ends, each fsynced before going on."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.n = 0

    def write(self, **entry: Any) -> None:
        os.write(self.fd, (json.dumps(entry, default=str) + "\n").encode())
        os.fsync(self.fd)

    def begin(self, op: str, **detail: Any) -> int:
        self.n += 1
        self.write(ev="begin", n=self.n, op=op, t=time.time(), **detail)
        return self.n

    def end(self, n: int, started: float, **detail: Any) -> None:
        self.write(ev="end", n=n, ok=True, seconds=round(time.time() - started, 3), **detail)

    def error(self, n: int, started: float, e: BaseException) -> None:
        from lamina.errors import LaminaError

        self.write(
            ev="end",
            n=n,
            ok=False,
            seconds=round(time.time() - started, 3),
            type=type(e).__name__,
            lamina=isinstance(e, LaminaError),
            msg=str(e)[:2000],
            tb=None if isinstance(e, LaminaError) else traceback.format_exc()[-3000:],
        )

    def call(self, op: str, fn, **detail: Any) -> tuple[bool, Any]:
        """Runs ``fn()`` between a begin and an end entry; (True, result) or (False, the exception)."""
        n, started = self.begin(op, **detail), time.time()
        try:
            out = fn()
        except Exception as e:
            self.error(n, started, e)
            return False, e
        self.end(n, started, result=out if isinstance(out, (int, float, str, dict, list, type(None))) else str(out))
        return True, out


def _stopped(spec: dict) -> bool:
    return os.path.exists(spec["stop"])


def _writer(spec: dict) -> None:
    """Appends rows with fresh ids and deletes some of its own committed ones by id filter."""
    import lamina
    from lamina.errors import CommitStateUnknown

    rng = random.Random(spec["seed"])
    log = OpLog(spec["log"])
    uri, opts, wid = spec["uri"], spec["storage_options"], spec["wid"]
    table = None
    live: list[int] = []  # own ids committed and not deleted (nor maybe deleted)
    nxt, ops = wid * ID_BLOCK, 0
    while not _stopped(spec):
        if table is None or ops % 10 == 0:
            ok, out = log.call("open", lambda: lamina.open_table(uri, storage_options=opts))
            if not ok:
                time.sleep(0.2)
                continue
            table = out
        ops += 1
        if len(live) < 20 or rng.random() < 0.7:
            ids = list(range(nxt, nxt + rng.randint(1, 40)))
            nxt += len(ids)
            ok, out = log.call("append", lambda table=table, ids=ids: table.append(rows_for(ids)), ids=[ids[0], ids[-1] + 1])
            if ok:
                live += ids
        else:
            if rng.random() < 0.5:
                chosen = sorted(rng.sample(live, rng.randint(1, min(30, len(live)))))
                flt = f"id IN ({', '.join(map(str, chosen))})"
                rng_ids = None
            else:
                srt = sorted(live)
                i = rng.randrange(len(srt))
                chosen = srt[i : i + rng.randint(1, 30)]
                flt = f"id >= {chosen[0]} AND id <= {chosen[-1]}"
                rng_ids = [chosen[0], chosen[-1]]
            ok, out = log.call("delete", lambda table=table, flt=flt: table.delete(flt), ids=chosen, range=rng_ids)
            if ok or isinstance(out, CommitStateUnknown):
                gone = set(chosen)
                live = [i for i in live if i not in gone]
        if not ok:
            table = None  # reopen: the view may be behind a cleanup or a lost race


def _producer(spec: dict) -> None:
    """Commits WAL transactions of rows with fresh ids, and deletes of its own committed ones."""
    from lamina.wal import WalWriter

    rng = random.Random(spec["seed"])
    log = OpLog(spec["log"])
    uri, opts, wid = spec["uri"], spec["storage_options"], spec["wid"]
    shard = wid % SHARDS
    writer = None
    live: list[int] = []
    nxt = wid * ID_BLOCK
    while not _stopped(spec):
        if writer is None:
            ok, out = log.call("wal_open", lambda: WalWriter(uri, shard, storage_options=opts, max_segment_rows=500))
            if not ok:
                time.sleep(0.2)
                continue
            writer = out
        ids = list(range(nxt, nxt + rng.randint(1, 30)))
        nxt += len(ids)
        dels = sorted(rng.sample(live, rng.randint(1, min(5, len(live))))) if len(live) > 20 and rng.random() < 0.3 else []

        def txn(w=writer, ids=ids, dels=dels):
            w.put_many(rows_for(ids).to_pylist())
            for d in dels:
                w.delete(d)
            return w.commit()

        ok, out = log.call("wal_commit", txn, ids=[ids[0], ids[-1] + 1], deletes=dels, shard=shard)
        gone = set(dels)
        live = [i for i in live if i not in gone] + (ids if ok else [])
        if not ok:
            try:
                writer.close()
            except Exception:
                pass
            writer = None
        time.sleep(rng.uniform(0.0, 0.2))
    if writer is not None:
        log.call("wal_close", writer.close)


def _compactor(spec: dict) -> None:
    """Compacts the table on Ray again and again, committing each group as it finishes."""
    from lamina.compaction import compact
    from lamina.planner import CompactionOptions

    rng = random.Random(spec["seed"])
    log = OpLog(spec["log"])
    while not _stopped(spec):
        policy = rng.choice(["binpack", "binpack", "tiered"])
        options = CompactionOptions(
            target_rows_per_fragment=spec["target_rows"],
            partial_commit_every=1,
            max_concurrency=2,
            policy=policy,
            min_merge_width=4,
        )

        def run(options=options):
            _, s = compact(spec["uri"], options, storage_options=spec["storage_options"])
            return {
                "groups": len(s.groups),
                "committed": sum(g["status"] == "committed" for g in s.groups),
                "failed": s.failed_groups,
                "retries": s.retries,
                "errors": sorted({str(g["error"])[:300] for g in s.groups if g.get("error")})[:5],
            }

        log.call("compact", run, policy=policy)
        time.sleep(rng.uniform(0.5, 2.0))


def _indexer(spec: dict) -> None:
    """Brings every index up to date on Ray (``build_index(update=True)``), again and again."""
    from lamina.index.build import build_index

    rng = random.Random(spec["seed"])
    log = OpLog(spec["log"])
    while not _stopped(spec):
        for _, _, name in INDICES:
            log.call(
                "index_update",
                lambda name=name: (
                    build_index(spec["uri"], name=name, update=True, ray=True, storage_options=spec["storage_options"])
                    .to_dict()
                    .get("action")
                ),
                index=name,
            )
        time.sleep(rng.uniform(1.0, 3.0))


def _cleaner(spec: dict) -> None:
    """Runs cleanup with a short retention, again and again."""
    import lamina

    rng = random.Random(spec["seed"])
    log = OpLog(spec["log"])
    while not _stopped(spec):
        log.call(
            "cleanup",
            lambda: asdict(
                lamina.open_table(spec["uri"], storage_options=spec["storage_options"]).cleanup(
                    spec["retention"], enforce_retention=False
                )
            ),
        )
        time.sleep(rng.uniform(2.0, 5.0))


ROLES = {"writer": _writer, "producer": _producer, "compactor": _compactor, "indexer": _indexer, "cleaner": _cleaner}


# -- the driver: processes, kills, the end --------------------------------------------------------------


@dataclass
class _Proc:
    role: str
    wid: int
    popen: subprocess.Popen
    log: str


@dataclass
class SoakResult:
    """What a soak did and found (``anomalies`` must be empty)."""

    backend: str
    seed: int
    seconds: float
    retention_seconds: float = 0.0
    operations: dict[str, dict[str, int]] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    fault_types: dict[str, int] = field(default_factory=dict)
    kills: dict[str, int] = field(default_factory=dict)
    rows_checked: int = 0
    rows_maybe: int = 0
    rows_present: int = 0
    versions: dict[str, int] = field(default_factory=dict)
    index_checks: int = 0
    errors_seen: dict[str, int] = field(default_factory=dict)
    compaction: dict[str, int] = field(default_factory=dict)
    cleanup: dict[str, int] = field(default_factory=dict)
    coverage: dict[str, int] = field(default_factory=dict)
    #: The longest append / delete / WAL commit / index update: cleanup's retention must exceed it
    #: (files a write made before it committed are unreferenced until then; docs/FORMAT.md, cleanup).
    longest_write_seconds: float = 0.0
    files_after_cleanup: int = 0
    anomalies: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    #: Wall seconds of each phase: setup, chaos, coverage (the wait for every kind of call), stop, drain, check.
    phases: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        ops = ", ".join(
            f"{k} {v.get('ok', 0)} ok/{v.get('failed', 0)} failed/{v.get('maybe', 0)} maybe"
            for k, v in sorted(self.operations.items())
        )
        return "\n".join(
            [
                f"soak {self.backend} seed {self.seed}: {self.seconds:.0f} s of chaos, {self.wall_seconds:.0f} s in all",
                f"  operations: {ops}",
                f"  faults injected by kind: {dict(sorted(self.faults.items()))}; "
                f"by fault: {dict(sorted(self.fault_types.items()))}",
                f"  kills by target: {dict(sorted(self.kills.items()))}",
                f"  compaction: {self.compaction}; cleanup (retention {self.retention_seconds:g} s): {self.cleanup}",
                f"  rows checked: {self.rows_checked:,} ({self.rows_present:,} present, {self.rows_maybe:,} maybe); "
                f"versions {self.versions}; index lookups checked: {self.index_checks}",
                f"  errors callers saw: {dict(sorted(self.errors_seen.items()))}; "
                f"longest write {self.longest_write_seconds:.1f} s",
                f"  every kind of call succeeded: {self.coverage}",
                f"  files after the final cleanup: {self.files_after_cleanup}",
                f"  phases (s): {self.phases}",
                f"  anomalies: {len(self.anomalies)}" + "".join(f"\n    - {a}" for a in self.anomalies[:50]),
            ]
        )


class _Driver:
    def __init__(self, cfg: SoakConfig, workdir: Path, uri: str, opts: dict | None, env: dict[str, str]):
        self.cfg, self.workdir, self.uri, self.opts, self.env = cfg, workdir, uri, opts, env
        self.rng = random.Random(cfg.seed)
        self.stop_file = str(workdir / "stop")
        self.procs: list[_Proc] = []
        self.logs: list[tuple[str, int, str]] = []
        self.kills: collections.Counter[str] = collections.Counter()
        self.exits: list[str] = []
        self.next_wid = 1

    def spawn(self, role: str) -> _Proc:
        wid = self.next_wid
        self.next_wid += 1
        log = str(self.workdir / f"{role}-{wid}.log")
        spec = {
            "role": role,
            "wid": wid,
            "uri": self.uri,
            "storage_options": self.opts,
            "stop": self.stop_file,
            "seed": self.cfg.seed * 100_003 + wid,
            "log": log,
            "target_rows": self.cfg.compact_target_rows,
            "retention": self.cfg.retention_seconds,
        }
        err = open(self.workdir / f"{role}-{wid}.stderr", "wb")
        popen = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.soak", "--role-spec", json.dumps(spec)],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        err.close()
        proc = _Proc(role, wid, popen, log)
        self.procs.append(proc)
        self.logs.append((role, wid, log))
        return proc

    def running(self, role: str) -> list[_Proc]:
        return [p for p in self.procs if p.role == role and p.popen.poll() is None]

    def reap(self) -> None:
        """Processes that ended on their own before the stop are anomalies (each role loops until told); restarted."""
        for p in list(self.procs):
            rc = p.popen.poll()
            if rc is not None:
                self.procs.remove(p)
                if rc != -signal.SIGKILL:
                    self.exits.append(
                        f"{p.role} {p.wid} exited with status {rc} before the stop "
                        f"(stderr: {self.workdir / f'{p.role}-{p.wid}.stderr'})"
                    )
                self.spawn(p.role)

    def kill_one(self) -> None:
        """SIGKILLs one random target among those running now."""
        targets = {
            "writer": [p.popen.pid for p in self.running("writer")],
            "producer": [p.popen.pid for p in self.running("producer")],
            "ray_task": _ray_pids("ray::_counted"),
            "applier": _ray_pids("ray::WalApplier"),
            "job": [p.popen.pid for p in self.running("compactor") + self.running("indexer") + self.running("cleaner")],
        }
        weights = {"writer": 4, "producer": 1, "ray_task": 3, "applier": 2, "job": 1}
        kinds = [k for k in targets if targets[k]]
        if not kinds:
            return
        kind = self.rng.choices(kinds, [weights[k] for k in kinds])[0]
        pid = self.rng.choice(targets[kind])
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.kills[kind] += 1

    def wait_for_coverage(self, timeout: float) -> dict[str, int]:
        """After the chaos window, without kills, waits (at most ``timeout`` s) until every kind of call
        has succeeded at least once, so a short run under load still tests them all; returns the
        successful calls by kind."""
        deadline = time.monotonic() + timeout
        while True:
            done: collections.Counter[str] = collections.Counter()
            for _, _, path in self.logs:
                if os.path.exists(path):
                    for begin, end in _read_log(path):
                        if end is not None and end["ok"]:
                            done[begin["op"]] += 1
            if all(done[op] for op in COVERED) or time.monotonic() >= deadline:
                return {op: done[op] for op in COVERED}
            self.reap()
            time.sleep(1.0)

    def stop(self) -> None:
        Path(self.stop_file).touch()
        deadline = time.monotonic() + self.cfg.stop_timeout
        for p in self.procs:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()
                self.kills["stop_timeout"] += 1
            else:
                if p.popen.returncode not in (0, -signal.SIGKILL):
                    self.exits.append(
                        f"{p.role} {p.wid} exited with status {p.popen.returncode} at the stop "
                        f"(stderr: {self.workdir / f'{p.role}-{p.wid}.stderr'})"
                    )


def _ray_pids(title: str) -> list[int]:
    """Pids of the Ray worker processes of this process's Ray (its descendants: the raylet's children)
    whose title starts with ``title`` (``ray::<task or actor>``); other Rays on the machine are left alone."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if f.read(len(title) + 1).rstrip(b"\0 ").startswith(title.encode()) and _descends(int(d), me):
                        out.append(int(d))
            except OSError:
                pass
    return out


def _descends(pid: int, ancestor: int) -> bool:
    for _ in range(8):
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def run_soak(cfg: SoakConfig, workdir: str | Path | None = None, *, server: Any = None) -> SoakResult:
    """Runs one soak (``cfg.backend``) and checks it; ``server``: a running ``lamina.testing.MotoServer`` to use.

    Uses the Ray of this process if there is one, else a local Ray (2 CPUs, its own temp dir).
    """
    import contextlib

    import lamina
    from lamina.ingest import IngestOptions
    from lamina.ingestion import Ingestion
    from lamina.testing import DUMMY_AWS_ENV, local_ray, moto_s3

    started = time.monotonic()
    own_dir = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="lamina-soak-") if own_dir else workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result = SoakResult(cfg.backend, cfg.seed, cfg.seconds, cfg.retention_seconds)
    lap = _laps(result)
    with contextlib.ExitStack() as stack:
        s3 = None
        if cfg.backend == "s3":
            s3 = stack.enter_context(
                moto_s3(
                    fault_rate=cfg.fault_rate,
                    seed=cfg.seed,
                    server=server,
                    max_faults=1_000_000,
                    max_seconds=cfg.seconds + cfg.stop_timeout + 60,
                )
            )
            uri, opts, check_opts = s3.uri(f"soak-{cfg.seed}"), s3.storage_options, s3.direct_options
        elif cfg.backend == "local":
            uri, opts, check_opts = str(workdir / "table"), None, None
        else:
            raise ValueError(f"backend must be 's3' or 'local', not {cfg.backend!r}")
        ray = stack.enter_context(local_ray(num_cpus=2, temp_dir=str(workdir / "ray")))
        env = {
            **os.environ,
            **{k: os.environ.get(k, v) for k, v in DUMMY_AWS_ENV.items()},
            "RAY_AUTH_MODE": "disabled",
            "PYTHONPATH": os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
            "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
        }
        table = lamina.create_table(uri, SCHEMA, primary_key="id", storage_options=check_opts)
        for column, kind, name in INDICES:
            table.create_index(column, kind, name=name)
        ingestion = Ingestion.start(
            uri, SHARDS, storage_options=opts, options=IngestOptions(flush_rows=400, flush_seconds=1.0, retention_seconds=2.0)
        )
        driver = _Driver(cfg, workdir, uri, opts, env)
        try:
            for _ in range(cfg.writers):
                driver.spawn("writer")
            for _ in range(cfg.producers):
                driver.spawn("producer")
            for role in ("compactor", "indexer", "cleaner"):
                driver.spawn(role)
            lap("setup")
            deadline = time.monotonic() + cfg.seconds
            while time.monotonic() < deadline:
                time.sleep(min(max(0.0, deadline - time.monotonic()), driver.rng.uniform(0.5, 1.5) * cfg.kill_every))
                driver.reap()
                if time.monotonic() < deadline:
                    driver.kill_one()
            lap("chaos")
            result.coverage = driver.wait_for_coverage(cfg.stop_timeout)
            lap("coverage")
            driver.stop()
            lap("stop")
            result.anomalies += driver.exits
            result.kills = dict(driver.kills)
            for attempt in range(10):  # the WAL committed so far, into the table (an applier may be restarting)
                try:
                    ingestion.flush()
                    break
                except Exception as e:
                    if attempt == 9:
                        result.anomalies.append(f"the appliers could not flush the WAL at the end: {type(e).__name__}: {e}")
                    time.sleep(2.0)
        finally:
            Path(driver.stop_file).touch()
            for p in driver.procs:
                if p.popen.poll() is None:
                    p.popen.kill()
                    p.popen.wait()
            try:
                ingestion.stop(flush=False)
            except Exception as e:
                result.anomalies.append(f"stopping the appliers failed: {type(e).__name__}: {e}")
        lap("drain")
        if s3 is not None:
            result.faults, result.fault_types = s3.faults(), s3.proxy.fault_types() if s3.proxy else {}
        check(result, uri, check_opts, driver.logs, cfg)
        lap("check")
    if own_dir:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    result.wall_seconds = round(time.monotonic() - started, 1)
    return result


def _laps(result: SoakResult):
    last = [time.monotonic()]

    def lap(name: str) -> None:
        now = time.monotonic()
        result.phases[name] = round(now - last[0], 1)
        last[0] = now

    return lap


# -- the checker --------------------------------------------------------------------------------------------


@dataclass
class _Model:
    """What the logs say about every id: appended (ok / maybe / failed) and deleted (ok / maybe)."""

    appended: dict[int, str] = field(default_factory=dict)
    deleted: dict[int, str] = field(default_factory=dict)
    failed_delete: set[int] = field(default_factory=set)
    #: How long the call that wrote each row took (a write longer than cleanup's retention may lose its files).
    seconds: dict[int, float] = field(default_factory=dict)
    #: Deletes that returned: (where, rows deleted, the live ids aimed at, the id range of the filter or None).
    delete_counts: list[tuple[str, int, list[int], list[int] | None]] = field(default_factory=list)


def _read_log(path: str) -> list[tuple[dict, dict | None]]:
    """(begin, end or None) of every call in a process's log; a torn last line is a call that never started or ended."""
    begins: dict[int, dict] = {}
    ends: dict[int, dict] = {}
    with open(path, "rb") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue  # torn by a SIGKILL while writing: the last line only
            (begins if e["ev"] == "begin" else ends)[e["n"]] = e
    return [(b, ends.get(n)) for n, b in sorted(begins.items())]


def _outcome(end: dict | None) -> str:
    """ok; maybe (killed, or CommitStateUnknown); failed (raised: nothing may have landed)."""
    if end is None:
        return "maybe"
    if end["ok"]:
        return "ok"
    return "maybe" if end.get("type") == "CommitStateUnknown" else "failed"


def _build_model(logs: list[tuple[str, int, str]], uri: str, result: SoakResult) -> _Model:
    model = _Model()
    ops: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    errors: collections.Counter[str] = collections.Counter()
    compaction: collections.Counter[str] = collections.Counter()
    cleaned: collections.Counter[str] = collections.Counter()
    for role, wid, path in logs:
        if not os.path.exists(path):
            continue
        for begin, end in _read_log(path):
            op, out = begin["op"], _outcome(end)
            ops[op][out] += 1
            where = f"{role} {wid} call {begin['n']} ({op})"
            if end is not None and op in ("append", "delete", "wal_commit", "index_update"):
                result.longest_write_seconds = max(result.longest_write_seconds, float(end.get("seconds", 0.0)))
            if end is not None and not end["ok"]:
                errors[end["type"]] += 1
                if not end.get("lamina"):
                    result.anomalies.append(
                        f"{where} raised {end['type']}, not a LaminaError: {end['msg'][:300]} {(end.get('tb') or '')[-1500:]}"
                    )
                elif not _names_table(end["msg"], uri):
                    result.anomalies.append(
                        f"{where} raised {end['type']} without naming the table or an object: {end['msg'][:300]}"
                    )
            if op == "cleanup" and end is not None and end["ok"]:
                cleaned["versions_removed"] += end["result"]["versions_removed"]
                cleaned["files_removed"] += end["result"]["files_removed"]
            if op == "compact" and end is not None and end["ok"]:
                for k in ("groups", "committed", "failed", "retries"):
                    compaction[k] += end["result"][k]
                compaction["passes"] += 1
            if op in ("append", "wal_commit"):
                lo, hi = begin["ids"]
                state = "maybe" if op == "wal_commit" and out == "failed" else out  # a WAL retry is idempotent by key
                for i in range(lo, hi):
                    model.appended[i] = state
                    if end is not None:
                        model.seconds[i] = float(end.get("seconds", 0.0))
            if op == "wal_commit" and begin.get("deletes"):
                for i in begin["deletes"]:
                    if out == "ok":
                        model.deleted[i] = "ok"
                    else:
                        model.deleted.setdefault(i, "maybe")
            if op == "delete":
                if out == "failed":
                    model.failed_delete.update(begin["ids"])
                    continue
                for i in begin["ids"]:
                    if out == "ok":
                        model.deleted[i] = "ok"
                    else:
                        model.deleted.setdefault(i, "maybe")
                if out == "ok":
                    model.delete_counts.append((where, int(end["result"]), begin["ids"], begin.get("range")))
    result.operations = {k: dict(v) for k, v in sorted(ops.items())}
    result.errors_seen = dict(errors)
    result.compaction = dict(compaction)
    result.cleanup = dict(cleaned)
    return model


def _names_table(msg: str, uri: str) -> bool:
    return uri.rstrip("/") in msg


def check(result: SoakResult, uri: str, opts: dict | None, logs: list[tuple[str, int, str]], cfg: SoakConfig) -> None:
    """Checks the table at ``uri`` against the model the logs give; appends to ``result.anomalies``."""
    import lamina
    import lamina.manifest
    from lamina.manifest import list_versions, manifest_path

    model = _build_model(logs, uri, result)
    table = lamina.open_table(uri, storage_options=opts)
    versions = list_versions(table.store)
    result.versions = {"first_kept": versions[0], "latest": versions[-1], "kept": len(versions)}
    if versions != list(range(versions[0], versions[-1] + 1)):
        missing = sorted(set(range(versions[0], versions[-1] + 1)) - set(versions))
        result.anomalies.append(
            f"versions are not contiguous: {len(versions)} kept from {versions[0]} to {versions[-1]}, missing {missing[:20]}"
        )
    for what, fn in (
        ("rows", lambda: _check_rows(result, table, model)),
        ("indices", lambda: _check_indices(result, table, model, random.Random(cfg.seed))),
        ("verify", lambda: _check_verify(result, table)),
    ):
        try:
            fn()
        except Exception as e:  # a read of the end state failed: a file is gone or damaged
            result.anomalies.append(f"checking {what} of version {table.version} raised {type(e).__name__}: {e}")
    # No writer is left: a cleanup with retention 0 leaves the latest version and its files only.
    table.cleanup(0, enforce_retention=False)
    table = lamina.open_table(uri, storage_options=opts)
    keep = table.manifest.referenced_paths() | {manifest_path(table.version)}
    hint = getattr(lamina.manifest, "LATEST_HINT", None)  # advisory, not owned by a version (docs/FORMAT.md §2)
    if hint is not None and table.store.exists(hint):
        keep.add(hint)
    files = [o.path for o in table.store.list("") if not o.path.startswith("_wal/")]
    result.files_after_cleanup = len(files)
    extra = sorted(set(files) - keep)
    if extra:
        result.anomalies.append(f"{len(extra)} files no version references after the final cleanup, e.g. {extra[:5]}")
    missing = sorted(keep - set(files))
    if missing:
        result.anomalies.append(f"{len(missing)} files the latest version needs are gone after the cleanup, e.g. {missing[:5]}")
    before = result.rows_checked
    try:
        result.anomalies += [f"after the final cleanup: {a}" for a in _row_anomalies(table, model, result)]
    except Exception as e:
        result.anomalies.append(f"reading version {table.version} after the final cleanup raised {type(e).__name__}: {e}")
    result.rows_checked = before


def _read_rows(table) -> tuple[pa.Table, list[str]]:
    """Every live row of ``table``, fragment by fragment; a fragment whose files are gone is skipped and
    described (with the version that added it), so the rows of the others are still checked."""
    from lamina.datafile import read_fragment
    from lamina.errors import ObjectNotFound

    parts, missing = [], []
    for f in table.manifest.fragments:
        try:
            parts.append(read_fragment(table.store, f, table.schema))
        except ObjectNotFound as e:
            missing.append((f, str(e)))
    notes = []
    if missing:
        added: dict[int, str] = {}
        for v in table.versions():
            frags = {fr.id for fr in table.checkout(v.version).manifest.fragments}
            for f, _ in missing:
                if f.id in frags and f.id not in added:
                    added[f.id] = f"version {v.version} ({v.operation}, committed {v.timestamp:%H:%M:%S})"
        for f, e in missing:
            notes.append(
                f"fragment {f.id} ({f.rows} rows, {f.path}) of version {table.version} cannot be read ({e}); "
                f"it is in every kept version since {added.get(f.id, 'before the first kept one')}"
            )
    return (pa.concat_tables(parts) if parts else SCHEMA.empty_table()), notes


def _row_anomalies(table, model: _Model, result: SoakResult) -> list[str]:
    data, found = _read_rows(table)
    ids = data.column("id").to_numpy()
    uniq, counts = np.unique(ids, return_counts=True)
    doubled = uniq[counts > 1]
    if len(doubled):
        found.append(f"{len(doubled)} rows are present more than once (doubled), e.g. ids {doubled[:5].tolist()}")
    order = np.argsort(ids, kind="stable")
    got = data.take(pa.array(order)).select(SCHEMA.names)
    want = rows_for(ids[order])
    if not got.equals(want):
        for name in SCHEMA.names:
            a, b = got.column(name).to_pylist(), want.column(name).to_pylist()
            bad = [k for k in range(len(a)) if a[k] != b[k]]
            if bad:
                k = bad[0]
                found.append(f"{len(bad)} rows have a wrong {name!r}, e.g. id {ids[order][k]}: {a[k]!r} instead of {b[k]!r}")
    present = set(uniq.tolist())
    result.rows_present, result.rows_checked, result.rows_maybe = len(present), 0, 0
    wrong: dict[str, list[int]] = collections.defaultdict(list)
    for i, state in model.appended.items():
        deleted = model.deleted.get(i)
        here = i in present
        if state == "ok" and deleted is None:
            result.rows_checked += 1
            if not here:
                wrong["committed (the call returned) and never deleted, but missing (lost)"].append(i)
        elif state == "ok" and deleted == "ok":
            result.rows_checked += 1
            if here:
                wrong["deleted (the delete returned) but present (resurrected)"].append(i)
        elif state == "failed":
            result.rows_checked += 1
            if here:
                wrong["present although the call that wrote them raised an error other than CommitStateUnknown"].append(i)
        else:
            result.rows_maybe += 1
    wrong["present but never written by any process"] = sorted(present - set(model.appended))
    for what, rows in wrong.items():
        if rows:
            longest = max((model.seconds.get(i, 0.0) for i in rows), default=0.0)
            found.append(
                f"{len(rows)} rows {what}, e.g. ids {sorted(rows)[:5]}; the longest call that wrote them took "
                f"{longest:.1f} s (cleanup retention {result.retention_seconds:g} s)"
            )
    for where, count, aimed, span in model.delete_counts:
        # A writer deletes only its own live rows; a range may also hold its rows whose append was "maybe".
        maybe = 0 if span is None else sum(1 for i in range(span[0], span[1] + 1) if model.appended.get(i) == "maybe")
        if not len(aimed) <= count <= len(aimed) + maybe:
            found.append(
                f"{where}: deleted {count} rows, aiming at {len(aimed)} live rows"
                + (f" (and {maybe} maybe rows in ids {span[0]}..{span[1]})" if span else "")
            )
    return found


def _check_verify(result: SoakResult, table) -> None:
    report = table.verify()
    if not report.ok:
        result.anomalies.append(f"verify of version {table.version} found problems: {report.problems[:5]}")


def _check_rows(result: SoakResult, table, model: _Model) -> None:
    result.anomalies += _row_anomalies(table, model, result)


def _check_indices(result: SoakResult, table, model: _Model, rng: random.Random) -> None:
    """Every index gives what a scan gives: random lookups, ranges, and the full key set."""
    names = {ix.name for ix in table.manifest.indices}
    for _, _, name in INDICES:
        if name not in names:
            result.anomalies.append(f"index {name} is missing from version {table.version}")
    keys = sorted(model.appended) or [0]
    filters = [f"id = {rng.choice(keys)}" for _ in range(30)]
    filters += [f"id IN ({', '.join(str(rng.choice(keys)) for _ in range(20))})" for _ in range(10)]
    for _ in range(10):
        a, b = sorted(rng.sample(keys, 2)) if len(keys) > 1 else (keys[0], keys[0])
        filters.append(f"id >= {a} AND id < {b}")
    filters += [f"cat = 'c{k}'" for k in range(CATS)]
    filters += [f"cat = 'c{rng.randrange(CATS)}' AND id > {rng.choice(keys)}" for _ in range(5)]
    filters += ["id >= 0", "id < 9223372036854775807", f"cat IN ({', '.join(repr(f'c{k}') for k in range(CATS))})"]
    for flt in filters:
        got = _sorted(table.to_arrow(filter=flt, use_index=True))
        want = _sorted(table.to_arrow(filter=flt, use_index=False))
        result.index_checks += 1
        if not got.equals(want):
            result.anomalies.append(f"filter {flt!r} gives {got.num_rows} rows through the indices and {want.num_rows} by a scan")
    full = _sorted(table.to_arrow())
    if not _sorted(table.to_arrow(filter="id >= 0", use_index=True)).equals(full):
        result.anomalies.append("the full key set through the id index differs from the table")


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


# -- command line -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["s3", "local", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=180.0, help="chaos time per backend")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--fault-rate", type=float, default=0.03)
    ap.add_argument("--kill-every", type=float, default=3.0)
    ap.add_argument("--retention", type=float, default=120.0, help="the cleanup loop's older_than, seconds")
    ap.add_argument("--workdir", help="keep logs here (default: a temp dir, removed)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--role-spec", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role_spec:
        spec = json.loads(args.role_spec)
        ROLES[spec["role"]](spec)
        return 0
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    results = []
    for backend in ["s3", "local"] if args.backend == "both" else [args.backend]:
        cfg = SoakConfig(
            backend=backend,
            seconds=args.seconds,
            seed=args.seed,
            writers=args.writers,
            producers=args.producers,
            fault_rate=args.fault_rate if backend == "s3" else 0.0,
            kill_every=args.kill_every,
            retention_seconds=args.retention,
        )
        workdir = Path(args.workdir) / backend if args.workdir else None
        r = run_soak(cfg, workdir)
        results.append(r)
        print(r.describe(), flush=True)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    return 1 if any(r.anomalies for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
