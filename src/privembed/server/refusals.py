"""What the server answers when the ledger cannot release: a budget refusal (403) with what
the requesting subject and texts may see of it, and a ledger that is busy or unreachable (503),
as ``/healthz`` reports it (:mod:`privembed.server.service` raises them)."""

from __future__ import annotations

import math
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

__all__ = [
    "BudgetRefused",
    "BudgetState",
    "LedgerHealth",
    "LedgerUnavailable",
    "one_more_exceeds",
    "unavailable",
]


@dataclass(frozen=True)
class BudgetState:
    """One budget as a refused client may see it: the budget, what is spent (composed, at the
    budget's delta) and the epsilon left at that delta (composition does not subtract)."""

    epsilon: float
    delta: float
    spent_epsilon: float
    spent_delta: float

    @property
    def left_epsilon(self) -> float:
        return max(0.0, self.epsilon - self.spent_epsilon)


@dataclass(eq=False, repr=False)  # an exception: compared by identity, repr of its args
class BudgetRefused(Exception):
    """The ledger refused a release: a text or the subject would pass its budget.

    Attributes
    ----------
    scope : {"record", "subject"}
        The budget that refused it.
    cost : tuple of float, optional
        (epsilon, delta) of one release of one text under the request's model.
    subject : BudgetState, optional
        The requesting subject's budget (with a per-subject budget).
    texts : dict of str to BudgetState
        The request's texts (by request id) that one more release would take past the
        per-text budget -- only those: what a refusal tells about a text is never more than
        that it is spent (another subject's releases of the request's other texts stay hidden).
    """

    scope: str = "record"
    _: KW_ONLY
    cost: tuple[float, float] | None = None
    subject: BudgetState | None = None
    texts: dict[str, BudgetState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.scope)  # the message (and args) of the exception: its scope


def one_more_exceeds(spent: Any, cost: Any, budget: Any) -> bool:
    """Whether one more release at ``cost`` takes a record that has ``spent`` past ``budget``
    -- never True for one that would pass. Exact when its fresh releases compose like that
    many releases at ``cost`` (the usual history: one model's releases); otherwise a lower
    bound of what it would spend (a composition never shrinks, and a basic cost adds at least
    its epsilon)."""
    from ..core.accounting import Composition

    tol = 1 + 1e-12
    fresh = spent.releases - spent.free_releases
    same = Composition().add(cost, fresh)
    e, d = same.at(budget.delta)
    if math.isclose(e, spent.epsilon, rel_tol=1e-9, abs_tol=1e-12) and math.isclose(
        d, spent.delta, rel_tol=1e-9, abs_tol=1e-15
    ):
        e, d = same.add(cost).at(budget.delta)
        return bool(e > budget.epsilon * tol or d > budget.delta * tol)
    basic = cost.epsilon if cost.noise_multiplier is None else 0.0
    return bool(spent.epsilon + basic > budget.epsilon * tol or spent.delta > budget.delta * tol)


class LedgerUnavailable(Exception):
    """The ledger stayed locked by another process longer than ``ledger_timeout_s``, or (with
    ``unreachable``) its database could not be reached: nothing was released."""

    def __init__(self, message: str = "", *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def unavailable(health: LedgerHealth, exc: BaseException) -> LedgerUnavailable:
    """What a ledger that could not be used answers (503), with ``/healthz`` updated."""
    from ..keys.ledger import LedgerUnreachable

    unreachable = isinstance(exc, LedgerUnreachable)
    health.set("unreachable" if unreachable else "busy", str(exc))
    return LedgerUnavailable(str(exc), unreachable=unreachable)


@dataclass
class LedgerHealth:
    """What ``/healthz`` reports about the ledger (updated by every ledger operation)."""

    state: str = "ok"  # "ok" | "busy" | "unreachable" | "none"
    since: float = field(default_factory=time.time)
    detail: str = ""

    def set(self, state: str, detail: str = "") -> None:
        if state != self.state:
            self.since = time.time()
        self.state, self.detail = state, detail
