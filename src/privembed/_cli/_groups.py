"""Option groups of the commands that release embeddings (protect, index, protect-stream,
protect-shards): options that always travel together, declared once (issue 41).

Each group is a :class:`~privembed._cli.common.OptionGroup`: a command parameter annotated
with it stands for all of its options, in place in ``--help``, and the command receives one
instance. What the commands do with a group -- open the ledger, name the options given, pass
the budgets on -- is written here once too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .common import OptionGroup, err_console
from .options import (
    OptBudgetDelta,
    OptBudgetEpsilon,
    OptLedger,
    OptSubjectBudgetDelta,
    OptSubjectBudgetEpsilon,
    OptSubjectField,
)

__all__ = ["LedgerOptions", "SubjectOptions"]


@dataclass
class LedgerOptions(OptionGroup):
    """The ledger a release is recorded and checked in, with the per-record budget to set,
    confirm or lower there (``--ledger``, ``--budget-epsilon``, ``--budget-delta``)."""

    ledger: OptLedger = None
    budget_epsilon: OptBudgetEpsilon = None
    budget_delta: OptBudgetDelta = None

    def budgets(self) -> dict[str, Any]:
        """The per-record budget as keyword arguments of a release."""
        return {"budget_epsilon": self.budget_epsilon, "budget_delta": self.budget_delta}

    def open(self) -> Any:
        """:func:`privembed.release.open_ledger` with the budget, saying on stderr when another
        process holds the ledger's lock."""
        from ..release import open_ledger

        return open_ledger(
            self.ledger,
            **self.budgets(),
            on_wait=lambda p: err_console.print(
                f"waiting for the ledger {p} (locked by another process)...", highlight=False
            ),
        )


@dataclass
class SubjectOptions(OptionGroup):
    """The subjects a release charges (a patient, a user: ``--subject-field``) and their
    per-subject budget (``--subject-budget-epsilon``, ``--subject-budget-delta``)."""

    subject_column: OptSubjectField = None
    subject_budget_epsilon: OptSubjectBudgetEpsilon = None
    subject_budget_delta: OptSubjectBudgetDelta = None

    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of :func:`privembed.release.protect_file`."""
        return dataclasses.asdict(self)
