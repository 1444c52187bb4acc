"""The privacy ledger: every fresh release of a record spends budget; the ledger remembers.

A ledger -- an SQLite file, or a PostgreSQL database that several processes and machines share
(a ``postgresql://`` URL; :mod:`privembed.keys.ledger_pg`) -- records each release of each record -- its canonically typed id, the subject
it is charged to (a user or API client, if any), the configuration fingerprint, the key id and
*tag commitment* of keyed noise (:func:`privembed.keys.keyed.tag_commitment`), what the release costs
(:func:`privembed.core.accounting.cost_of`), a digest of the output -- and composes a record's
releases with :class:`privembed.core.accounting.Composition` (exact closed form for Gaussian noise, basic
composition otherwise). A keyed re-release with the same tag (same key, configuration, model, id *and
content*) returns the identical vector, so it is recorded as *free*; changed content under the
same id has another tag and is charged.

Releases are two-phase (:meth:`Ledger.stage`): the caller stages the records of a release as it
computes the output (a temporary table on disk, so memory stays bounded and duplicate ids are
refused across batches), then :meth:`StagedRelease.commit` takes SQLite's write lock, decides
which records are free, checks the per-record and per-subject budgets, and records the release
-- or refuses it, naming the records. Only after the commit may the output be published
(:mod:`privembed.release` renames the finished file), and :meth:`StagedRelease.mark_published`
then notes that it was. A crash between commit and publication leaves a *charged release
without output*, which is conservative and is listed by :meth:`Ledger.unpublished`.

Accounting cost is bounded per commit. A subject's composition is kept as *running totals*
(table ``subject_totals``: basic epsilon and delta sums and Gaussian ``sum 1/s^2`` per subject
and relation, updated in the commit's transaction), so a commit reads one row instead of the
subject's history; a watermark (the last release folded in) lets the totals catch up with rows
that an older privembed wrote without them. The per-record check aggregates the staged records'
histories in SQL and composes each *distinct* history once, so its Python work does not grow
with the number of records.

Clean-vector *aliases* (:meth:`Ledger.claim_aliases`) are ledger state too: a bounded table of
HMAC tags and the identity that first claimed each (the server's rule that texts with one clean
vector are one record), surviving restarts and shared by every process using the ledger.

Budgets are ledger state: :meth:`Ledger.set_budget` sets or lowers them; raising needs
``allow_raise=True`` and is recorded with its time in the budget history. Inspection
(``readonly=True``) opens the file read-only and refuses a file that is not a privembed ledger,
leaving it byte-identical.

Backends
--------
The semantics above live once, in :class:`Ledger` and :class:`StagedRelease`; a backend holds
only what its database does differently: the connection, the SQL dialect, the schema's types,
staging tables and the write lock (:class:`_SQLiteBackend` here: ``BEGIN IMMEDIATE`` on a file;
:class:`privembed.keys.ledger_pg.PostgresBackend`: a transaction-scoped advisory lock). Both take the
write lock in bounded steps, so the ledger's timeout (:class:`LedgerBusy`) and its cooperative
checkpoint (``ledger.wait``) are the same. A PostgreSQL connection that breaks raises
:class:`LedgerUnreachable` (a :class:`LedgerBusy`: try again later) from whatever operation
found it, and a release is never reported as recorded unless its commit was acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core._validation import DataError, check_real
from ..core.accounting import (
    Composition,
    Cost,
    Neighbouring,
    UnsupportedGuarantee,
    cost_of,
    exceeds_budget,
)
from ..core.cancel import checkpoint
from .keyed import typed_id
from .ledger_pg import PostgresBackend, is_postgres_url, redact_url

__all__ = [
    "AliasConflict",
    "Budget",
    "BudgetExceeded",
    "BudgetRaise",
    "DuplicateIds",
    "Ledger",
    "LedgerBusy",
    "LedgerUnreachable",
    "NotALedger",
    "Spent",
    "StagedRelease",
    "administer_budget",
    "display_key",
    "is_postgres_url",
    "key_value",
    "ledger_for_command",
    "open_existing",
    "record_key",
    "redact_url",
]

#: ``PRAGMA application_id`` of a privembed ledger ("pemb")
APPLICATION_ID = 0x70656D62
SCHEMA_VERSION = 3
#: aliases a ledger keeps by default (least recently used ones are forgotten beyond it)
ALIAS_CAPACITY = 1 << 20
#: record ids per ``IN (...)`` lookup (under SQLite's historical limit of 999 parameters)
_LOOKUP_CHUNK = 900


def _select_in(sql: Any, query: str, keys: Sequence[Any]) -> Iterator[Any]:
    """The rows of ``query`` -- whose ``IN ({marks})`` takes ``keys`` -- fetched in chunks of
    :data:`_LOOKUP_CHUNK` bound parameters (SQLite's limit on variables per statement)."""
    for start in range(0, len(keys), _LOOKUP_CHUNK):
        chunk = list(keys[start : start + _LOOKUP_CHUNK])
        yield from sql.execute(query.replace("{marks}", ",".join("?" * len(chunk))), chunk)


#: delta at which compositions are reported when no budget is set
DEFAULT_REPORT_DELTA = 1e-5

_SCHEMA = """
CREATE TABLE releases (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id TEXT NOT NULL,
    subject TEXT,
    config_fp TEXT NOT NULL,
    key_id TEXT,
    tag TEXT,
    relation TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    noise_multiplier REAL,
    free INTEGER NOT NULL,
    output_digest TEXT,
    batch TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX releases_record ON releases(record_id, tag);
CREATE INDEX releases_subject ON releases(subject) WHERE subject IS NOT NULL;
CREATE TABLE batches (
    batch TEXT PRIMARY KEY,
    created REAL NOT NULL,
    config_fp TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    guarantee TEXT NOT NULL,
    key_id TEXT,
    subject TEXT,
    destination TEXT,
    records INTEGER NOT NULL,
    fresh INTEGER NOT NULL,
    published REAL
);
CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE subject_totals (
    subject TEXT NOT NULL,
    relation TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    mu2 REAL NOT NULL,
    fresh INTEGER NOT NULL,
    free INTEGER NOT NULL,
    PRIMARY KEY (subject, relation)
) WITHOUT ROWID;
CREATE TABLE aliases (tag TEXT PRIMARY KEY, owner TEXT NOT NULL, used INTEGER NOT NULL);
CREATE INDEX aliases_used ON aliases(used);
CREATE TABLE budget_history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    previous TEXT,
    action TEXT NOT NULL,
    changed REAL NOT NULL
);
"""

_V1_COLUMNS = {
    "seq",
    "record_id",
    "config_fp",
    "key_id",
    "kind",
    "epsilon",
    "delta",
    "gauss_ratio",
    "guarantee",
    "free",
    "output_digest",
    "batch",
    "created",
}


class BudgetExceeded(ValueError):
    """A release would take records (or a subject) past the configured budget."""


class BudgetRaise(ValueError):
    """A budget change would raise the stored budget without ``allow_raise``."""


class DuplicateIds(DataError):
    """The same record id appears more than once in one release."""


class LedgerBusy(RuntimeError):
    """Another process held the ledger's write lock for longer than the wait allowed."""


class LedgerUnreachable(LedgerBusy):
    """The ledger's database could not be reached, or the connection broke (PostgreSQL): the
    operation was not recorded (a commit in flight may have been: the conservative direction).
    Ledger-bound work must stop; the next operation connects again."""


class AliasConflict(RuntimeError):
    """Another process claimed an alias tag for another owner after it was looked up (the
    release was not recorded; look the tags up again and retry)."""


class NotALedger(DataError):
    """The file is not a privembed ledger (it is left untouched)."""


@dataclass(frozen=True)
class Budget:
    """A per-record (or per-subject) budget: composed (epsilon, delta) may not exceed it."""

    epsilon: float
    delta: float

    def __iter__(self) -> Iterator[float]:  # unpacks as (epsilon, delta)
        return iter((self.epsilon, self.delta))

    def __getitem__(self, i: int) -> float:
        return (self.epsilon, self.delta)[i]

    def describe(self) -> str:
        return f"epsilon={self.epsilon:g}, delta={self.delta:g}"


@dataclass(frozen=True)
class Spent:
    """What one record (or subject) has spent: (epsilon, delta) after composition, and counts."""

    record_id: str
    epsilon: float
    delta: float
    releases: int
    free_releases: int


def record_key(record_id: Any) -> str:
    """The ledger's text form of a record id (``"i:5"``, ``"s:doc-1"``)."""
    return typed_id(record_id).decode("utf-8", errors="surrogateescape")


def display_key(key: str) -> str:
    """A ledger key as the user wrote the id: ``"i:5"`` -> ``5``, ``"s:doc"`` -> ``'doc'``."""
    kind, _, rest = key.partition(":")
    if kind == "i":
        return rest
    if kind == "s":
        return repr(rest)
    return key


def key_value(key: str) -> Any:
    """A ledger key as the id's own value: ``"i:5"`` -> ``5``, ``"s:doc"`` -> ``"doc"`` (what
    JSON output shows, typed as JSON types it; other keys as they are).

    Examples
    --------
    >>> key_value("i:5"), key_value("s:note-1")
    (5, 'note-1')
    """
    kind, _, rest = key.partition(":")
    if kind == "i":
        return int(rest)
    if kind == "s":
        return rest
    return key


def open_existing(path: str | Path) -> Ledger:
    """An existing ledger, read-only (``ledger show``, a search checking payloads against the
    releases it recorded): a missing file is an error, never a new empty ledger."""
    if not is_postgres_url(path) and not Path(path).exists():
        raise FileNotFoundError(f"ledger not found: {path}")
    return Ledger(path, readonly=True)


def administer_budget(
    path: str | Path,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    subject: bool = False,
    allow_raise: bool = False,
) -> tuple[Budget | None, str | None, str]:
    """The ledger administrator's budget change (``privembed ledger budget``): with neither
    ``epsilon`` nor ``delta``, read the stored per-record (or, ``subject``, per-subject) budget;
    else set it, lower it, or -- only with ``allow_raise`` -- raise it (:meth:`Ledger.set_budget`;
    a part not given keeps its stored value, or epsilon infinity and delta 1e-5 for a first
    budget). The ledger is created if missing. Returns (the budget before, the change's message
    or None when only read, the ledger's path). A release never raises a budget: it confirms or
    lowers one (:func:`privembed.release.open_ledger`)."""
    with Ledger(path) as led:
        old = led.subject_budget if subject else led.budget
        if epsilon is None and delta is None:
            return old, None, str(led.path)
        eps = epsilon if epsilon is not None else (old.epsilon if old else float("inf"))
        dlt = delta if delta is not None else (old.delta if old else 1e-5)
        msg = led.set_budget(
            epsilon=float(eps), delta=float(dlt), subject=subject, allow_raise=allow_raise
        )
        return old, msg, str(led.path)


@contextlib.contextmanager
def ledger_for_command(path: str | Path, **kwargs: Any) -> Iterator[Ledger]:
    """Open a ledger for one command. If the command created it and fails before committing
    anything, the empty ledger is removed again (with its WAL files), so such a failure leaves
    nothing behind. Its budget changes are deferred to its first commit (``defer_budgets``:
    :meth:`Ledger.propose_budget`), so a command refused before then leaves the budget too. A ledger that records a committed release is never removed: its output may
    already be out (a stream on stdout, batches upserted into a store), and the ledger is the
    only trace of that spend; the error then carries a note saying the ledger was kept. A
    PostgreSQL ledger (a URL) is shared state and is never removed."""
    kwargs.setdefault("defer_budgets", True)
    if is_postgres_url(path):
        with Ledger(path, **kwargs) as led:
            yield led
        return
    p = Path(path)
    created = not p.exists()
    try:
        with Ledger(p, **kwargs) as led:
            yield led
    except BaseException as exc:
        if created:
            kept = _committed_batches(p)
            if kept:
                exc.add_note(
                    f"the ledger {p} was kept: it records {kept} release(s) committed before "
                    "the failure"
                )
            else:
                for q in (p, p.with_name(p.name + "-wal"), p.with_name(p.name + "-shm")):
                    with contextlib.suppress(FileNotFoundError):
                        q.unlink()
        raise


def _committed_batches(path: Path) -> int:
    """Committed releases in the ledger file at ``path`` (0 if none, or it cannot be read:
    a ledger that cannot even be read after a failure was never written to)."""
    if not path.exists():
        return 0
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return int(db.execute("SELECT COUNT(*) FROM batches").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


#: per (subject, relation): the running totals of releases (fresh ones composed, free counted);
#: the ledger's shared SQL is written for both backends (PostgreSQL's backend turns ``?`` into
#: ``%s`` and drops SQLite's planner hints ``NOT INDEXED`` and ``CROSS JOIN``)
_TOTALS_OF_RELEASES = """
SELECT subject, relation,
       COALESCE(SUM(CASE WHEN free = 0 AND noise_multiplier IS NULL THEN epsilon END), 0.0),
       COALESCE(SUM(CASE WHEN free = 0 AND noise_multiplier IS NULL THEN delta END), 0.0),
       COALESCE(SUM(CASE WHEN free = 0 AND noise_multiplier IS NOT NULL
                  THEN 1.0 / (noise_multiplier * noise_multiplier) END), 0.0),
       SUM(CASE WHEN free = 0 THEN 1 ELSE 0 END), SUM(CASE WHEN free != 0 THEN 1 ELSE 0 END)
FROM releases NOT INDEXED WHERE seq > ? AND subject IS NOT NULL {where} GROUP BY subject, relation
"""

#: add to a subject's running totals (columns qualified: PostgreSQL needs it, SQLite allows it)
_TOTALS_UPSERT = (
    "ON CONFLICT(subject, relation) DO UPDATE SET "
    "epsilon = subject_totals.epsilon + excluded.epsilon, "
    "delta = subject_totals.delta + excluded.delta, mu2 = subject_totals.mu2 + excluded.mu2, "
    "fresh = subject_totals.fresh + excluded.fresh, free = subject_totals.free + excluded.free"
)


def _composition(rel: str, eps: float, dlt: float, mu2: float, fresh: int) -> Composition:
    return Composition(Neighbouring(rel), float(eps), float(dlt), float(mu2), int(fresh))


class _SQLiteBackend:
    """The SQLite backend: one file, ``BEGIN IMMEDIATE`` as the write lock (see the module
    docstring); SQL runs as the ledger writes it."""

    kind = "sqlite"
    integrity_error: type[Exception] = sqlite3.IntegrityError
    #: a file's connection never changes (PostgreSQL's may be replaced after a loss)
    generation = 1

    def __init__(self, path: Path, *, readonly: bool) -> None:
        self.path = path
        self.where = str(path)
        self.db: sqlite3.Connection = (
            self._connect_readonly()
            if readonly
            else sqlite3.connect(path, timeout=0.2, isolation_level=None)
        )

    def _connect_readonly(self) -> sqlite3.Connection:
        uri = self.path.resolve().as_uri()
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            # a WAL ledger in a read-only folder cannot create its -shm file: read it as an
            # immutable snapshot instead (nothing is written either way)
            db.close()
            return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.db.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.db.executemany(sql, rows)

    def begin(self) -> None:
        self.db.execute("BEGIN")

    def try_begin_write(self) -> bool:
        """One bounded attempt (the connection's 0.2 s busy wait) at the write lock."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            return False
        return True

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        self.db.execute("ROLLBACK")

    def table_exists(self, name: str) -> bool:
        row = self.db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None

    def create_staging(self, name: str) -> None:
        self.db.execute("PRAGMA temp_store = FILE")
        self.db.execute(
            f"CREATE TEMP TABLE {name} (record_id TEXT PRIMARY KEY, tag TEXT, "
            "output_digest TEXT, free INTEGER NOT NULL DEFAULT 0, subject TEXT) WITHOUT ROWID"
        )

    def drop_staging(self, name: str) -> None:
        self.db.execute(f"DROP TABLE IF EXISTS temp.{name}")

    def close(self) -> None:
        self.db.close()


def _check_budget(epsilon: float, delta: float, subject: bool) -> str:
    """Check a budget's values; return its scope (``"record"`` or ``"subject"``)."""
    if not (isinstance(epsilon, float) and math.isinf(epsilon) and epsilon > 0):
        check_real("budget epsilon", epsilon, gt=0)
    check_real("budget delta", delta, gt=0, lt=1)
    return "subject" if subject else "record"


def _is_ledger(db: sqlite3.Connection) -> bool | str:
    """True for a v2 ledger, ``"v1"`` for a first-version ledger, False otherwise."""
    app_id = db.execute("PRAGMA application_id").fetchone()[0]
    if app_id == APPLICATION_ID:
        return True
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "releases" in tables and "settings" in tables:
        cols = {r[1] for r in db.execute("PRAGMA table_info(releases)")}
        if cols == _V1_COLUMNS:
            return "v1"
    return False


class Ledger:
    """A per-record privacy ledger in an SQLite file or a PostgreSQL database.

    Parameters
    ----------
    path : str or Path
        The ledger file (created if missing, unless ``readonly``), or a ``postgresql://`` URL
        of a database that several processes and machines share (its tables are created in
        the connection's current schema if it has none; see :mod:`privembed.keys.ledger_pg`).
    readonly : bool
        Open for inspection only: the file is opened read-only and never modified (a
        PostgreSQL session is read-only: the server refuses writes).
    timeout : float
        Seconds to wait for another process's write lock before :class:`LedgerBusy`.
    on_wait : callable, optional
        Called once (with the path) when a write has to wait for another process's lock.
    budget_epsilon, budget_delta : float, optional
        Convenience for :meth:`confirm_budget` at open (set a first budget, confirm or lower).
    defer_budgets : bool
        :meth:`confirm_budget` proposes instead of writing (:meth:`propose_budget`): the
        change is written with the next release committed, in its transaction (a command's
        ledger: :func:`ledger_for_command`).

    Raises
    ------
    NotALedger
        The file (database) exists but is not a privembed ledger (it is left byte-identical).
    LedgerUnreachable
        The PostgreSQL database could not be reached.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        readonly: bool = False,
        timeout: float = 60.0,
        on_wait: Callable[[Any], None] | None = None,
        budget_epsilon: float | None = None,
        budget_delta: float | None = None,
        defer_budgets: bool = False,
    ) -> None:
        self.readonly = readonly
        self.defer_budgets = defer_budgets
        #: budgets proposed by a command's flags (:meth:`propose_budget`), per scope, and staged
        #: releases (:meth:`defer`): written in the transaction of the next release committed
        self._proposed: dict[str, Budget] = {}
        self._deferred: list[StagedRelease] = []
        self.timeout = check_real("timeout", timeout, ge=0)
        self.on_wait = on_wait
        self._sql: Any
        self.path: Path | str
        if is_postgres_url(path):
            self._sql = PostgresBackend(
                str(path),
                readonly=readonly,
                timeout=self.timeout,
                unreachable=LedgerUnreachable,
                data_error=DataError,
            )
            self.path = self._sql.where  # the URL without its password
            self._open_postgres()
        else:
            self.path = Path(path)
            self._open_sqlite()
        self._has_totals = self._sql.table_exists("subject_totals")
        if budget_epsilon is not None or budget_delta is not None:
            self.confirm_budget(budget_epsilon, budget_delta)

    @property
    def _db(self) -> Any:
        """The backend's DB-API connection (``sqlite3.Connection`` or ``psycopg.Connection``)."""
        return self._sql.db

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return str(self._sql.kind)

    # ---- opening ---------------------------------------------------------------------------
    def _open_sqlite(self) -> None:
        assert isinstance(self.path, Path)
        path, readonly = self.path, self.readonly
        if path.is_dir():
            raise IsADirectoryError(f"ledger path is a directory: {path}")
        exists = path.exists() and path.stat().st_size > 0
        if readonly and not path.exists():
            raise FileNotFoundError(f"ledger not found: {path}")
        sql: _SQLiteBackend | None = None
        try:
            sql = _SQLiteBackend(path, readonly=readonly)
            kind = _is_ledger(sql.db) if exists or readonly else True
        except sqlite3.DatabaseError as exc:
            if sql is not None:
                with contextlib.suppress(Exception):
                    sql.close()
            raise NotALedger(
                f"{path} is not a privembed ledger ({str(exc).splitlines()[0]}); it was "
                "left untouched."
            ) from None
        self._sql = sql
        if not kind:
            sql.close()
            raise NotALedger(
                f"{path} is not a privembed ledger (an SQLite file without its tables); "
                "it was left untouched."
            )
        self._v1 = kind == "v1"
        if readonly and self._v1:
            self._v1_views()
        if not readonly:
            if not exists:
                self._create()
            elif self._v1:
                self._migrate_v1()
            elif self._db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                self._migrate_v2()

    def _open_postgres(self) -> None:
        """Refuse a database that is not a ledger; create the tables in one that has none."""
        sql = self._sql
        try:
            kind = sql.identify()
            if kind == "empty" and not self.readonly:
                with self._write():  # replicas starting together create the tables once
                    kind = sql.identify()
                    if kind == "empty":
                        sql.create_schema()
                        kind = "ledger"
        except BaseException:
            sql.close()
            raise
        if kind != "ledger":
            sql.close()
            what = (
                "holds no privembed ledger; nothing was written"
                if kind == "empty"
                else "is not a privembed ledger (it has tables named like the ledger's without "
                "its marker); it was left untouched"
            )
            raise NotALedger(f"the database {self.path} {what}.")
        version = int(sql.schema_version())
        if version != SCHEMA_VERSION:
            sql.close()
            raise NotALedger(
                f"the database {self.path} holds a privembed ledger of schema version "
                f"{version}; this privembed reads version {SCHEMA_VERSION}."
            )
        self._v1 = False

    def _v1_views(self) -> None:
        """Read a first-version ledger through views in the current schema (nothing written:
        TEMP objects live in the connection's own temporary database)."""
        self._db.execute(
            "CREATE TEMP VIEW releases AS SELECT seq, record_id, NULL AS subject, config_fp, "
            "key_id, NULL AS tag, 'record' AS relation, epsilon, delta, gauss_ratio AS "
            "noise_multiplier, free, output_digest, batch, created FROM main.releases"
        )
        self._db.execute(
            "CREATE TEMP VIEW batches AS SELECT batch, MIN(created) AS created, MIN(config_fp) "
            "AS config_fp, '{}' AS mechanism, MIN(guarantee) AS guarantee, MIN(key_id) AS "
            "key_id, NULL AS subject, NULL AS destination, COUNT(*) AS records, SUM(1 - free) AS "
            "fresh, MIN(created) AS published FROM main.releases GROUP BY batch"
        )
        self._db.execute(
            "CREATE TEMP VIEW budget_history AS SELECT 0 AS seq, '' AS scope, 0.0 AS epsilon, "
            "0.0 AS delta, NULL AS previous, '' AS action, 0.0 AS changed WHERE 0"
        )

    def _create(self) -> None:
        with self._write():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    self._db.execute(
                        stmt.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS").replace(
                            "CREATE INDEX", "CREATE INDEX IF NOT EXISTS"
                        )
                    )
            self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._db.execute("PRAGMA journal_mode=WAL")

    def _migrate_v1(self) -> None:
        """Rewrite a first-version ledger in the current schema (one transaction)."""
        with self._write():
            self._db.execute("ALTER TABLE releases RENAME TO releases_v1")
            self._db.execute("DROP INDEX IF EXISTS releases_record")
            for stmt in _SCHEMA.split(";"):
                if stmt.strip() and "settings" not in stmt:
                    self._db.execute(stmt)
            self._db.execute(
                "INSERT INTO releases(seq, record_id, subject, config_fp, key_id, tag, relation, "
                "epsilon, delta, noise_multiplier, free, output_digest, batch, created) "
                "SELECT seq, record_id, NULL, config_fp, key_id, NULL, 'record', epsilon, delta, "
                "gauss_ratio, free, output_digest, batch, created FROM releases_v1"
            )
            self._db.execute(
                "INSERT INTO batches(batch, created, config_fp, mechanism, guarantee, key_id, "
                "subject, destination, records, fresh, published) "
                "SELECT batch, MIN(created), MIN(config_fp), '{}', MIN(guarantee), MIN(key_id), "
                "NULL, NULL, COUNT(*), SUM(1 - free), MIN(created) FROM releases_v1 GROUP BY batch"
            )
            self._db.execute("DROP TABLE releases_v1")
            self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._v1 = False

    def _migrate_v2(self) -> None:
        """Add what version 3 keeps (subject totals, aliases) to a version-2 ledger; the totals
        are built from every earlier release (one pass)."""
        with self._write():
            for stmt in _SCHEMA.split(";"):
                if "subject_totals" in stmt or "aliases" in stmt:
                    self._db.execute(
                        stmt.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS").replace(
                            "CREATE INDEX", "CREATE INDEX IF NOT EXISTS"
                        )
                    )
            self._fold_totals()
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _table_exists(self, name: str) -> bool:
        return bool(self._sql.table_exists(name))

    def _watermark(self) -> int:
        """The last release folded into the subject totals."""
        row = self._sql.execute("SELECT value FROM settings WHERE name = 'totals_seq'").fetchone()
        return int(row[0]) if row else 0

    def _fold_totals(self) -> None:
        """Bring the subject totals up to the last release (inside a write transaction):
        rows past the watermark were written by a version that kept no totals."""
        mark = self._watermark()
        last = self._sql.execute("SELECT COALESCE(MAX(seq), 0) FROM releases").fetchone()[0]
        if last > mark:
            self._sql.execute(
                "INSERT INTO subject_totals(subject, relation, epsilon, delta, mu2, fresh, free) "
                + _TOTALS_OF_RELEASES.format(where="")
                + _TOTALS_UPSERT,
                (mark,),
            )
        self._set_watermark(last)

    def _set_watermark(self, seq: int) -> None:
        self._sql.execute(
            "INSERT INTO settings(name, value) VALUES ('totals_seq', ?) "
            "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            (str(int(seq)),),
        )

    def _subject_totals(self, subject: str) -> tuple[Composition, int, int]:
        """(composition of the fresh releases, releases, free releases) of ``subject``: the
        running totals plus any rows past the watermark (all rows for a version-2 file)."""
        rows: list[tuple[Any, ...]] = []
        if self._has_totals:
            rows += self._sql.execute(
                "SELECT subject, relation, epsilon, delta, mu2, fresh, free FROM subject_totals "
                "WHERE subject = ?",
                (subject,),
            ).fetchall()
        mark = self._watermark() if self._has_totals else 0
        rows += self._sql.execute(
            _TOTALS_OF_RELEASES.format(where="AND subject = ?"), (mark, subject)
        ).fetchall()
        comp, total, free = Composition(), 0, 0
        for _, rel, eps, dlt, mu2, fresh, fr in rows:
            total += int(fresh) + int(fr)
            free += int(fr)
            if fresh:
                comp = comp.merge(_composition(rel, eps, dlt, mu2, fresh))
        return comp, total, free

    def close(self) -> None:
        self._sql.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transactions ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """The backend's write lock (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's advisory lock)
        with a bounded wait for another process's lock."""
        if self.readonly:
            raise PermissionError(f"ledger {self.path} is open read-only.")
        deadline = time.monotonic() + self.timeout
        told = False
        while not self._sql.try_begin_write():
            if time.monotonic() >= deadline:
                raise LedgerBusy(
                    f"ledger {self.path} is locked by another process (waited "
                    f"{self.timeout:g} s); try again later."
                )
            if not told and self.on_wait is not None:
                self.on_wait(self.path)
                told = True
            checkpoint("ledger.wait")  # a signal ends the wait here
        try:
            yield
        except BaseException:
            with contextlib.suppress(LedgerUnreachable):  # the transaction died with it
                self._sql.rollback()
            raise
        self._sql.commit()

    # ---- budgets ---------------------------------------------------------------------------
    def _settings(self) -> dict[str, str]:
        return dict(self._sql.execute("SELECT name, value FROM settings").fetchall())

    def _budget(self, scope: str) -> Budget | None:
        """The stored budget of ``scope`` (``"record"`` or ``"subject"``)."""
        rows = self._settings()
        prefix = "budget" if scope == "record" else "subject_budget"
        if f"{prefix}_delta" not in rows:
            return None
        return Budget(float(rows.get(f"{prefix}_epsilon", "inf")), float(rows[f"{prefix}_delta"]))

    @property
    def budget(self) -> Budget | None:
        """Per-record (epsilon, delta), or None if no budget is set: the stored one, or the
        one a command proposed (:meth:`propose_budget`), which the next commit writes."""
        return self._proposed.get("record") or self._budget("record")

    @property
    def subject_budget(self) -> Budget | None:
        """Per-subject (epsilon, delta) over all of a subject's releases, or None (stored, or
        proposed as for :attr:`budget`)."""
        return self._proposed.get("subject") or self._budget("subject")

    @property
    def report_delta(self) -> float:
        """The delta at which compositions are reported (the budget's, else 1e-5)."""
        b = self.budget
        return b.delta if b else DEFAULT_REPORT_DELTA

    def set_budget(
        self,
        *,
        epsilon: float,
        delta: float,
        subject: bool = False,
        allow_raise: bool = False,
    ) -> str:
        """Set, lower or (with ``allow_raise``) raise the per-record or per-subject budget.

        ``epsilon`` may be ``inf`` (only delta is then bounded). Every change is recorded with
        its time in the budget history. Returns a one-line description of what changed.

        Raises
        ------
        BudgetRaise
            The new budget is larger than the stored one in epsilon or delta and
            ``allow_raise`` is False.
        """
        scope = _check_budget(epsilon, delta, subject)
        with self._write():
            return self._change_budget(scope, epsilon, delta, allow_raise=allow_raise)

    def _change_budget(self, scope: str, epsilon: float, delta: float, *, allow_raise: bool) -> str:
        """Inside a write transaction: :meth:`set_budget`'s change (checked values)."""
        prefix = "budget" if scope == "record" else "subject_budget"
        old = self._budget(scope)
        if old is not None and (epsilon, delta) == (old.epsilon, old.delta):
            return f"{scope} budget unchanged ({old.describe()})"
        raising = self._refuse_raise(scope, old, epsilon, delta, allow_raise=allow_raise)
        action = "set" if old is None else ("raise" if raising else "lower")
        for name, value in ((f"{prefix}_epsilon", epsilon), (f"{prefix}_delta", delta)):
            self._sql.execute(
                "INSERT INTO settings(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                (name, repr(float(value))),
            )
        self._sql.execute(
            "INSERT INTO budget_history(scope, epsilon, delta, previous, action, changed) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                scope,
                float(epsilon),
                float(delta),
                None if old is None else old.describe(),
                action,
                time.time(),
            ),
        )
        was = "" if old is None else f" (was {old.describe()})"
        return f"{scope} budget {action} to epsilon={epsilon:g}, delta={delta:g}{was}"

    def _refuse_raise(
        self, scope: str, old: Budget | None, epsilon: float, delta: float, *, allow_raise: bool
    ) -> bool:
        """Whether (epsilon, delta) raises the stored budget ``old``; :class:`BudgetRaise`
        if it does and ``allow_raise`` is False."""
        raising = old is not None and (epsilon > old.epsilon or delta > old.delta)
        if raising and not allow_raise:
            assert old is not None
            raise BudgetRaise(
                f"the ledger's {scope} budget is {old.describe()}; epsilon={epsilon:g}, "
                f"delta={delta:g} would raise it. Budgets are ledger state: raise it "
                f"explicitly with `privembed ledger budget {self.path} --epsilon "
                f"{epsilon:g} --delta {delta:g}{' --subject' if scope == 'subject' else ''} "
                "--raise`."
            )
        return raising

    def confirm_budget(
        self, epsilon: float | None, delta: float | None, *, subject: bool = False
    ) -> str | None:
        """What a command's budget flags may do: set a first budget, confirm or lower one
        (the per-record budget, or with ``subject`` the per-subject one).

        An omitted flag keeps the stored value (a first budget without ``delta`` gets 1e-5,
        and says so). Flags never raise a stored budget (:class:`BudgetRaise`). A ledger opened
        with ``defer_budgets`` (a command's) proposes the change (:meth:`propose_budget`): it
        is written with the next release committed.
        """
        if epsilon is None and delta is None:
            return None
        if self.defer_budgets:
            return self.propose_budget(epsilon, delta, subject=subject)
        old = self.subject_budget if subject else self.budget
        eps = epsilon if epsilon is not None else (old.epsilon if old else math.inf)
        dlt = delta if delta is not None else (old.delta if old else DEFAULT_REPORT_DELTA)
        msg = self.set_budget(epsilon=float(eps), delta=float(dlt), subject=subject)
        if old is None and delta is None:
            msg += " (delta not given: 1e-5)"
        return msg

    def propose_budget(
        self, epsilon: float | None, delta: float | None, *, subject: bool = False
    ) -> str | None:
        """What a command's budget flags do: like :meth:`confirm_budget` (set a first budget,
        confirm or lower one; never raise it: :class:`BudgetRaise` at once), but *nothing is
        written now*. The proposed budget governs this ledger object's checks at once, and the
        next release it commits (:meth:`StagedRelease.commit`) writes it in the same
        transaction -- so a command that is refused, or fails before it commits anything,
        leaves the stored budget as it was (a lower budget only takes effect with a release it
        allowed). In that transaction the change is checked again against the budget stored
        then: another process may have lowered it meanwhile, and a proposal above that is
        refused (:class:`BudgetRaise`) with the release.

        Returns a one-line description (None when neither flag is given).
        """
        if epsilon is None and delta is None:
            return None
        scope = "subject" if subject else "record"
        old = self._budget(scope)
        eps = float(epsilon if epsilon is not None else (old.epsilon if old else math.inf))
        dlt = float(delta if delta is not None else (old.delta if old else DEFAULT_REPORT_DELTA))
        _check_budget(eps, dlt, subject)
        self._refuse_raise(scope, old, eps, dlt, allow_raise=False)
        self._proposed.pop(scope, None)
        if old is not None and (eps, dlt) == (old.epsilon, old.delta):
            return f"{scope} budget unchanged ({old.describe()})"
        self._proposed[scope] = Budget(eps, dlt)
        action = "set" if old is None else "lower"
        note = " (delta not given: 1e-5)" if old is None and delta is None else ""
        return (
            f"{scope} budget to {action} to epsilon={eps:g}, delta={dlt:g} with the release{note}"
        )

    def defer(self, staged: StagedRelease) -> None:
        """Commit ``staged`` -- a release computed for another (a DP-PCA basis, charged to
        every record of its corpus) -- in the transaction of the next release this ledger
        commits, and mark it published there: the two are one unit, and a command that fails
        before that commit records neither. Forgotten (discarded) if nothing commits."""
        if staged.ledger is not self:
            raise ValueError("a staged release is deferred on the ledger it was staged on.")
        if staged not in self._deferred:
            self._deferred.append(staged)

    def _apply_pending(self, committing: StagedRelease) -> list[StagedRelease]:
        """Inside a commit's write transaction: write the proposed budgets, then commit the
        deferred releases (published). Returns the deferred releases committed."""
        for scope, b in self._proposed.items():
            self._change_budget(scope, b.epsilon, b.delta, allow_raise=False)
        done = [d for d in self._deferred if d is not committing]
        for d in done:
            d._commit_locked(published=True)
        return done

    def _pending_done(self, done: list[StagedRelease]) -> None:
        """After a commit: the proposals are stored and the deferred releases recorded."""
        self._proposed.clear()
        self._deferred = [d for d in self._deferred if d not in done]

    def budget_history(self) -> list[dict[str, Any]]:
        """Every budget change, oldest first."""
        cur = self._sql.execute("SELECT * FROM budget_history ORDER BY seq")
        names = [c[0] for c in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    # ---- releases --------------------------------------------------------------------------
    def stage(
        self,
        mechanism: Any,
        *,
        key_id: str | None = None,
        subject: str | None = None,
        destination: str | None = None,
    ) -> StagedRelease:
        """Begin a release of ``mechanism`` (see the module docstring).

        Raises
        ------
        privembed.core.accounting.UnsupportedGuarantee
            The mechanism's guarantee cannot be accounted (refused before any work).
        """
        return StagedRelease(
            self, mechanism, key_id=key_id, subject=subject, destination=destination
        )

    # ---- queries ---------------------------------------------------------------------------
    def spent(self, ids: Sequence[Any] | None = None) -> list[Spent]:
        """Composed spend per record (all records if ``ids`` is None), at :attr:`report_delta`.

        ``ids`` are record ids (typed: ``5`` and ``"5"`` differ) or ledger keys (``"i:5"``).
        Each record's history is aggregated in SQL; each distinct history is composed once.
        """
        columns = (
            "record_id, MIN(seq), COUNT(*), SUM(CASE WHEN free != 0 THEN 1 ELSE 0 END), "
            "MIN(CASE WHEN free = 0 THEN relation END), "
            "COUNT(DISTINCT CASE WHEN free = 0 THEN relation END), "
            "COALESCE(SUM(CASE WHEN free = 0 AND noise_multiplier IS NULL THEN epsilon END), 0.0), "
            "COALESCE(SUM(CASE WHEN free = 0 AND noise_multiplier IS NULL THEN delta END), 0.0), "
            "COALESCE(SUM(CASE WHEN free = 0 AND noise_multiplier IS NOT NULL "
            "THEN 1.0 / (noise_multiplier * noise_multiplier) END), 0.0), "
            "SUM(CASE WHEN free = 0 THEN 1 ELSE 0 END)"
        )
        if ids is None:
            rows = self._sql.execute(
                f"SELECT {columns} FROM releases GROUP BY record_id ORDER BY MIN(seq)"
            ).fetchall()
        else:
            keys = list(dict.fromkeys(i if _is_key(i) else record_key(i) for i in ids))
            rows = list(
                _select_in(
                    self._sql,
                    f"SELECT {columns} FROM releases WHERE record_id IN ({{marks}}) "
                    "GROUP BY record_id",
                    keys,
                )
            )
            rows.sort(key=lambda r: r[1])
        delta = self.report_delta
        cache: dict[tuple[Any, ...], tuple[float, float]] = {}
        out = []
        for rid, _, n, free, rel, nrel, eps, dlt, mu2, fresh in rows:
            sig = (rel, nrel, eps, dlt, mu2)
            if sig not in cache:
                if nrel > 1:
                    raise UnsupportedGuarantee(
                        f"record {display_key(rid)} has releases under different neighbouring "
                        "relations; they do not compose into one guarantee."
                    )
                comp = _composition(rel, eps, dlt, mu2, fresh) if fresh else Composition()
                cache[sig] = comp.at(delta)
            e, d = cache[sig]
            out.append(Spent(rid, e, d, int(n), int(free)))
        return out

    def current_releases(self, keys: Sequence[str]) -> dict[str, frozenset[bytes]]:
        """The releases a reader may still meet for each ledger key: the 16-byte output digests
        (:func:`privembed.keys.payload.release_digest`) of its latest *published* release and of any
        committed after it (their output may not have been published yet). A key the ledger
        never recorded is absent. Used to refuse a rolled-back payload (issue 24, finding 10):
        an older release's payload opens under the key, but its digest is not current.
        """
        found: dict[str, list[tuple[int, str | None, bool]]] = {}
        for rid, seq, digest, published in _select_in(
            self._sql,
            "SELECT r.record_id, r.seq, r.output_digest, b.published FROM releases r "
            "JOIN batches b ON b.batch = r.batch WHERE r.record_id IN ({marks})",
            list(dict.fromkeys(keys)),
        ):
            found.setdefault(str(rid), []).append((int(seq), digest, published is not None))
        out: dict[str, frozenset[bytes]] = {}
        for rid, hist in found.items():
            hist.sort()
            last_published = max((i for i, h in enumerate(hist) if h[2]), default=0)
            out[rid] = frozenset(
                bytes.fromhex(d) for _, d, _ in hist[last_published:] if d is not None
            )
        return out

    def spent_subject(self, subject: str) -> Spent:
        """Composed spend of a subject over all its records' fresh releases (from the running
        totals: O(1) in the subject's history)."""
        comp, total, free = self._subject_totals(subject)
        eps_s, dlt_s = comp.at(self._subject_delta())
        return Spent(subject, eps_s, dlt_s, total, free)

    def subjects(self) -> list[str]:
        """Every subject that has releases, in name order."""
        if self._has_totals:
            rows = self._sql.execute(
                "SELECT DISTINCT subject FROM subject_totals UNION SELECT DISTINCT subject FROM "
                "releases NOT INDEXED WHERE seq > ? AND subject IS NOT NULL ORDER BY 1",
                (self._watermark(),),
            )
        else:
            rows = self._sql.execute(
                "SELECT DISTINCT subject FROM releases WHERE subject IS NOT NULL ORDER BY 1"
            )
        return [r[0] for r in rows]

    def _subject_delta(self) -> float:
        b = self.subject_budget
        return b.delta if b else self.report_delta

    # ---- aliases -----------------------------------------------------------------------------
    def lookup_aliases(self, tags: Sequence[str]) -> dict[str, str]:
        """The recorded owner of each known tag (a read: no lock, nothing written)."""
        query = "SELECT tag, owner FROM aliases WHERE tag IN ({marks})"
        return dict(_select_in(self._sql, query, list(dict.fromkeys(tags))))

    def _record_aliases(
        self, tags: list[str], owners: list[str], capacity: int, *, strict: bool
    ) -> dict[str, str]:
        """Inside a write transaction: record each tag's owner (the one already recorded
        wins; ``strict``: a different recorded owner is an :class:`AliasConflict`), mark them
        used, forget the least recently used beyond ``capacity``."""
        db = self._sql
        known = self.lookup_aliases(tags)
        for tag, owner in zip(tags, owners, strict=True):
            have = known.setdefault(tag, owner)
            if strict and have != owner:
                raise AliasConflict(
                    "another process claimed a clean-vector alias of this release for another "
                    "record after it was looked up; look the aliases up again and retry."
                )
        unique = list(dict.fromkeys(tags))
        used = db.execute("SELECT COALESCE(MAX(used), 0) FROM aliases").fetchone()[0]
        db.executemany(
            "INSERT INTO aliases(tag, owner, used) VALUES (?, ?, ?) "
            "ON CONFLICT(tag) DO UPDATE SET used = excluded.used",
            ((t, known[t], used + 1 + i) for i, t in enumerate(unique)),
        )
        db.execute("DELETE FROM aliases WHERE used <= ?", (used + len(unique) - capacity,))
        return known

    def claim_aliases(
        self, tags: Sequence[str], owners: Sequence[str], *, capacity: int = ALIAS_CAPACITY
    ) -> list[str]:
        """The owner of each tag: the owner already recorded for it, else the one given here
        (which then claims the tag). One write transaction; the table keeps at most
        ``capacity`` tags, forgetting the least recently used.

        Tags are opaque keyed digests (the server's HMAC of a clean vector); the ledger never
        sees what they were computed from. A tag repeated within one call is claimed by its
        first owner.

        Raises
        ------
        PermissionError
            The ledger is open read-only.
        LedgerBusy
            Another process held the lock longer than the ledger's timeout.
        """
        tags, owners = list(tags), list(owners)
        if len(tags) != len(owners):
            raise ValueError(
                f"tags and owners must have the same length, got {len(tags)} and {len(owners)}."
            )
        cap = int(capacity)
        if cap < 1:
            raise ValueError(f"capacity must be >= 1, got capacity={capacity!r}.")
        with self._write():
            known = self._record_aliases(tags, owners, cap, strict=False)
        return [known[t] for t in tags]

    def export(self) -> list[dict[str, Any]]:
        """Every release row as a dict (for JSON/CSV export)."""
        cur = self._sql.execute("SELECT * FROM releases ORDER BY seq")
        names = [c[0] for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def unpublished(self) -> list[dict[str, Any]]:
        """Releases that were charged but whose output was never published (a crash between
        the ledger commit and the rename): conservative, listed so they can be explained."""
        cur = self._sql.execute(
            "SELECT batch, created, destination, records, fresh FROM batches "
            "WHERE published IS NULL ORDER BY created"
        )
        names = [c[0] for c in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def summary(self) -> dict[str, Any]:
        """Budgets and counts per configuration, with each configuration's mechanism."""
        rows = self._sql.execute(
            "SELECT b.config_fp, b.key_id, MAX(b.mechanism), MAX(b.guarantee), SUM(b.records), "
            "SUM(b.records - b.fresh), MIN(b.created), MAX(b.created), COUNT(*) FROM batches b "
            "GROUP BY b.config_fp, b.key_id ORDER BY MIN(b.created)"
        ).fetchall()
        records = self._sql.execute("SELECT COUNT(DISTINCT record_id) FROM releases").fetchone()[0]
        out = []
        for fp, kid, mech, guar, n, free, first, last, nb in rows:
            out.append(
                {
                    "config_fp": fp[:16],
                    "mechanism": _json_or_none(mech),
                    "guarantee": _json_or_none(guar),
                    "key_id": kid,
                    "releases": n,
                    "free": free,
                    "batches": nb,
                    "first": first,
                    "last": last,
                }
            )
        return {
            "path": str(self.path),
            "budget": None if self.budget is None else list(self.budget),
            "subject_budget": None if self.subject_budget is None else list(self.subject_budget),
            "records": records,
            "configurations": out,
            "unpublished": self.unpublished(),
            "budget_history": self.budget_history(),
        }


def _is_key(x: Any) -> bool:
    return isinstance(x, str) and x[:2] in ("i:", "s:", "b:")


def _json_or_none(s: str | None) -> Any:
    if not s:
        return None
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return s


class StagedRelease:
    """One release in progress: records are staged, then committed or discarded.

    Staged rows live in a temporary table of the ledger's connection (on disk), so a release of
    millions of records stays in bounded memory; its primary key refuses duplicate ids across
    all the batches of the release.
    """

    def __init__(
        self,
        ledger: Ledger,
        mechanism: Any,
        *,
        key_id: str | None,
        subject: str | None,
        destination: str | None,
    ) -> None:
        if ledger.readonly:
            raise PermissionError(f"ledger {ledger.path} is open read-only.")
        g = mechanism.guarantee
        self.cost = cost_of(g)  # refuses unaccountable guarantees before any work
        self.ledger = ledger
        self.mechanism = mechanism
        self.key_id = key_id
        self.subject = subject
        self.destination = destination
        self.batch = uuid.uuid4().hex
        self.fingerprint = mechanism.fingerprint
        self._mech_json = json.dumps(mechanism.config, sort_keys=True)
        self._guar_json = json.dumps(g.to_dict(), sort_keys=True)
        self._table = f"staged_{self.batch}"
        self.count = 0
        self.fresh = 0
        self.committed = False
        self.per_record_subjects = False  # set by add(subjects=...)
        self._claims: tuple[list[str], list[str], int] | None = None
        self._keep_claims = True
        self._tagged = False  # whether any staged record has a tag (set by add)
        #: the staging table lives on this connection (PostgreSQL's may be replaced after a loss)
        self._generation = ledger._sql.generation
        ledger._sql.create_staging(self._table)
        self._check_budget_possible()

    def _same_connection(self) -> None:
        if self.ledger._sql.generation != self._generation:
            raise LedgerUnreachable(
                f"the connection to the ledger {self.ledger.path} was lost while this release "
                "was staged; nothing of it was recorded."
            )

    def _check_budget_possible(self) -> None:
        """Fail fast: refuse when even one release alone exceeds a budget."""
        subject_budget = self.ledger.subject_budget if self.subject is not None else None
        for scope, budget in (("record", self.ledger.budget), ("subject", subject_budget)):
            if budget is None:
                continue
            eps, dlt = Composition().add(self.cost).at(budget.delta)
            if eps > budget.epsilon * (1 + 1e-12) or dlt > budget.delta * (1 + 1e-12):
                self.discard()
                raise BudgetExceeded(
                    f"release refused: one release of {self.mechanism!r} costs epsilon="
                    f"{eps:.4g}, delta={dlt:.3g}, more than the per-{scope} budget "
                    f"({budget.describe()})."
                )

    def add(
        self,
        keys: Sequence[str],
        *,
        tags: Sequence[str | None] | None = None,
        output_digests: Sequence[str | None] | None = None,
        subjects: Sequence[str | None] | None = None,
    ) -> None:
        """Stage records (ledger keys from :func:`record_key`), with tag commitments (keyed),
        output digests and, per record, the subject it is charged to (default: the release's
        subject; ``None`` in ``subjects``: no subject for that record).

        Raises
        ------
        DuplicateIds
            A record id already staged in this release (in this batch or an earlier one).
        """
        n = len(keys)
        tg = list(tags) if tags is not None else [None] * n
        self._tagged = self._tagged or tags is not None
        od = list(output_digests) if output_digests is not None else [None] * n
        if subjects is not None:
            self.per_record_subjects = True
        sj = list(subjects) if subjects is not None else [self.subject] * n
        if len(tg) != n or len(od) != n or len(sj) != n:
            raise ValueError("keys, tags, output_digests and subjects must have the same length.")
        self._same_connection()
        db = self.ledger._sql
        try:
            db.begin()
            db.executemany(
                f"INSERT INTO {self._table}(record_id, tag, output_digest, subject) "
                "VALUES (?, ?, ?, ?)",
                zip(keys, tg, od, sj, strict=True),
            )
            db.commit()
        except db.integrity_error:
            db.rollback()
            raise DuplicateIds(self._describe_duplicates(list(keys))) from None
        except BaseException:
            with contextlib.suppress(sqlite3.Error, LedgerBusy):
                db.rollback()
            raise
        self.count += n

    def _describe_duplicates(self, keys: list[str]) -> str:
        seen: set[str] = set()
        dups: list[str] = []
        for k in keys:
            if k in seen and k not in dups:
                dups.append(k)
            seen.add(k)
        query = f"SELECT record_id FROM {self._table} WHERE record_id IN ({{marks}})"
        for (k,) in _select_in(self.ledger._sql, query, list(dict.fromkeys(keys))):
            if k not in dups:
                dups.append(k)
        shown = ", ".join(display_key(k) for k in dups[:5])
        shown += f" and {len(dups) - 5} more" if len(dups) > 5 else ""
        return (
            f"record ids must be unique within one release; repeated: {shown} (equal ids would "
            "release one record twice)."
        )

    def claim_aliases(
        self,
        tags: Sequence[str],
        owners: Sequence[str],
        *,
        capacity: int = ALIAS_CAPACITY,
        keep_if_refused: bool = True,
    ) -> None:
        """Record these alias claims (:meth:`Ledger.claim_aliases`) in this release's commit
        transaction: the owners were looked up before (:meth:`Ledger.lookup_aliases`) and the
        commit refuses (:class:`AliasConflict`) if another process claimed a tag meanwhile.
        Claims given in several calls add up (a release of several batches).

        ``keep_if_refused``: when the budget refuses the release, the claims are still
        recorded (the rest of the transaction is rolled back), so a variant tried after a refused one is
        charged to the same record -- the server's rule. A command that must leave the ledger
        as it was when refused (``privembed protect``: :mod:`privembed.release.identity`)
        passes False.
        """
        tags, owners = list(tags), list(owners)
        if len(tags) != len(owners):
            raise ValueError(
                f"tags and owners must have the same length, got {len(tags)} and {len(owners)}."
            )
        if self._claims is not None:
            tags, owners = self._claims[0] + tags, self._claims[1] + owners
        self._claims = (tags, owners, int(capacity))
        self._keep_claims = self._keep_claims and keep_if_refused

    def commit(self, *, published: bool = False) -> StagedRelease:
        """Lock the ledger, decide free records, check budgets, record the release.

        ``published=True`` records the output as published in the same transaction, for a
        caller that hands it over at once (the server: it cannot know whether the client
        received it, and says so); otherwise :meth:`mark_published` follows the publication.

        The commit's transaction also writes what the ledger holds pending: the budgets a
        command's flags proposed (:meth:`Ledger.propose_budget`) and releases deferred to
        this one (:meth:`Ledger.defer`, e.g. a DP-PCA basis charge), each checked as it is
        recorded. A refusal rolls the transaction back: the ledger is left as it was (only alias
        claims made with ``keep_if_refused`` are then kept: the rest is rolled back to a
        savepoint taken after them).

        Raises
        ------
        BudgetExceeded
            Some record (or the subject) would pass its budget; nothing is recorded.
        BudgetRaise
            A proposed budget would raise the one stored now (lowered meanwhile by another
            process); nothing is recorded.
        AliasConflict
            Claimed aliases (:meth:`claim_aliases`) were claimed meanwhile by another process.
        LedgerBusy
            Another process held the lock longer than the ledger's timeout.
        """
        if self.committed:
            raise RuntimeError("this release was already committed.")
        led = self.ledger
        self._same_connection()
        for d in led._deferred:
            d._same_connection()
        keep = self._claims is not None and self._keep_claims
        refused: BudgetExceeded | None = None
        done: list[StagedRelease] = []
        with led._write():
            if self._claims is not None:
                led._record_aliases(*self._claims[:2], self._claims[2], strict=True)
            if keep:  # a refusal keeps the claims alone: variants tried later meet this record
                led._sql.execute("SAVEPOINT release")
            try:
                done = led._apply_pending(self)
                self._commit_locked(published)
            except BudgetExceeded as exc:
                if not keep:
                    raise  # the whole transaction is rolled back: the ledger is as it was
                led._sql.execute("ROLLBACK TO SAVEPOINT release")
                refused = exc
        if refused is not None:
            raise refused
        led._pending_done([*done, self])
        for d in (*done, self):
            d.committed = True
            d._drop()
        return self

    def _commit_locked(self, published: bool) -> None:
        """Inside the commit's write transaction: free records, budgets, rows
        (:class:`BudgetExceeded` leaves the transaction to be rolled back)."""
        led = self.ledger
        db = led._sql
        t = self._table
        if self._tagged:  # keyed noise or a basis: a record re-released under its tag is free
            db.execute(
                f"UPDATE {t} SET free = CAST(EXISTS(SELECT 1 FROM releases r WHERE "
                f"r.record_id = {t}.record_id AND r.tag = {t}.tag) AS INTEGER) "
                "WHERE tag IS NOT NULL"
            )
        self.fresh = db.execute(f"SELECT COUNT(*) FROM {t} WHERE free = 0").fetchone()[0]
        self._check_records()
        led._fold_totals()
        self._check_subject()
        self._record(published)

    def _record(self, published: bool) -> None:
        """Write the release's rows (inside the commit's transaction)."""
        led = self.ledger
        db = led._sql
        t = self._table
        now = time.time()
        c = self.cost
        db.execute(
            "INSERT INTO releases(record_id, subject, config_fp, key_id, tag, relation, "
            "epsilon, delta, noise_multiplier, free, output_digest, batch, created) "
            f"SELECT record_id, subject, ?, ?, tag, ?, ?, ?, ?, free, output_digest, ?, ? "
            f"FROM {t}",
            (
                self.fingerprint,
                self.key_id,
                c.relation.value,
                c.epsilon,
                c.delta,
                c.noise_multiplier,
                self.batch,
                now,
            ),
        )
        db.execute(
            "INSERT INTO batches(batch, created, config_fp, mechanism, guarantee, key_id, "
            "subject, destination, records, fresh, published) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.batch,
                now,
                self.fingerprint,
                self._mech_json,
                self._guar_json,
                self.key_id,
                self.subject,
                self.destination,
                self.count,
                self.fresh,
                now if published else None,
            ),
        )
        g = c.noise_multiplier
        for subject, n, n_free in self._subject_counts():
            db.execute(
                "INSERT INTO subject_totals(subject, relation, epsilon, delta, mu2, fresh, "
                "free) VALUES (?, ?, ?, ?, ?, ?, ?) " + _TOTALS_UPSERT,
                (
                    subject,
                    c.relation.value,
                    0.0 if g is not None else n * c.epsilon,
                    0.0 if g is not None else n * c.delta,
                    0.0 if g is None else n / (g * g),
                    n,
                    n_free,
                ),
            )
        led._set_watermark(db.execute("SELECT COALESCE(MAX(seq), 0) FROM releases").fetchone()[0])

    def _check_records(self) -> None:
        """Per-record budget, in bounded Python work: the staged records' histories are
        aggregated in SQL in one streaming pass (no sort), and the *largest* basic epsilon,
        delta and Gaussian ``sum 1/s^2`` over them are tested as one history -- if that passes,
        every record passes (composition is monotone in each). Only otherwise is every record
        tested, vectorised (:func:`privembed.core.accounting.exceeds_budget`), to name the ones over.
        """
        led = self.ledger
        budget = led.budget
        if budget is None or self.fresh == 0:
            self._check_relations()  # composition must still be possible
            return
        t = self._table
        history = (
            "SELECT s.record_id AS rid, MIN(r.relation) AS rel, MAX(r.relation) AS rel2, "
            "COALESCE(SUM(CASE WHEN r.noise_multiplier IS NULL THEN r.epsilon END), 0.0) AS eb, "
            "COALESCE(SUM(CASE WHEN r.noise_multiplier IS NULL THEN r.delta END), 0.0) AS db, "
            "COALESCE(SUM(CASE WHEN r.noise_multiplier IS NOT NULL "
            "THEN 1.0 / (r.noise_multiplier * r.noise_multiplier) END), 0.0) AS g, "
            "COUNT(*) AS n "
            f"FROM {t} s CROSS JOIN releases r ON r.record_id = s.record_id AND r.free = 0 "
            "WHERE s.free = 0 GROUP BY s.record_id"
        )
        rel_lo, rel_hi, eb, db, g, n = led._sql.execute(
            f"SELECT MIN(rel), MAX(rel2), MAX(eb), MAX(db), MAX(g), MAX(n) FROM ({history}) h"
        ).fetchone()
        if not n:
            return  # no record of this release has a history: one release each is allowed
        if rel_lo != rel_hi or rel_lo != self.cost.relation.value:
            self._check_relations()  # names the record
            raise UnsupportedGuarantee(
                "a record of this release has releases under different neighbouring relations; "
                "they do not compose into one guarantee."
            )
        worst = _composition(rel_lo, eb, db, g, n).add(self.cost)
        eps, dlt = worst.at(budget.delta)
        if eps <= budget.epsilon * (1 + 1e-12) and dlt <= budget.delta * (1 + 1e-12):
            return
        rids, cols = [], []
        for rid, _, _, e, d, m, _ in led._sql.execute(history):
            rids.append(rid)
            cols.append((e, d, m))
        arr = np.asarray(cols, dtype=np.float64).reshape(-1, 3)
        c = self.cost
        g_new = 0.0 if c.noise_multiplier is None else 1.0 / c.noise_multiplier**2
        e_new, d_new = (0.0, 0.0) if c.noise_multiplier is not None else (c.epsilon, c.delta)
        over = exceeds_budget(
            arr[:, 0] + e_new, arr[:, 1] + d_new, arr[:, 2] + g_new, budget.epsilon, budget.delta
        )
        if not over.any():
            return
        refused = sorted(rids[i] for i in np.flatnonzero(over))
        spent = {r: comp.at(budget.delta) for r, comp in self._histories(refused[:5])}
        shown = ", ".join(
            f"{display_key(r)} (spent eps={spent[r][0]:.4g}, delta={spent[r][1]:.3g})"
            for r in refused[:5]
        )
        more = f" and {len(refused) - 5} more" if len(refused) > 5 else ""
        raise BudgetExceeded(
            f"release refused: {len(refused)} record(s) would exceed the per-record budget "
            f"({budget.describe()}) with this release ({self.mechanism!r}): {shown}{more}."
        )

    def _histories(self, keys: list[str]) -> list[tuple[str, Composition]]:
        """The composition of each record's fresh releases so far (a few records)."""
        out = []
        for k in keys:
            comp = Composition()
            for rel, eps, dlt, nm in self.ledger._sql.execute(
                "SELECT relation, epsilon, delta, noise_multiplier FROM releases "
                "WHERE record_id = ? AND free = 0",
                (k,),
            ):
                comp = comp.add(Cost(Neighbouring(rel), eps, dlt, nm))
            out.append((k, comp))
        return out

    def _check_relations(self) -> None:
        t = self._table
        row = self.ledger._sql.execute(
            f"SELECT s.record_id, r.relation FROM {t} s CROSS JOIN releases r ON r.record_id = "
            "s.record_id AND r.free = 0 WHERE s.free = 0 AND r.relation != ? LIMIT 1",
            (self.cost.relation.value,),
        ).fetchone()
        if row is not None:
            raise UnsupportedGuarantee(
                f"record {display_key(row[0])} was released under the {row[1]!r} neighbouring relation; a "
                f"{self.cost.relation.value!r} release does not compose with it."
            )

    def _subject_counts(self) -> list[tuple[str, int, int]]:
        """(subject, fresh records, free records) of the staged release, per subject."""
        if not self.per_record_subjects:
            if self.subject is None:
                return []
            return [(self.subject, self.fresh, self.count - self.fresh)]
        return [
            (str(sj), int(n_fresh), int(n_free))
            for sj, n_fresh, n_free in self.ledger._sql.execute(
                "SELECT subject, SUM(CASE WHEN free = 0 THEN 1 ELSE 0 END), "
                f"SUM(CASE WHEN free != 0 THEN 1 ELSE 0 END) FROM {self._table} "
                "WHERE subject IS NOT NULL GROUP BY subject ORDER BY subject"
            )
        ]

    def _check_subject(self) -> None:
        """Per-subject budget from each subject's running totals (one row, whatever its
        history) and this release's fresh records of that subject."""
        if self.fresh == 0:
            return
        led = self.ledger
        budget = led.subject_budget
        over: list[tuple[str, int, float, float, int]] = []
        for subject, n, _ in self._subject_counts():
            if n == 0:
                continue
            before, total, _ = led._subject_totals(subject)
            after = before.add(self.cost, n)  # relations must compose
            if budget is None:
                continue
            eps, dlt = after.at(budget.delta)
            if eps > budget.epsilon * (1 + 1e-12) or dlt > budget.delta * (1 + 1e-12):
                e0, d0 = before.at(budget.delta)
                over.append((subject, n, e0, d0, total))
        if over:
            assert budget is not None
            if len(over) == 1:
                subject, n, e0, d0, total = over[0]
                raise BudgetExceeded(
                    f"release refused: subject {subject!r} would exceed the per-subject budget "
                    f"({budget.describe()}) with {n} more release(s) (spent eps="
                    f"{e0:.4g}, delta={d0:.3g} over {total} release(s))."
                )
            shown = ", ".join(f"{sj!r} (+{n})" for sj, n, *_ in over[:5])
            more = f" and {len(over) - 5} more" if len(over) > 5 else ""
            raise BudgetExceeded(
                f"release refused: {len(over)} subjects would exceed the per-subject budget "
                f"({budget.describe()}) with this release: {shown}{more}."
            )

    def mark_published(self) -> None:
        """Note that the output of this committed release was published."""
        if not self.committed:
            raise RuntimeError("commit the release before marking it published.")
        with self.ledger._write():
            self.ledger._sql.execute(
                "UPDATE batches SET published = ? WHERE batch = ?", (time.time(), self.batch)
            )

    def _drop(self) -> None:
        if self.ledger._sql.generation != self._generation:
            return  # the staging table died with its connection
        with contextlib.suppress(sqlite3.Error, LedgerBusy):
            self.ledger._sql.drop_staging(self._table)

    def discard(self) -> None:
        """Forget the staged records (nothing was recorded)."""
        self._drop()
