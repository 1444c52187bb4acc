"""Index Parquet shards into one pgvector collection with several writers and one ledger.

:func:`index_cluster` is the index path for a deployment larger than one machine: several
writers -- local processes (``engine="local"``) or Ray Data actors (``engine="ray"``) on the
nodes of a Ray cluster -- protect batches with keyed noise, seal each record's exact vector
(:mod:`privembed.keys.payload`) and upsert both into **one** PostgreSQL + pgvector collection,
each over its own connection. What makes the writers interchangeable:

* **Keyed noise** (:mod:`privembed.keys.keyed`): a record's noise is a function of (key,
  configuration, model, record id, content) only, so whichever writer protects a batch, and
  however often, the protected vector is the same bits -- the same as a single-process
  :meth:`ProtectedCollection.add <privembed.integrations.collection.ProtectedCollection.add>`
  of the same data with the same key.
* **Idempotent writes**: every batch is one upsert transaction keyed by the record id
  (``INSERT ... ON CONFLICT (id) DO UPDATE``): a batch written twice leaves one row per id with
  the same protected vector (its payload is sealed again under a fresh nonce, and opens to the
  same exact vector). A writer that dies mid-batch leaves that batch's transaction rolled back;
  running the same call again fills in what is missing and duplicates nothing.
* **One ledger** (a SQLite file or a ``postgresql://`` ledger shared with the servers): the
  driver accounts every record once in **one release**, committed (budgets checked) before any
  writer starts -- writers never touch the ledger. A re-run accounts the same records with the
  same content under the same key: the ledger recognises them as free re-releases, so nothing
  is charged twice. A crash after the commit leaves a charged release with missing rows (the
  safe direction), never rows without their ledger record.

The collection's table can be **hash-partitioned by id** (``partitions=P``: ``P`` tables
``pev_<collection>_p<i>`` under ``pev_<collection>``), which PostgreSQL routes each row to;
the store's searches, payload reads and re-rank are unchanged (they address the parent table).

Order of work:

1. the shards are listed and checked (:func:`~privembed.integrations.shards.plan_shards`: same
   embedding column and dimension, not already protected, ids present and unique);
2. the collection is prepared: created (partitioned when asked) or opened and checked against
   this mechanism, key and model (mixing configurations in one collection is refused);
3. with a ledger, the driver accounts every record and commits the release;
4. the driver writes the first batch itself (the collection's protection and payload records
   are then in place before several writers read them), the writers write every batch;
5. a writer that failed is reported in one line (the release stays committed; run the same
   call again).

Secrets. Every writer holds the key (it draws the noise and seals the payloads); on a cluster it
travels to the Ray actors in their constructor arguments. Use a cluster whose nodes you trust,
with Ray's TLS on an untrusted network. The database sees protected vectors and AES-GCM
ciphertext only.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core._validation import check_choice, check_int
from ..mechanisms import Mechanism
from ..release import Batch, ReleaseRequest, Releases, publish
from ._shardplan import ShardPlan, plan_shards, resolve_shards

__all__ = ["ClusterTarget", "index_cluster", "prepare_collection"]

ENGINES = ("local", "ray")
#: the largest number of hash partitions (a table name per partition: ``pev_<name>_p<i>``)
MAX_PARTITIONS = 256


@dataclass(frozen=True)
class ClusterTarget:
    """Where and how every writer writes: the database, the collection and what the records
    are protected with. Picklable: it is what a writer process or Ray actor receives."""

    dsn: str
    collection: str
    path: str
    mechanism: Mechanism
    key: bytes
    model: str | None
    column: str | None
    id_column: str | None
    batch_rows: int

    def open(self) -> Any:
        """A :class:`~privembed.integrations.collection.ProtectedCollection` over a new
        connection, storing payloads (this writer's own connection)."""
        from .collection import ProtectedCollection

        return ProtectedCollection.open(
            "pgvector", self.path, self.collection, mechanism=self.mechanism, key=self.key,
            payloads=True, embedding_model=self.model, store_options={"dsn": self.dsn},
        )  # fmt: skip


def _batches(plan: ShardPlan, batch_rows: int) -> Iterator[tuple[int, Batch]]:
    """Every batch of the plan's shards, numbered in order across the shards."""
    from ..data.io import iter_batches

    j = 0
    offset = 0
    for f, n in zip(plan.files, plan.rows, strict=True):
        _n, _d, _m, raw = iter_batches(
            f, batch_rows=batch_rows, column=plan.column, id_column=plan.id_column
        )
        for b in raw:
            assert b.ids is not None
            yield j, Batch(b.X, list(b.ids), start=offset + b.start, name=f.name)
            j += 1
        offset += n


class _Records:
    """The shards as the release's source (the driver accounts every record from it)."""

    name = "shards"

    def __init__(self, plan: ShardPlan, batch_rows: int) -> None:
        self.plan, self.batch_rows = plan, batch_rows
        self.model: str | None = plan.metadata.get("embedding_model")

    def batches(self) -> Iterator[Batch]:
        for _j, b in _batches(self.plan, self.batch_rows):
            yield b


# ---- the table ------------------------------------------------------------------------------
def prepare_collection(
    dsn: str,
    collection: str,
    path: str | Path,
    *,
    dim: int,
    metric: str,
    partitions: int | None = None,
) -> dict[str, Any]:
    """Create the collection's table (hash-partitioned by id into ``partitions`` tables when
    given) and its registry entry, unless it exists; return its stored info.

    An existing collection is kept as it is (partitioned or not); its dimension must be
    ``dim``. The table has the columns :class:`~privembed.integrations.stores.PgVectorStore`
    creates, so the store reads and writes it unchanged.

    Raises
    ------
    ValueError
        A dimension or metric that differs from the existing collection's, a bad partition count.
    """
    from psycopg import sql

    from .store_pgvector import _PG_REGISTRY, PgVectorStore

    if partitions is not None:
        check_int("partitions", partitions, ge=1, le=MAX_PARTITIONS)
    store = PgVectorStore(path, collection, metric=metric, dsn=dsn)
    try:
        info = store.info
        if store.dim is not None:
            if store.dim != dim:
                raise ValueError(
                    f"collection {collection!r} holds {store.dim}-dimensional vectors, not {dim}."
                )
            return info
        table = sql.Identifier(f"pev_{collection}")
        info.update(dim=int(dim), partitions=partitions)
        Path(path).mkdir(parents=True, exist_ok=True)
        conn = _connect(dsn)
        try:
            with conn.transaction():
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE {} (id TEXT PRIMARY KEY, embedding vector({}) NOT NULL, "
                        "payload BYTEA, metadata JSONB NOT NULL DEFAULT '{{}}'::jsonb)"
                        + (" PARTITION BY HASH (id)" if partitions else "")
                    ).format(table, sql.Literal(int(dim)))
                )
                for i in range(partitions or 0):
                    conn.execute(
                        sql.SQL(
                            "CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS {}, "
                            "REMAINDER {})"
                        ).format(
                            sql.Identifier(f"pev_{collection}_p{i}"),
                            table,
                            sql.Literal(int(partitions or 0)),
                            sql.Literal(i),
                        )
                    )
                conn.execute(
                    sql.SQL("INSERT INTO {} (name, info) VALUES (%s, %s)").format(
                        sql.Identifier(_PG_REGISTRY)
                    ),
                    (collection, _json(info)),
                )
        finally:
            conn.close()
        return info
    finally:
        store.close()


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, sort_keys=True)


