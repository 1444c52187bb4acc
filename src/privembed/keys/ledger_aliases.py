"""Clean-vector aliases as ledger state: a bounded table of keyed tags and the identity that first
claimed each (the server's rule that texts with one clean vector are one record), surviving
restarts and shared by every process using the ledger.

Tags are opaque keyed digests; the ledger never sees what they were computed from. The table
keeps at most a capacity of tags, forgetting the least recently used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from .ledger_sql import select_in

__all__ = ["ALIAS_CAPACITY", "AliasConflict", "LedgerAliases"]

#: aliases a ledger keeps by default (least recently used ones are forgotten beyond it)
ALIAS_CAPACITY = 1 << 20


class AliasConflict(RuntimeError):
    """Another process claimed an alias tag for another owner after it was looked up (the
    release was not recorded; look the tags up again and retry)."""


class LedgerAliases:
    """The alias part of a ledger (a base class of :class:`privembed.keys.ledger.Ledger`)."""

    #: the ledger's backend and write lock (set by the ledger)
    _sql: Any
    _write: Callable[[], AbstractContextManager[None]]

    def lookup_aliases(self, tags: Sequence[str]) -> dict[str, str]:
        """The recorded owner of each known tag (a read: no lock, nothing written)."""
        query = "SELECT tag, owner FROM aliases WHERE tag IN ({marks})"
        return dict(select_in(self._sql, query, list(dict.fromkeys(tags))))

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
