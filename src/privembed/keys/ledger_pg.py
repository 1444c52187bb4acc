"""The PostgreSQL backend of the privacy ledger: several processes and machines, one ledger.

:class:`privembed.keys.ledger.Ledger` keeps the ledger's semantics once (staging, free keyed
re-releases, per-record and per-subject budgets, running subject totals, aliases, the budget
history, read-only inspection); this module holds only what PostgreSQL does differently: the
connection, the SQL dialect (``%s`` placeholders, no SQLite planner hints), the schema's types
(``DOUBLE PRECISION``, identity columns: one schema with two sets of types in
:func:`privembed.keys.ledger_sql.schema_statements`), staging tables, and the write lock.

The write lock
--------------
Every write transaction first takes one transaction-scoped advisory lock of the database
(``pg_advisory_xact_lock``, released by ``COMMIT`` or ``ROLLBACK``, or when the connection
dies), so the budget check and the record of a release happen under mutual exclusion across
every process and machine using the ledger -- the same rule as SQLite's ``BEGIN IMMEDIATE``. A
waiting writer waits in bounded steps (``lock_timeout`` of 200 ms per attempt), so the ledger's
timeout and its cooperative checkpoint (``ledger.wait``) apply as with SQLite. Transactions run
at ``READ COMMITTED``: a statement sees everything committed before it began, and a writer that
holds the lock sees every earlier writer's commit (PostgreSQL releases the lock only after the
commit is visible).

Lost connections
----------------
A connection that breaks (the server stopped or restarted, the backend terminated, the network
cut) raises :class:`privembed.keys.ledger.LedgerUnreachable` from the operation that found it,
whatever it was doing: a release whose commit was interrupted is never reported as recorded, so
its output is never published (if the ``COMMIT`` reached the server before the cut, the release
is charged without output -- the conservative direction). The next operation connects again; a
staged release that began on the old connection cannot commit (its staging table died with it).

URLs and secrets
----------------
A ledger is named by a ``postgresql://`` (or ``postgres://``) URL; libpq's environment
(``PGPASSWORD``, ``PGHOST``, ``~/.pgpass``, ...) fills in what it leaves out, so a password
need not appear on a command line. Wherever the URL is shown -- messages, ``ledger show``, the
server's logs -- its password is replaced by ``***`` (:func:`redact_url`).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .ledger_sql import SCHEMA_VERSION, schema_statements

__all__ = ["PostgresBackend", "is_postgres_url", "redact_url"]

#: the advisory lock of a ledger's write transactions (application id "pemb", lock 1)
LOCK_KEY = (0x70656D62, 1)
#: the marker row in ``settings`` that makes a database a privembed ledger
MARKER = ("ledger_schema", "privembed-ledger")
#: milliseconds of one bounded wait for the write lock
_LOCK_STEP_MS = 200

_TABLES = ("releases", "batches", "settings", "subject_totals", "aliases", "budget_history")


_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def is_postgres_url(value: Any) -> bool:
    """Whether ``value`` names a PostgreSQL ledger (a ``postgresql://`` or ``postgres://`` URL).

    Examples
    --------
    >>> is_postgres_url("postgresql://ledger@db.internal/privacy"), is_postgres_url("l.db")
    (True, False)
    """
    return isinstance(value, str) and value.lower().startswith(("postgresql://", "postgres://"))


def redact_url(dsn: str) -> str:
    """``dsn`` with its password replaced by ``***`` (URL or ``key=value`` form).

    Examples
    --------
    >>> redact_url("postgresql://app:s3cret@db:5432/ledger?sslmode=require")
    'postgresql://app:***@db:5432/ledger?sslmode=require'
    >>> redact_url("postgresql://db/ledger?password=s3cret&sslmode=require")
    'postgresql://db/ledger?password=***&sslmode=require'
    >>> redact_url("host=db password='s 3' dbname=x")
    'host=db password=*** dbname=x'
    """
    if not is_postgres_url(dsn):
        return _PASSWORD_KV.sub(r"\1***", dsn)
    try:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            user, _, host = netloc.rpartition("@")
            if ":" in user:
                user = user.split(":", 1)[0] + ":***"
            netloc = f"{user}@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(k.lower() == "password" for k, _ in pairs):
                query = urlencode(
                    [(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="*/"
                )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "postgresql://(unreadable URL)"


def _secrets(dsn: str) -> list[str]:
    """The password(s) written in ``dsn`` (to scrub from any message that might echo it)."""
    found: list[str] = []
    try:
        parts = urlsplit(dsn) if is_postgres_url(dsn) else None
    except ValueError:
        parts = None
    if parts is not None:
        if parts.password:
            found.append(parts.password)
        found += [v for k, v in parse_qsl(parts.query) if k.lower() == "password" and v]
    found += [m.group(2).strip("'") for m in _PASSWORD_KV.finditer(dsn)]
    return [s for s in found if s]


def scrub(message: str, dsn: str) -> str:
    """``message`` without any password written in ``dsn`` (and with the URL redacted)."""
    out = message.replace(dsn, redact_url(dsn))
    for s in _secrets(dsn):
        out = out.replace(s, "***")
    return out


def _translate(sql: str) -> str:
    """The ledger's SQL (SQLite's ``?`` placeholders and planner hints) in PostgreSQL's form."""
    return (
        sql.replace("%", "%%")
        .replace("?", "%s")
        .replace(" NOT INDEXED", "")
        .replace("CROSS JOIN", "JOIN")
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PostgresBackend:
    """One connection to a PostgreSQL ledger (see the module docstring).

    Parameters
    ----------
    url : str
        ``postgresql://`` URL (libpq's environment fills in what it leaves out).
    readonly : bool
        Every transaction of the session is read-only (PostgreSQL refuses writes).
    timeout : float
        Seconds allowed for connecting.
    unreachable, data_error : exception classes
        Raised for a lost or refused connection, and for a value PostgreSQL cannot store as
        text (NUL characters, unpaired surrogates), by the ledger's own classes.
    """

    kind = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        readonly: bool,
        timeout: float,
        unreachable: type[Exception],
        data_error: type[Exception],
    ) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - the extra is part of dev
            raise ImportError(
                "a PostgreSQL ledger needs psycopg: pip install 'privembed[postgres]'"
            ) from exc
        self._pg = psycopg
        self.url = url
        self.where = redact_url(url)
        self.readonly = readonly
        self.connect_timeout = max(2, int(timeout + 0.999))
        self._unreachable = unreachable
        self._data_error = data_error
        self.integrity_error: type[Exception] = psycopg.IntegrityError
        self.generation = 0
        self.in_transaction = False
        self._cache: dict[str, str] = {}
        self.db: Any = None
        self._connect()

    # ---- connection --------------------------------------------------------------------------
    def _connect(self) -> None:
        pg = self._pg
        try:
            db = pg.connect(self.url, autocommit=True, connect_timeout=self.connect_timeout)
        except (pg.Error, ValueError) as exc:
            raise self._unreachable(
                f"cannot reach the ledger database {self.where}: "
                f"{scrub(_first_line(exc), self.url)}"
            ) from None
        try:
            if self.readonly:
                db.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            db.execute("SET TIME ZONE 'UTC'")
        except pg.Error as exc:
            db.close()
            raise self._unreachable(
                f"cannot use the ledger database {self.where}: {scrub(_first_line(exc), self.url)}"
            ) from None
        self.db = db
        # a ledger dropped without close() still closes its connection (psycopg warns otherwise)
        weakref.finalize(self, db.close)
        self.generation += 1
        self.in_transaction = False

    def _lost(self, exc: BaseException) -> Exception:
        was_writing = self.in_transaction
        self.in_transaction = False
        if self.db is not None:
            try:
                self.db.close()
            except self._pg.Error:  # pragma: no cover - closing a broken connection
                pass
        self.db = None
        what = " during a transaction (nothing of it is reported as recorded)" * was_writing
        return self._unreachable(
            f"lost the connection to the ledger database {self.where}{what}: "
            f"{scrub(_first_line(exc), self.url)}"
        )

    def _ready(self) -> Any:
        if self.db is None or self.db.closed or self.db.broken:
            if self.in_transaction:  # never continue a transaction on another connection
                raise self._lost(RuntimeError("the connection was closed"))
            self._connect()
        return self.db

    def _call(self, fn: Any, *args: Any) -> Any:
        pg = self._pg
        try:
            return fn(*args)
        except (pg.OperationalError, pg.InterfaceError) as exc:
            if self.db is None or self.db.closed or self.db.broken:
                raise self._lost(exc) from None
            raise
        except pg.DataError as exc:
            if self.db is not None and self.db.broken:  # pragma: no cover
                raise self._lost(exc) from None
            raise self._data_error(
                f"the PostgreSQL ledger cannot store a value of this release: "
                f"{_first_line(exc)} (text in PostgreSQL holds no NUL characters or unpaired "
                "surrogates)"
            ) from None
        except UnicodeEncodeError as exc:
            raise self._data_error(
                f"the PostgreSQL ledger cannot store a value of this release: {exc.reason} "
                "(text in PostgreSQL holds no unpaired surrogates)"
            ) from None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        q = self._cache.get(sql)
        if q is None:
            q = self._cache[sql] = _translate(sql)
        db = self._ready()
        return self._call(db.execute, q, list(params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        q = self._cache.get(sql)
        if q is None:
            q = self._cache[sql] = _translate(sql)
        db = self._ready()

        def run() -> None:
            with db.cursor() as cur:
                cur.executemany(q, [list(r) for r in rows])

        self._call(run)

    # ---- transactions ------------------------------------------------------------------------
    def begin(self) -> None:
        self.execute("BEGIN")
        self.in_transaction = True

    def try_begin_write(self) -> bool:
        """One bounded attempt at the ledger's write lock (False: another writer holds it)."""
        self.begin()
        try:
            self.execute(f"SET LOCAL lock_timeout = '{_LOCK_STEP_MS}ms'")
            self.execute("SELECT pg_advisory_xact_lock(?::int4, ?::int4)", LOCK_KEY)
            self.execute("SET LOCAL lock_timeout = 0")
        except self._pg.errors.LockNotAvailable:
            self.rollback()
            return False
        except BaseException:
            if self.in_transaction:
                self.rollback()
            raise
        return True

    def commit(self) -> None:
        try:
            self.execute("COMMIT")
        finally:
            self.in_transaction = False

    def rollback(self) -> None:
        if self.db is None or self.db.closed or self.db.broken:
            self.in_transaction = False
            return
        try:
            self.execute("ROLLBACK")
        finally:
            self.in_transaction = False

    # ---- schema ------------------------------------------------------------------------------
    def tables(self) -> set[str]:
        """The ledger's table names present in the connection's schema search path."""
        rows = self.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON "
            "n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p', 'v') AND "
            "n.nspname = current_schema() AND c.relname = ANY(?)",
            [list(_TABLES)],
        ).fetchall()
        return {r[0] for r in rows}

    def table_exists(self, name: str) -> bool:
        return name in self.tables()

    def identify(self) -> str:
        """``"ledger"``, ``"empty"`` (none of the ledger's tables) or ``"other"``."""
        have = self.tables()
        if not have:
            return "empty"
        if "settings" not in have:
            return "other"
        row = self.execute("SELECT value FROM settings WHERE name = ?", (MARKER[0],)).fetchone()
        return "ledger" if row is not None and row[0] == MARKER[1] else "other"

    def create_schema(self) -> None:
        """Create the ledger's tables (inside the write lock: replicas starting together)."""
        for stmt in schema_statements("postgresql"):
            self.execute(stmt)
        self.execute(
            "INSERT INTO settings(name, value) VALUES (?, ?), ('schema_version', ?) "
            "ON CONFLICT(name) DO NOTHING",
            (*MARKER, str(SCHEMA_VERSION)),
        )

    def schema_version(self) -> int:
        row = self.execute("SELECT value FROM settings WHERE name = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    def create_staging(self, name: str) -> None:
        self.execute(
            f"CREATE TEMP TABLE {name} (record_id TEXT PRIMARY KEY, tag TEXT, "
            "output_digest TEXT, free INTEGER NOT NULL DEFAULT 0, subject TEXT)"
        )

    def drop_staging(self, name: str) -> None:
        if self.db is None or self.db.closed or self.db.broken:
            return  # a temporary table dies with its connection
        self.execute(f"DROP TABLE IF EXISTS pg_temp.{name}")

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
