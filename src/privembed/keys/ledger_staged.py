"""A release in progress: records staged in a temporary table, then committed or discarded.

:meth:`StagedRelease.commit` takes the ledger's write lock, decides which records are free (a
keyed re-release under its tag), checks the per-record and per-subject budgets in bounded work
(SQL aggregates; each distinct history composed once; a subject's running totals), records the
release and what the ledger holds pending (proposed budgets, deferred releases) in one
transaction -- or refuses it, naming the records, and leaves the ledger as it was.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import numpy as np

from ..core._validation import DataError, check_keywords
from ..core.accounting import (
    Composition,
    Cost,
    Neighbouring,
    UnsupportedGuarantee,
    cost_of,
    exceeds_budget,
)
from .ledger_aliases import ALIAS_CAPACITY
from .ledger_budgets import BudgetExceeded
from .ledger_sql import (
    TOTALS_UPSERT,
    LedgerBusy,
    LedgerUnreachable,
    composition,
    display_key,
    fold_totals,
    select_in,
    set_watermark,
    subject_totals,
)

if TYPE_CHECKING:
    from .ledger import Ledger

__all__ = ["DuplicateIds", "StageOptions", "StagedRelease"]


class DuplicateIds(DataError):
    """The same record id appears more than once in one release."""


class StageOptions(TypedDict, total=False):
    """What a release is staged with besides its mechanism (:meth:`Ledger.stage`; each
    ``None`` when not given): the id of the key its noise is keyed with, the subject it is
    charged to, and where it goes (recorded with it)."""

    key_id: str | None
    subject: str | None
    destination: str | None


class StagedRelease:
    """One release in progress: records are staged, then committed or discarded.

    Staged rows live in a temporary table of the ledger's connection (on disk), so a release of
    millions of records stays in bounded memory; its primary key refuses duplicate ids across
    all the batches of the release.
    """

    def __init__(self, ledger: Ledger, mechanism: Any, **options: Unpack[StageOptions]) -> None:
        check_keywords("Ledger.stage", options, StageOptions)
        if ledger.readonly:
            raise PermissionError(f"ledger {ledger.path} is open read-only.")
        g = mechanism.guarantee
        self.cost = cost_of(g)  # refuses unaccountable guarantees before any work
        self.ledger = ledger
        self.mechanism = mechanism
        self.key_id = options.get("key_id")
        self.subject = options.get("subject")
        self.destination = options.get("destination")
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
        for (k,) in select_in(self.ledger._sql, query, list(dict.fromkeys(keys))):
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
        fold_totals(db)
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
                "free) VALUES (?, ?, ?, ?, ?, ?, ?) " + TOTALS_UPSERT,
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
        set_watermark(db, db.execute("SELECT COALESCE(MAX(seq), 0) FROM releases").fetchone()[0])

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
        worst = composition(rel_lo, eb, db, g, n).add(self.cost)
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
            before, total, _ = subject_totals(led._sql, subject, has_totals=led._has_totals)
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
