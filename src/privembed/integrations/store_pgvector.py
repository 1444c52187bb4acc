"""pgvector (PostgreSQL, where teams already keep sensitive data) behind
:class:`~privembed.integrations.store_base.VectorStore`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Unpack

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_choice, check_embeddings, check_int
from .store_base import (
    DEFAULT_COLLECTION,
    HNSW_EF_FACTOR,
    HNSW_EF_MIN,
    Hit,
    OpenOptions,
    VectorStore,
    _Batch,
    _parse_info,
)

__all__ = ["PG_DSN_ENV", "PG_EF_SEARCH_MAX", "PgVectorStore"]


#: environment variable holding the pgvector store's database (a libpq URL or key=value DSN)
PG_DSN_ENV = "PRIVEMBED_PG_DSN"
#: the registry of privembed collections in a database: name -> privembed info (JSON)
_PG_REGISTRY = "privembed_collections"
#: longest collection name (PostgreSQL identifiers are 63 bytes: "pev_" + name + "_hnsw")
_PG_MAX_NAME = 50
_PG_INDEXES = ("hnsw", "ivfflat")
#: pgvector's largest hnsw.ef_search
PG_EF_SEARCH_MAX = 1000


def _pg_vector(value: Any) -> NDArray[np.float32]:
    """A ``vector`` column as float32 (pgvector's loader gives a ``Vector`` or an array)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


class PgVectorStore(VectorStore):
    """A collection in PostgreSQL with pgvector: one table per collection.

    Protected vectors live in a ``vector(d)`` column, sealed payloads in ``bytea``, ids in a
    ``text`` primary key and metadata in ``jsonb``; the collection's privembed info is a row of
    ``privembed_collections``. Searches scan exactly (``ORDER BY embedding <=> q``) unless the
    collection was created with ``index="hnsw"`` or ``index="ivfflat"`` (approximate; built
    with the collection, or after the first upsert for IVFFlat, whose lists need data).
    ``metric`` maps to pgvector's cosine distance (``<=>``, score ``1 - distance``) or negative
    inner product (``<#>``, score ``-distance``).

    An index built on loaded data is much cheaper than one grown row by row: the configured
    index is built after the first upsert (HNSW and IVFFlat alike) and kept up to date by
    later ones; for a bulk load, create the collection without one and call
    :meth:`build_index` after loading.

    Every value travels as a bound parameter; the only identifiers in SQL text are the
    collection's table and index names, quoted (``psycopg.sql.Identifier``) from a validated
    name of at most 50 characters (``pev_<collection>``).

    Parameters
    ----------
    path : str or Path
        A local folder for what stays inside the trust boundary beside the collection (the
        sealed score profile that ``recall=`` plans ``k'`` from).
    dsn : str, optional
        The database: a libpq URL or ``key=value`` string. Default: the environment variable
        ``PRIVEMBED_PG_DSN``; libpq's own (``PGPASSWORD``, ``~/.pgpass``) fill in the rest.
        Never shown with its password (messages, :attr:`info`, ``repr``).
    index : {None, "hnsw", "ivfflat"}
        Approximate index of a new collection (default: none, exact search).
    lists : int, optional
        IVFFlat lists (default ``max(1, rows / 1000)`` at build time); ``probes`` per query.
    ef_search : int, default 100
        HNSW candidates per query.
    """

    name = "pgvector"
    name_limit = (_PG_MAX_NAME, "PostgreSQL identifiers are 63 bytes")

    def __init__(
        self,
        path: str | Path,
        collection: str = DEFAULT_COLLECTION,
        *,
        dsn: str | None = None,
        index: str | None = None,
        lists: int | None = None,
        probes: int = 10,
        ef_search: int = 100,
        **options: Unpack[OpenOptions],
    ) -> None:
        import os

        from ..keys.ledger_pg import redact_url

        if index is not None:
            check_choice("index", index, _PG_INDEXES)
        if lists is not None:
            check_int("lists", lists, ge=1)
        self.index_kind = index
        self.lists = lists
        self.probes = check_int("probes", probes, ge=1)
        self.ef_search = check_int("ef_search", ef_search, ge=1)
        given = dsn if dsn is not None else os.environ.get(PG_DSN_ENV)
        if not given:
            raise ValueError(
                f"the pgvector store needs a database: pass dsn=... or set {PG_DSN_ENV} "
                "(a postgresql:// URL; the password from PGPASSWORD or ~/.pgpass)."
            )
        self._dsn = given
        self.where = redact_url(given)
        self._conn: Any = None
        super().__init__(path, collection, **options)

    # ---- the connection ------------------------------------------------------------------------
    def _fail(self, exc: BaseException, doing: str) -> Exception:
        """One line naming what failed, never the DSN's password."""
        from ..keys.ledger_pg import scrub

        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        psycopg = self._pg
        cls: type[Exception] = (
            DataError if isinstance(exc, psycopg.DataError | UnicodeEncodeError) else ValueError
        )
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            cls = ConnectionError
        return cls(f"pgvector store {self.where}: {doing}: {scrub(text, self._dsn)}")

    def _table(self) -> Any:
        return self._sql.Identifier(f"pev_{self.collection}")

    def _rows(
        self, doing: str, stmt: str, params: tuple[Any, ...] = (), *, on: str | None = None
    ) -> list[Any]:
        """The rows of one statement (a constant of this module) on the collection's table, or
        on the table ``on``, named by its ``{}``; a database error is one line naming what
        failed (``doing``)."""
        table = self._table() if on is None else self._sql.Identifier(on)
        try:
            cur = self._conn.execute(self._sql.SQL(stmt).format(table), params)
            return list(cur.fetchall()) if cur.description is not None else []
        except self._pg.Error as exc:
            raise self._fail(exc, doing) from None

    def _open(self) -> dict[str, Any] | None:
        self._pg = require("psycopg", "postgres", purpose="the pgvector store")
        pgvector_psycopg = require("pgvector.psycopg", "postgres", purpose="the pgvector store")
        from psycopg import sql

        self._sql = sql
        try:
            conn = self._pg.connect(self._dsn, autocommit=True, connect_timeout=30)
        except (self._pg.Error, ValueError) as exc:
            raise self._fail(exc, "cannot connect") from None
        self._conn = conn
        try:
            have = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
            if have is None:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            pgvector_psycopg.register_vector(conn)
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (name TEXT PRIMARY KEY, info TEXT NOT NULL)"
                ).format(sql.Identifier(_PG_REGISTRY))
            )
            row = conn.execute(
                sql.SQL("SELECT info FROM {} WHERE name = %s").format(sql.Identifier(_PG_REGISTRY)),
                (self.collection,),
            ).fetchone()
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot open the collection registry") from None
        return None if row is None else _parse_info(row[0])

    def _collection_names(self) -> list[str]:
        rows = self._rows(
            "cannot list the collections", "SELECT name FROM {} ORDER BY name", on=_PG_REGISTRY
        )
        return [r[0] for r in rows]

    def _ops(self) -> tuple[str, str]:
        """(distance operator, operator class) of the collection's metric."""
        return ("<=>", "vector_cosine_ops") if self.metric == "cosine" else ("<#>", "vector_ip_ops")

    def _create(self, dim: int) -> None:
        sql = self._sql
        self.path.mkdir(parents=True, exist_ok=True)
        if self.index_kind is not None:
            self._info["index"] = self.index_kind
        try:
            with self._conn.transaction():
                self._conn.execute(
                    sql.SQL(
                        "CREATE TABLE {} (id TEXT PRIMARY KEY, embedding vector({}) NOT NULL, "
                        "payload BYTEA, metadata JSONB NOT NULL DEFAULT '{{}}'::jsonb)"
                    ).format(self._table(), sql.Literal(int(dim)))
                )
                self._conn.execute(
                    sql.SQL("INSERT INTO {} (name, info) VALUES (%s, %s)").format(
                        sql.Identifier(_PG_REGISTRY)
                    ),
                    (self.collection, self._info_json()),
                )
        except self._pg.Error as exc:
            raise self._fail(exc, f"cannot create collection {self.collection!r}") from None

    def build_index(self, kind: str | None = None) -> None:
        """Build the collection's approximate index now (``kind``: ``"hnsw"`` or
        ``"ivfflat"``; default the configured one), on the data already loaded; later upserts
        keep it up to date and searches use it."""
        self._check_open()
        if kind is not None:
            check_choice("index", kind, _PG_INDEXES)
            if self._info.get("index") not in (None, kind):
                raise ValueError(
                    f"collection {self.collection!r} has a {self._info['index']} index already."
                )
            self._info["index"] = kind
            if self._exists:
                self._write_info()
        if not self._exists:
            raise ValueError(f"collection {self.collection!r} is empty: upsert data first.")
        try:
            self._build_index()
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot build the index") from None

    def _build_index(self) -> None:
        """``CREATE INDEX IF NOT EXISTS`` of the collection's kind (HNSW or IVFFlat)."""
        sql = self._sql
        kind = self._info.get("index")
        if kind not in _PG_INDEXES:
            return
        op_class = sql.SQL(self._ops()[1])  # a constant of this module, never user text
        name = sql.Identifier(f"pev_{self.collection}_{'hnsw' if kind == 'hnsw' else 'ivf'}")
        if kind == "hnsw":
            stmt = sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding {})").format(
                name, self._table(), op_class
            )
        else:
            n = self._count()
            lists = self.lists or max(1, n // 1000)
            stmt = sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} USING ivfflat (embedding {}) WITH (lists = {})"
            ).format(name, self._table(), op_class, sql.Literal(int(lists)))
        with self._conn.transaction():
            # a graph that fits in memory builds several times faster (session default 64 MB)
            self._conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
            self._conn.execute(stmt)

    def _write_info(self) -> None:
        self._rows(
            "cannot update the collection's info",
            "UPDATE {} SET info = %s WHERE name = %s",
            (self._info_json(), self.collection),
            on=_PG_REGISTRY,
        )

    def _upsert(self, batch: _Batch) -> None:
        ids, X, metadata, payloads = batch
        from psycopg.types.json import Jsonb

        sql = self._sql
        metas = metadata if metadata is not None else [{}] * len(ids)
        blobs: list[bytes | None] = list(payloads) if payloads is not None else [None] * len(ids)
        rows = [
            (rid, vec, blob, Jsonb(dict(m or {})))
            for rid, vec, m, blob in zip(ids, X, metas, blobs, strict=True)
        ]
        staged = sql.Identifier("pev_staged")
        try:
            with self._conn.transaction():
                self._conn.execute(
                    sql.SQL(
                        "CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS) "
                        "ON COMMIT DELETE ROWS"
                    ).format(staged, self._table())
                )
                with self._conn.cursor() as cur:
                    copy_sql = sql.SQL(
                        "COPY {} (id, embedding, payload, metadata) FROM STDIN (FORMAT BINARY)"
                    ).format(staged)
                    with cur.copy(copy_sql) as cp:
                        cp.set_types(["text", "vector", "bytea", "jsonb"])
                        for r in rows:
                            cp.write_row(r)
                self._conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (id, embedding, payload, metadata) SELECT id, embedding, "
                        "payload, metadata FROM {} ON CONFLICT (id) DO UPDATE SET "
                        "embedding = EXCLUDED.embedding, payload = EXCLUDED.payload, "
                        "metadata = EXCLUDED.metadata"
                    ).format(self._table(), staged)
                )
            if self._info.get("index") in _PG_INDEXES:
                self._build_index()  # once there is data (IVFFlat's lists need it); then a no-op
        except (self._pg.Error, UnicodeEncodeError) as exc:
            raise self._fail(exc, "cannot upsert") from None

    @property
    def approximate(self) -> bool:
        """Whether searches go through an approximate index (HNSW or IVFFlat): its recall is
        measured against an exact scan (:meth:`search_recall`) and folded into k'."""
        return self._info.get("index") in _PG_INDEXES

    def ef_search_for(self, k: int) -> int:
        """``hnsw.ef_search`` of a search of depth ``k``: :data:`HNSW_EF_FACTOR` times k, at
        least the store's ``ef_search`` and :data:`HNSW_EF_MIN`, at most pgvector's limit (1,000; a deeper search
        returns fewer than k rows, which its measured recall shows)."""
        ef = max(self.ef_search, HNSW_EF_MIN, int(np.ceil(HNSW_EF_FACTOR * k)))
        return min(PG_EF_SEARCH_MAX, ef)

    def search_recall(self, vectors: Any, k: int) -> float:
        """Mean share of each query's exact top ``k`` (the same query with index scans off:
        a sequential scan) that the indexed search returns."""
        self._check_open()
        k = check_int("k", k, ge=1)
        Q, _ = check_embeddings(vectors, name="query", dim=self.dim, allow_zero=True)
        if not self.approximate or not self._exists:
            return 1.0
        Q = np.ascontiguousarray(Q, dtype=np.float32)
        got = self._search(Q, k, False, False)
        exact = self._search(Q, k, False, False, exact=True)
        want = min(k, self._count())  # a short indexed answer counts as misses
        shares = [
            len({h.id for h in a} & {h.id for h in b}) / max(1, want)
            for a, b in zip(got, exact, strict=True)
        ]
        return float(np.mean(shares))

    def _search(
        self,
        Q: NDArray[np.float32],
        k: int,
        with_vectors: bool,
        with_payloads: bool,
        *,
        exact: bool = False,
    ) -> list[list[Hit]]:
        sql = self._sql
        op, _ = self._ops()
        score = "1 - (embedding <=> %s)" if op == "<=>" else "-(embedding <#> %s)"
        cols = (
            "id, {score}, metadata, "
            + ("payload" if with_payloads else "NULL::bytea")
            + (", embedding" if with_vectors else "")
        )
        # exact: an order no index serves (the distance plus 0), so every row is scored and
        # sorted -- a statement of its own, never a cached plan of the indexed one
        order = f"(embedding {op} %s) + 0" if exact else f"embedding {op} %s"
        stmt = sql.SQL(
            "SELECT " + cols.format(score=score) + " FROM {} ORDER BY " + order + " LIMIT %s"
        ).format(self._table())  # the operator and columns are constants of this module
        out: list[list[Hit]] = []
        try:
            with self._conn.transaction():
                kind = None if exact else self._info.get("index")
                if kind == "hnsw":
                    self._conn.execute(
                        sql.SQL("SET LOCAL hnsw.ef_search = {}").format(
                            sql.Literal(self.ef_search_for(k))
                        )
                    )
                elif kind == "ivfflat":
                    self._conn.execute(
                        sql.SQL("SET LOCAL ivfflat.probes = {}").format(sql.Literal(self.probes))
                    )
                with self._conn.cursor() as cur:
                    for q in Q:
                        cur.execute(stmt, (q, q, k), prepare=True)
                        hits = []
                        for row in cur.fetchall():
                            blob = None if row[3] is None else bytes(row[3])
                            vec = _pg_vector(row[4]) if with_vectors else None
                            hits.append(
                                Hit(str(row[0]), float(row[1]), dict(row[2] or {}), vec, blob)
                            )
                        out.append(hits)
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot search") from None
        return out

    def _payloads(self, ids: list[str]) -> list[bytes | None]:
        rows = self._rows(
            "cannot read payloads", "SELECT id, payload FROM {} WHERE id = ANY(%s)", (ids,)
        )
        found = {str(r[0]): (None if r[1] is None else bytes(r[1])) for r in rows}
        return [found.get(i) for i in ids]

    def _all_ids(self) -> list[str]:
        return [str(r[0]) for r in self._rows("cannot list the record ids", "SELECT id FROM {}")]

    def _count(self) -> int:
        return int(self._rows("cannot count", "SELECT COUNT(*) FROM {}")[0][0])

    def close(self) -> None:
        if not self._closed and self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        super().close()

    def __repr__(self) -> str:
        return (
            f"PgVectorStore(dsn={self.where!r}, collection={self.collection!r}, "
            f"metric={self.metric!r})"
        )