def _connect(dsn: str) -> Any:
    import psycopg

    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=30)
    except psycopg.Error as exc:
        from ..keys.ledger_pg import redact_url, scrub

        raise ConnectionError(
            f"pgvector store {redact_url(dsn)}: cannot connect: "
            f"{scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else '', dsn)}"
        ) from None


# ---- the writers ----------------------------------------------------------------------------
@dataclass
class WriterReport:
    """What one writer did: rows and batches written, and the seconds it spent writing them."""

    writer: int
    rows: int = 0
    batches: int = 0
    seconds: float = 0.0

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def write_share(
    target: ClusterTarget, plan: ShardPlan, writer: int, writers: int, skip: int = 1
) -> WriterReport:
    """Write the batches ``j`` with ``j % writers == writer`` (and ``j >= skip``: the driver
    wrote the first) over one connection of this writer's own; returns its report."""
    report = WriterReport(writer)
    col = target.open()
    try:
        for j, b in _batches(plan, target.batch_rows):
            if j < skip or j % writers != writer:
                continue
            t0 = time.perf_counter()
            col.add(b.ids, b.X, row_offset=b.start)
            report.seconds += time.perf_counter() - t0
            report.rows += len(b.ids or ())
            report.batches += 1
    finally:
        col.close()
    return report


