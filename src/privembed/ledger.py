"""The privacy ledger: every fresh release of a record spends budget; the ledger remembers.

An SQLite file records each release of each record -- record id, mechanism configuration
fingerprint, key id (keyed noise) or none, the guarantee, time and a digest of the output -- and
composes a record's releases:

* Gaussian releases (``sigma`` and l2 ``sensitivity`` known) compose tightly through the privacy
  loss distribution of ``dp-accounting`` (PLD accountant on ``GaussianDpEvent(sigma/sensitivity)``).
* Pure and approximate LDP releases compose by basic composition (epsilons add, deltas add);
  metric (d_X) releases count with the pure LDP they imply on unit inputs.
* The two parts are added by basic composition: with Gaussian part (eps_G at delta_G) and the rest
  (sum eps, sum delta), the record has spent (eps_G + sum eps, delta_G + sum delta).
* A keyed re-release of the same record under the same key and configuration returns the
  identical vector (:mod:`privembed.keyed`), so it is recorded as *free*.

With a per-record budget (epsilon, delta) configured, :meth:`Ledger.release` refuses -- before
any output is written -- a release that would take any record past it, naming the records and
their spent budget. Concurrent writers are serialised by SQLite's write lock (``BEGIN
IMMEDIATE``): the budget check and the insert of a release happen in one transaction that also
spans writing the output, so two processes can neither double-spend nor corrupt the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._optional import require
from ._validation import check_real
from .accounting import ApproxDP, Guarantee, MetricDP, PureDP

__all__ = ["BudgetExceeded", "Ledger", "Release", "Spent"]

#: record ids per ``IN (...)`` lookup (under SQLite's historical limit of 999 parameters)
_LOOKUP_CHUNK = 900

_SCHEMA = """
CREATE TABLE IF NOT EXISTS releases (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id TEXT NOT NULL,
    config_fp TEXT NOT NULL,
    key_id TEXT,
    kind TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    gauss_ratio REAL,
    guarantee TEXT NOT NULL,
    free INTEGER NOT NULL,
    output_digest TEXT,
    batch TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS releases_record ON releases(record_id);
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class BudgetExceeded(ValueError):
    """A release would take records past the configured per-record budget."""


@dataclass(frozen=True)
class Spent:
    """What one record has spent: (epsilon, delta) after composition, and release counts."""

    record_id: str
    epsilon: float
    delta: float
    releases: int
    free_releases: int


@dataclass(frozen=True)
class _Cost:
    kind: str
    epsilon: float  # basic-composition part (pure / approximate / implied)
    delta: float
    gauss_ratio: float | None  # sigma / sensitivity for Gaussian releases


def _record_key(record_id: Any) -> str:
    from .keyed import typed_id

    return typed_id(record_id).decode("utf-8", errors="surrogateescape")


def _cost_of(mechanism: Any) -> _Cost:
    g: Guarantee = mechanism.guarantee
    try:
        sigma = getattr(mechanism, "sigma", None)
        sens = getattr(mechanism, "sensitivity", None)
    except Exception:  # e.g. a projection whose sigma depends on the (unknown) input dimension
        sigma = sens = None
    if (
        isinstance(g, ApproxDP)
        and isinstance(sigma, int | float)
        and isinstance(sens, int | float)
        and sens > 0
    ):
        return _Cost(g.kind, 0.0, 0.0, float(sigma) / float(sens))
    if isinstance(g, ApproxDP):
        return _Cost(g.kind, g.epsilon, g.delta, None)
    if isinstance(g, PureDP):
        return _Cost(g.kind, g.epsilon, 0.0, None)
    if isinstance(g, MetricDP):
        pure = [x for x in g.implied if isinstance(x, PureDP)]
        return _Cost(g.kind, pure[0].epsilon if pure else math.inf, 0.0, None)
    return _Cost(g.kind, math.inf, 0.0, None)


@lru_cache(maxsize=4096)
def _gaussian_epsilon(ratios: tuple[tuple[float, int], ...], delta: float) -> float:
    """epsilon at ``delta`` of composed Gaussian mechanisms (PLD accountant)."""
    if not ratios:
        return 0.0
    if delta <= 0:
        return math.inf
    dpa = require("dp_accounting", "accounting", purpose="composing Gaussian releases")
    from dp_accounting import pld

    acc = pld.PLDAccountant(value_discretization_interval=1e-3)
    for ratio, count in ratios:
        acc.compose(dpa.GaussianDpEvent(noise_multiplier=ratio), count=count)
    return float(acc.get_epsilon(delta))


def _compose(costs: list[_Cost], delta_target: float) -> tuple[float, float]:
    """(epsilon, delta) spent by a list of fresh releases, targeting total ``delta_target``."""
    eps_basic = sum(c.epsilon for c in costs if c.gauss_ratio is None)
    delta_basic = sum(c.delta for c in costs if c.gauss_ratio is None)
    gauss = Counter(c.gauss_ratio for c in costs if c.gauss_ratio is not None)
    if not gauss:
        return eps_basic, delta_basic
    delta_g = delta_target - delta_basic
    key = tuple(sorted((float(r), int(n)) for r, n in gauss.items()))
    eps_g = _gaussian_epsilon(key, delta_g) if delta_g > 0 else math.inf
    return eps_basic + eps_g, delta_target if delta_g > 0 else delta_basic


class Release:
    """An open release inside a ledger transaction (see :meth:`Ledger.release`)."""

    def __init__(self, record_ids: list[str], free: list[bool]) -> None:
        self.record_ids = record_ids
        self.free = free
        self._digests: dict[str, str] = {}

    @property
    def fresh_count(self) -> int:
        return int(sum(not f for f in self.free))

    def add_outputs(self, ids: Sequence[Any], Y: NDArray[Any]) -> None:
        """Record the SHA-256 of each released vector (call once per output batch)."""
        Yc = np.ascontiguousarray(Y)
        for rid, row in zip(ids, Yc, strict=True):
            self._digests[_record_key(rid)] = hashlib.sha256(row.tobytes()).hexdigest()


class Ledger:
    """A per-record privacy ledger in an SQLite file.

    Parameters
    ----------
    path : str or Path
        The ledger file (created if missing).
    budget_epsilon, budget_delta : float, optional
        Per-record budget; stored in the file, so later opens enforce it too. ``budget_delta``
        (default 1e-5) is also the delta at which Gaussian compositions are reported.
    timeout : float
        Seconds to wait for another writer's lock.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        budget_epsilon: float | None = None,
        budget_delta: float | None = None,
        timeout: float = 600.0,
    ) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise IsADirectoryError(f"ledger path is a directory: {self.path}")
        try:
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"cannot open ledger {self.path}: {exc}") from None
        if budget_epsilon is not None or budget_delta is not None:
            self.set_budget(
                epsilon=budget_epsilon if budget_epsilon is not None else math.inf,
                delta=budget_delta if budget_delta is not None else 1e-5,
            )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- settings --------------------------------------------------------------------------
    def set_budget(self, *, epsilon: float, delta: float) -> None:
        """Store the per-record budget (epsilon may be ``inf``: only delta is then bounded)."""
        if not (isinstance(epsilon, float) and math.isinf(epsilon)):
            check_real("budget_epsilon", epsilon, gt=0)
        check_real("budget_delta", delta, gt=0, lt=1)
        with self._tx():
            for name, value in (("budget_epsilon", epsilon), ("budget_delta", delta)):
                self._db.execute(
                    "INSERT INTO settings(name, value) VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                    (name, repr(float(value))),
                )

    @property
    def budget(self) -> tuple[float, float] | None:
        """(epsilon, delta) per record, or None if no budget is set."""
        rows = dict(self._db.execute("SELECT name, value FROM settings").fetchall())
        if "budget_delta" not in rows:
            return None
        return float(rows.get("budget_epsilon", "inf")), float(rows["budget_delta"])

    @property
    def report_delta(self) -> float:
        b = self.budget
        return b[1] if b else 1e-5

    # ---- transactions ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _rows_for(
        self, columns: str, keys: list[str], where: str = ""
    ) -> Iterator[tuple[Any, ...]]:
        """Rows of ``releases`` for the given record ids, through the ``record_id`` index.

        Chunked ``IN`` lookups: the cost grows with the number of ids asked for, not with the
        size of the ledger (a full scan per release made every release slower than the last).
        """
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _LOOKUP_CHUNK):
            chunk = unique[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            yield from self._db.execute(
                f"SELECT {columns} FROM releases WHERE record_id IN ({marks}){where} ORDER BY seq",
                chunk,
            )

    def _history(self, keys: list[str]) -> dict[str, list[tuple[_Cost, str, str | None]]]:
        out: dict[str, list[tuple[_Cost, str, str | None]]] = {k: [] for k in keys}
        for rid, kind, eps, dlt, ratio, fp, kid in self._rows_for(
            "record_id, kind, epsilon, delta, gauss_ratio, config_fp, key_id", keys, " AND free = 0"
        ):
            out[rid].append((_Cost(kind, eps, dlt, ratio), fp, kid))
        return out

    @contextlib.contextmanager
    def release(
        self, ids: Sequence[Any], mechanism: Any, *, key_id: str | None = None
    ) -> Iterator[Release]:
        """Check the budget, then hold the ledger while the caller writes the output.

        Use as ``with ledger.release(ids, mech, key_id=kid) as rel: ...write...``. On normal exit
        the releases are recorded (with output digests given through
        :meth:`Release.add_outputs`); if the body raises, nothing is recorded.

        Raises
        ------
        BudgetExceeded
            Before the body runs, if any record would pass the budget.
        """
        keys = [_record_key(i) for i in ids]
        if len(set(keys)) != len(keys):
            raise ValueError("ids must be unique within one release.")
        cost = _cost_of(mechanism)
        fp = mechanism.fingerprint
        with self._tx():
            history = self._history(keys)
            free = [
                key_id is not None and any(f == fp and k == key_id for _, f, k in history[rid])
                for rid in keys
            ]
            budget = self.budget
            if budget is not None:
                self._check_budget(keys, free, history, cost, budget)
            rel = Release(keys, free)
            yield rel
            now = time.time()
            batch = uuid.uuid4().hex
            gjson = json.dumps(mechanism.guarantee.to_dict(), sort_keys=True)
            self._db.executemany(
                "INSERT INTO releases(record_id, config_fp, key_id, kind, epsilon, delta, "
                "gauss_ratio, guarantee, free, output_digest, batch, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        rid,
                        fp,
                        key_id,
                        cost.kind,
                        cost.epsilon,
                        cost.delta,
                        cost.gauss_ratio,
                        gjson,
                        int(f),
                        rel._digests.get(rid),
                        batch,
                        now,
                    )
                    for rid, f in zip(keys, free, strict=True)
                ],
            )

    def _check_budget(
        self,
        keys: list[str],
        free: list[bool],
        history: dict[str, list[tuple[_Cost, str, str | None]]],
        cost: _Cost,
        budget: tuple[float, float],
    ) -> None:
        eps_b, delta_b = budget
        over: list[tuple[str, float, float]] = []
        cache: dict[tuple[Any, ...], tuple[float, float]] = {}
        for rid, is_free in zip(keys, free, strict=True):
            if is_free:
                continue
            costs = [c for c, _, _ in history[rid]] + [cost]
            sig = tuple(sorted((c.epsilon, c.delta, c.gauss_ratio or 0.0) for c in costs))
            if sig not in cache:
                cache[sig] = _compose(costs, delta_b)
            eps, dlt = cache[sig]
            if eps > eps_b * (1 + 1e-12) or dlt > delta_b * (1 + 1e-12):
                before = _compose([c for c, _, _ in history[rid]], delta_b)
                over.append((rid, before[0], before[1]))
        if over:
            shown = ", ".join(f"{r} (spent eps={e:.4g}, delta={d:.3g})" for r, e, d in over[:5])
            more = f" and {len(over) - 5} more" if len(over) > 5 else ""
            raise BudgetExceeded(
                f"release refused: {len(over)} record(s) would exceed the per-record budget "
                f"(epsilon={eps_b:g}, delta={delta_b:g}) with this release "
                f"({cost.kind}): {shown}{more}."
            )

    # ---- queries ---------------------------------------------------------------------------
    def spent(self, ids: Sequence[Any] | None = None) -> list[Spent]:
        """Composed spend per record (all records if ``ids`` is None), at :attr:`report_delta`."""
        columns = "record_id, kind, epsilon, delta, gauss_ratio, free"
        if ids is None:
            rows: Iterable[tuple[Any, ...]] = self._db.execute(
                f"SELECT {columns} FROM releases ORDER BY seq"
            )
        else:
            rows = self._rows_for(columns, [_record_key(i) for i in ids])
        per: dict[str, list[tuple[_Cost, bool]]] = {}
        for rid, kind, eps, dlt, ratio, fr in rows:
            per.setdefault(rid, []).append((_Cost(kind, eps, dlt, ratio), bool(fr)))
        out = []
        for rid, items in per.items():
            fresh = [c for c, fr in items if not fr]
            eps, dlt = _compose(fresh, self.report_delta)
            out.append(Spent(rid, eps, dlt, len(items), sum(fr for _, fr in items)))
        return out

    def export(self) -> list[dict[str, Any]]:
        """Every release row as a dict (for JSON/CSV export)."""
        cur = self._db.execute("SELECT * FROM releases ORDER BY seq")
        names = [c[0] for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def summary(self) -> dict[str, Any]:
        """Counts per configuration and the budget."""
        rows = self._db.execute(
            "SELECT config_fp, kind, key_id, COUNT(*), SUM(free), COUNT(DISTINCT record_id), "
            "MIN(created), MAX(created) FROM releases GROUP BY config_fp, key_id"
        ).fetchall()
        return {
            "path": str(self.path),
            "budget": self.budget,
            "configurations": [
                {
                    "config_fp": r[0][:16],
                    "kind": r[1],
                    "key_id": r[2],
                    "releases": r[3],
                    "free": r[4],
                    "records": r[5],
                    "first": r[6],
                    "last": r[7],
                }
                for r in rows
            ],
        }
