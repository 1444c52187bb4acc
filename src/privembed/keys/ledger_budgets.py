"""Budgets as ledger state: the per-record and per-subject budgets, their history, and what a
command's budget flags may do (set a first budget, confirm or lower one; never raise it).

:class:`LedgerBudgets` is the budget part of :class:`privembed.keys.ledger.Ledger`: it reads and
writes the ``settings`` and ``budget_history`` tables through the ledger's backend and its write
lock. Raising a budget takes ``allow_raise=True`` (``privembed ledger budget ... --raise``) and is
recorded with its time; a command's flags are *proposed* (:meth:`LedgerBudgets.propose_budget`)
and written with the next release committed, so a refused command leaves the budget as it was.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core._validation import check_real

__all__ = [
    "DEFAULT_REPORT_DELTA",
    "Budget",
    "BudgetExceeded",
    "BudgetRaise",
    "LedgerBudgets",
    "check_budget",
]

#: delta at which compositions are reported when no budget is set
DEFAULT_REPORT_DELTA = 1e-5


class BudgetExceeded(ValueError):
    """A release would take records (or a subject) past the configured budget."""


class BudgetRaise(ValueError):
    """A budget change would raise the stored budget without ``allow_raise``."""


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


def check_budget(epsilon: float, delta: float, subject: bool) -> str:
    """Check a budget's values; return its scope (``"record"`` or ``"subject"``)."""
    if not (isinstance(epsilon, float) and math.isinf(epsilon) and epsilon > 0):
        check_real("budget epsilon", epsilon, gt=0)
    check_real("budget delta", delta, gt=0, lt=1)
    return "subject" if subject else "record"


class LedgerBudgets:
    """The budget part of a ledger (a base class of :class:`privembed.keys.ledger.Ledger`)."""

    #: the ledger's backend, path, write lock and pending proposals (set by the ledger)
    _sql: Any
    path: Path | str
    defer_budgets: bool
    _proposed: dict[str, Budget]
    _write: Callable[[], AbstractContextManager[None]]

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
        scope = check_budget(epsilon, delta, subject)
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
        check_budget(eps, dlt, subject)
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

    def budget_history(self) -> list[dict[str, Any]]:
        """Every budget change, oldest first."""
        cur = self._sql.execute("SELECT * FROM budget_history ORDER BY seq")
        names = [c[0] for c in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