def _local_writer(target: ClusterTarget, plan: ShardPlan, w: int, n: int, conn: Any) -> None:
    """A writer process: its share, then its report (or its error, one line) down the pipe."""
    try:
        conn.send(("ok", write_share(target, plan, w, n)))
    except BaseException as exc:  # reported to the driver, which raises it
        conn.send(
            ("error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        )
    finally:
        conn.close()


def _run_local(target: ClusterTarget, plan: ShardPlan, writers: int) -> list[WriterReport]:
    """``writers`` new processes, each with its connection. Started with ``spawn``, never
    ``fork``: a process forked from one that runs threads (pyarrow's, a database driver's) can
    wait forever on a lock held by a thread that was not copied."""
    ctx: Any = multiprocessing.get_context("spawn")
    shared = replace(plan, ids=None)  # the writers read their rows; the ids stay here
    procs, pipes = [], []
    for w in range(writers):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_local_writer, args=(target, shared, w, writers, send), daemon=True)
        p.start()
        send.close()
        procs.append(p)
        pipes.append(recv)
    reports: list[WriterReport] = []
    failures: list[str] = []
    for w, (p, recv) in enumerate(zip(procs, pipes, strict=True)):
        got = None
        try:
            got = recv.recv()
        except EOFError:
            pass
        p.join()
        if got is not None and got[0] == "ok":
            reports.append(got[1])
        elif got is not None:
            failures.append(f"writer {w} failed ({got[1]})")
        else:
            failures.append(f"writer {w} died (exit code {p.exitcode})")
    if failures:
        raise RuntimeError(_failed(failures, writers))
    return reports


def _failed(failures: list[str], writers: int) -> str:
    return (
        f"{'; '.join(failures)} of {writers}: the ledger holds the committed release and the "
        "other writers' batches are written; run the same call again (it rewrites the same "
        "vectors, adds no duplicate and charges nothing new)."
    )


class _RayWriter:
    """A Ray Data actor: one connection, held for every batch it is given."""

    def __init__(self, target: ClusterTarget, column: str, id_column: str) -> None:
        import os

        self.col = target.open()
        self.column, self.id_column = column, id_column
        self.pid = os.getpid()

    def __call__(self, table: Any) -> Any:
        import pyarrow as pa

        from ..data.io import _list_to_numpy

        X = _list_to_numpy(table.column(self.column), self.column)
        ids = table.column(self.id_column).to_pylist()
        t0 = time.perf_counter()
        self.col.add(ids, X)
        took = time.perf_counter() - t0
        return pa.table({"writer": [self.pid], "rows": [len(ids)], "seconds": [took]})


def _actor_cpus(ray: Any, writers: int) -> float:
    """CPUs each writer actor asks for: one, but never so many that the writers hold every CPU
    of the cluster (Ray Data's read tasks need one too; without it the job waits forever)."""
    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    return min(1.0, max(cpus - 1.0, cpus / 2) / writers)


def _run_ray(
    target: ClusterTarget,
    plan: ShardPlan,
    writers: int,
    address: str | None,
    num_cpus: int | None,
) -> list[WriterReport]:
    """Ray Data: ``read_parquet -> map_batches(write)`` on ``writers`` actors."""
    from ..data.io import _embedding_column, _open_parquet
    from .ray_engine import _user_error, ray_session

    first = plan.files[0]
    schema = _open_parquet(first).schema_arrow
    column = _embedding_column(schema, plan.column, first)
    id_column = plan.id_column or "id"
    with ray_session(address, num_cpus):
        import ray.data

        try:
            ds = ray.data.read_parquet([str(f.resolve()) for f in plan.files])
            out = ds.map_batches(
                _RayWriter,
                fn_constructor_kwargs={
                    "target": target,
                    "column": column,
                    "id_column": id_column,
                },
                batch_format="pyarrow",
                batch_size=target.batch_rows,
                # an autoscaling pool of 1 to `writers` actors, grown by Ray while blocks queue
                # and CPUs are free (a fixed pool of n needs n input blocks at planning time,
                # which read_parquet does not announce; repartitioning to make them is a barrier
                # that holds the whole dataset in the object store)
                concurrency=(1, writers),
                num_cpus=_actor_cpus(ray, writers),
            ).take_all()
        except Exception as exc:
            found = _user_error(exc)
            if found is not None:
                raise found from None
            raise RuntimeError(_failed([f"a Ray writer failed ({str(exc).splitlines()[0]})"],
                                       writers)) from None  # fmt: skip
    by_pid: dict[int, WriterReport] = {}
    for row in out:
        pid = int(row["writer"])
        r = by_pid.setdefault(pid, WriterReport(len(by_pid)))
        r.rows += int(row["rows"])
        r.batches += 1
        r.seconds += float(row["seconds"])
    return list(by_pid.values())


# ---- the sink -------------------------------------------------------------------------------
class _Collection:
    """The collection as the release's sink: every record accounted by the driver and committed
    before any row is written, then the writers."""

    per_batch = False

    def __init__(
        self,
        target: ClusterTarget,
        *,
        engine: str,
        writers: int,
        address: str | None,
        num_cpus: int | None,
    ) -> None:
        self.target, self.engine, self.writers = target, engine, writers
        self.address, self.num_cpus = address, num_cpus
        self.destination = f"PgVectorStore:{target.collection}"
        self.account_ms: list[float] = []
        self.commit_ms = 0.0
        self.reports: list[WriterReport] = []
        self.seconds = 0.0

    def run(self, source: Any, releases: Releases) -> None:
        plan: ShardPlan = source.plan
        if releases.ledger is not None:
            for b in source.batches():
                t0 = time.perf_counter()
                releases.account(b)
                self.account_ms.append(1000 * (time.perf_counter() - t0))
            t0 = time.perf_counter()
            releases.commit()  # before any row is written
            self.commit_ms = 1000 * (time.perf_counter() - t0)
        t0 = time.perf_counter()
        # the driver writes the first batch: the collection's protection and payload records
        # are in place before several writers open it
        col = self.target.open()
        try:
            for _j, b in _batches(plan, self.target.batch_rows):
                col.add(b.ids, b.X, row_offset=b.start)
                break
        finally:
            col.close()
        if self.engine == "local":
            self.reports = _run_local(self.target, plan, self.writers)
        else:
            self.reports = _run_ray(self.target, plan, self.writers, self.address, self.num_cpus)
        self.seconds = time.perf_counter() - t0
        releases.published()


def index_cluster(
    inputs: str | Path | Sequence[str | Path],
    dsn: str,
    collection: str,
    mechanism: Mechanism,
    *,
    key: Any,
    path: str | Path = ".",
    writers: int = 2,
    engine: str = "local",
    partitions: int | None = None,
    ledger: Any = None,
    budget_epsilon: float | None = None,
    budget_delta: float | None = None,
    batch_rows: int = 4096,
    column: str | None = None,
    id_column: str | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
) -> dict[str, Any]:
    """Index Parquet shards into one pgvector collection with ``writers`` writers (see the
    module docstring).

    Parameters
    ----------
    inputs : folder, glob pattern, file, or a list of them
        Parquet shards of clean embeddings with record ids (every node must see them).
    dsn : str
        The PostgreSQL database (a ``postgresql://`` URL every writer can reach).
    collection : str
        The collection (at most 50 characters).
    mechanism : Mechanism
    key : bytes or key file
        The secret key: keyed noise and sealed payloads (required).
    path : str or Path
        The local folder beside the collection (what stays with the key holder).
    writers : int
        Writer processes (local engine) or Ray actors.
    engine : {"local", "ray"}
    partitions : int, optional
        A new collection's table is hash-partitioned by id into this many tables.
    ledger, budget_epsilon, budget_delta
        The privacy ledger (a file or a ``postgresql://`` URL) and per-record budget.
    batch_rows : int
        Rows per upsert (local engine: also the unit writers share out).
    address, num_cpus
        Ray only: an existing cluster, or a local instance with ``num_cpus`` CPUs.

    Returns
    -------
    dict
        ``rows``, ``writers`` (one entry per writer: rows, batches, seconds, rows/s), ``seconds``
        (writing, all writers), ``ledger`` (``fresh`` and ``free`` records, ``account_ms`` per
        batch, ``commit_ms``, ``batches``) and ``count`` (rows in the collection afterwards).

    Raises
    ------
    RuntimeError
        A writer died or failed (one line; the release stays committed: call again).
    """
    from ..keys.keyed import resolve_key
    from .query import query_treatment

    engine = check_choice("engine", engine, ENGINES)
    writers = check_int("writers", writers, ge=1)
    batch_rows = check_int("batch_rows", batch_rows, ge=1)
    if key is None:
        raise ValueError(
            "index_cluster needs a key: keyed noise makes every writer (and a re-run) write "
            "the same bits, and the payloads are sealed with it."
        )
    if engine == "local" and (address is not None or num_cpus is not None):
        raise ValueError("address and num_cpus apply to engine='ray' only.")
    request = ReleaseRequest(
        key=key, ledger=ledger, budget_epsilon=budget_epsilon, budget_delta=budget_delta
    )
    request.check()
    plan = plan_shards(resolve_shards(inputs), column=column, id_column=id_column, need_ids=True)
    if plan.dim > 0:
        mechanism.check_dim(plan.dim)
    target = ClusterTarget(
        dsn=dsn, collection=collection, path=str(path), mechanism=mechanism,
        key=resolve_key(key), model=plan.metadata.get("embedding_model"), column=plan.column,
        id_column=plan.id_column, batch_rows=batch_rows,
    )  # fmt: skip
    dim = plan.dim if plan.dim > 0 else int(next(_batches(plan, 1))[1].X.shape[1])
    prepare_collection(dsn, collection, path, dim=mechanism.output_dim(dim),
                       metric=query_treatment(mechanism).metric, partitions=partitions)  # fmt: skip
    target.open().close()  # the configuration checked against the collection's before work
    sink = _Collection(target, engine=engine, writers=writers, address=address,
                       num_cpus=num_cpus)  # fmt: skip
    releases = publish(_Records(plan, batch_rows), sink, mechanism, request)
    s = releases.summary
    col = target.open()
    try:
        count = col.store.count()
    finally:
        col.close()
    return {
        "rows": plan.total_rows,
        "count": count,
        "engine": engine,
        "seconds": sink.seconds,
        "writers": [
            {
                "writer": r.writer,
                "rows": r.rows,
                "batches": r.batches,
                "seconds": r.seconds,
                "rows_per_second": r.rows_per_second,
            }
            for r in sink.reports
        ],
        "ledger": None
        if ledger is None
        else {
            "fresh": None if s is None else s.fresh,
            "free": None if s is None else s.free,
            "batches": len(sink.account_ms),
            "account_ms": sink.account_ms,
            "commit_ms": sink.commit_ms,
        },
        "guarantee": mechanism.guarantee.describe(),
    }
