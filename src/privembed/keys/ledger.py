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

Backends and parts
------------------
The semantics above live once, in :class:`Ledger` and :class:`StagedRelease`; a backend holds
only what its database does differently: the connection, the SQL dialect, the schema's types,
staging tables and the write lock (:class:`~privembed.keys.ledger_sql.SQLiteBackend`:
``BEGIN IMMEDIATE`` on a file; :class:`privembed.keys.ledger_pg.PostgresBackend`: a
transaction-scoped advisory lock). Both take the write lock in bounded steps, so the ledger's
timeout (:class:`LedgerBusy`) and its cooperative checkpoint (``ledger.wait``) are the same. A
PostgreSQL connection that breaks raises :class:`LedgerUnreachable` (a :class:`LedgerBusy`: try
again later) from whatever operation found it, and a release is never reported as recorded
unless its commit was acknowledged.

The ledger is written in parts: this module (opening, the write lock, queries, a command's
ledger), :mod:`~privembed.keys.ledger_sql` (the SQL: SQLite's schema, backend and migrations,
the running totals, ledger keys), :mod:`~privembed.keys.ledger_budgets` (budgets and their
history), :mod:`~privembed.keys.ledger_aliases` (clean-vector aliases) and
:mod:`~privembed.keys.ledger_staged` (:class:`StagedRelease`: a release's commit). Every name
is importable from here.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

from ..core._validation import DataError, check_real
from ..core.accounting import Composition, UnsupportedGuarantee
from ..core.cancel import checkpoint
from .ledger_aliases import AliasConflict, LedgerAliases
from .ledger_budgets import (
    Budget,
    BudgetExceeded,
    BudgetRaise,
    LedgerBudgets,
)
from .ledger_pg import PostgresBackend, is_postgres_url, redact_url
from .ledger_sql import (
    SCHEMA_VERSION,
    LedgerBusy,
    LedgerUnreachable,
    SQLiteBackend,
    committed_batches,
    composition,
    display_key,
    is_key,
    is_ledger,
    key_value,
    record_key,
    select_in,
    subject_totals,
    watermark,
)
from .ledger_staged import DuplicateIds, StagedRelease, StageOptions

# the errors a caller catches have their public home here, as before the ledger was written apart:
# tracebacks, doctests and pickles name them privembed.keys.ledger.<Error>
for _error in (AliasConflict, BudgetExceeded, BudgetRaise, DuplicateIds, LedgerBusy):
    _error.__module__ = __name__
del _error

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


class NotALedger(DataError):
    """The file is not a privembed ledger (it is left untouched)."""


@dataclass(frozen=True)
class Spent:
    """What one record (or subject) has spent: (epsilon, delta) after composition, and counts."""

    record_id: str
    epsilon: float
    delta: float
    releases: int
    free_releases: int


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
            kept = committed_batches(p)
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


class Ledger(LedgerBudgets, LedgerAliases):
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
        sql: SQLiteBackend | None = None
        try:
            sql = SQLiteBackend(path, readonly=readonly)
            kind = is_ledger(sql.db) if exists or readonly else True
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
            sql.v1_views()
        if not readonly:
            if not exists:
                sql.create(self._write)
            elif self._v1:
                sql.migrate_v1(self._write)
                self._v1 = False
            elif sql.needs_migration():
                sql.migrate_v2(self._write)

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

    # ---- releases --------------------------------------------------------------------------
    def stage(self, mechanism: Any, **options: Unpack[StageOptions]) -> StagedRelease:
        """Begin a release of ``mechanism`` (see the module docstring).

        Raises
        ------
        privembed.core.accounting.UnsupportedGuarantee
            The mechanism's guarantee cannot be accounted (refused before any work).
        """
        return StagedRelease(self, mechanism, **options)

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
            keys = list(dict.fromkeys(i if is_key(i) else record_key(i) for i in ids))
            rows = list(
                select_in(
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
                comp = composition(rel, eps, dlt, mu2, fresh) if fresh else Composition()
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
        for rid, seq, digest, published in select_in(
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
        comp, total, free = subject_totals(self._sql, subject, has_totals=self._has_totals)
        eps_s, dlt_s = comp.at(self._subject_delta())
        return Spent(subject, eps_s, dlt_s, total, free)

    def subjects(self) -> list[str]:
        """Every subject that has releases, in name order."""
        if self._has_totals:
            rows = self._sql.execute(
                "SELECT DISTINCT subject FROM subject_totals UNION SELECT DISTINCT subject FROM "
                "releases NOT INDEXED WHERE seq > ? AND subject IS NOT NULL ORDER BY 1",
                (watermark(self._sql),),
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


def _json_or_none(s: str | None) -> Any:
    if not s:
        return None
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return s
