"""Record ids of a release: typed canonically (:func:`privembed.keys.ledger.record_key`) and unique
across every batch of a run, in bounded memory."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core._validation import DataError
from ..keys.ledger import DuplicateIds, display_key, record_key


def typed_keys(ids: Sequence[Any], *, where: str, first_row: int | None = None) -> list[str]:
    """The ids typed canonically, as the ledger and keyed noise see them
    (:func:`privembed.keys.ledger.record_key`: ``1`` and ``"1"`` differ, ``numpy.int64(1)`` and ``1``
    do not); an id of no supported type is a :class:`DataError` naming ``where`` (and its row,
    counted from ``first_row``).

    Examples
    --------
    >>> typed_keys([1, "1", np.int64(2)], where="batch")
    ['i:1', 's:1', 'i:2']
    """
    # a numpy array of integers or strings becomes Python ints or strs in one C call
    # (iterating it would make a numpy scalar per id: 5x the cost of the keyed draws' id work)
    if isinstance(ids, np.ndarray) and ids.ndim == 1 and ids.dtype.kind in ("i", "u", "U"):
        id_list = ids.tolist()
    else:
        id_list = list(ids)
    # fast paths, equal to record_key for these inputs: plain ints, and plain strings with
    # no lone surrogates (their utf-8 round trip is the identity); one C-level pass over
    # the types instead of a Python test per id
    kinds = set(map(type, id_list))
    if kinds == {str}:
        with contextlib.suppress(UnicodeEncodeError):
            "".join(id_list).encode("utf-8")
            return ["s:" + r for r in id_list]
    elif kinds == {int}:
        return ["i:" + r for r in map(str, id_list)]
    keys = []
    for i, r in enumerate(id_list):
        try:
            keys.append(record_key(r))
        except TypeError as exc:
            at = "" if first_row is None else f" row {first_row + i}:"
            raise DataError(f"{where}:{at} {exc}") from None
    return keys


class ReleasedIds:
    """The record ids a run of releases has drawn noise for, to refuse a repeated one (equal
    ids would release one record twice). In bounded memory: a set up to ``spill`` ids, then a
    private temporary SQLite file. A :class:`Release` keeps one for itself; a front end whose
    run spans several releases or stores (``protect-stream``'s batches, ``index``) keeps one for
    the run and gives it every batch's ids with :meth:`add_ids`.

    Examples
    --------
    >>> seen = ReleasedIds()
    >>> seen.add_ids(["a", 1], where="batch 1")
    >>> seen.add_ids(["1"], where="batch 2")     # the string "1" is another id than the int 1
    >>> seen.add_ids(["a"], where="batch 3")
    Traceback (most recent call last):
    ...
    privembed.keys.ledger.DuplicateIds: record ids must be unique within one release; repeated: 'a' (equal ids would release one record twice).
    """

    def __init__(self, spill: int = 1_000_000) -> None:
        self.spill = spill
        self._mem: set[str] | None = set()
        self._db: sqlite3.Connection | None = None

    def _to_disk(self) -> sqlite3.Connection:
        db = sqlite3.connect("", isolation_level=None)  # private temporary file
        db.execute("CREATE TABLE ids (k TEXT PRIMARY KEY) WITHOUT ROWID")
        if self._mem:
            db.execute("BEGIN")
            db.executemany("INSERT INTO ids VALUES (?)", ((k,) for k in self._mem))
            db.execute("COMMIT")
        self._mem = None
        return db

    def add_ids(self, ids: Sequence[Any], *, where: str) -> None:
        """Take a batch's ids (as :func:`privembed.keys.ledger.record_key` types them) or refuse the
        whole batch: an id of no supported type is a :class:`DataError` naming ``where``."""
        keys = typed_keys(ids, where=where)
        self.add(keys)

    def add(self, keys: list[str]) -> None:
        """Take typed keys (``record_key``'s strings) or raise :class:`DuplicateIds`."""
        if self._mem is not None and len(self._mem) + len(keys) > self.spill:
            self._db = self._to_disk()
        if self._mem is not None:
            batch = set(keys)
            if len(batch) == len(keys) and self._mem.isdisjoint(batch):
                self._mem |= batch
                return
            self._raise(self._duplicates(keys, self._mem.__contains__))  # refused whole
        assert self._db is not None
        try:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO ids VALUES (?)", ((k,) for k in keys))
            self._db.execute("COMMIT")
        except sqlite3.IntegrityError:
            self._db.execute("ROLLBACK")
            db = self._db
            self._raise(
                self._duplicates(
                    keys, lambda k: db.execute("SELECT 1 FROM ids WHERE k = ?", (k,)).fetchone()
                )
            )

    def _duplicates(self, keys: list[str], known: Callable[[str], Any]) -> list[str]:
        """Keys repeated within ``keys`` or already released (``known``), in order."""
        seen: set[str] = set()
        dups = [k for k in keys if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
        dups += [k for k in dict.fromkeys(keys) if known(k)]
        return list(dict.fromkeys(dups))

    def _raise(self, dups: list[str]) -> None:
        shown = ", ".join(display_key(k) for k in dups[:5])
        shown += f" and {len(dups) - 5} more" if len(dups) > 5 else ""
        raise DuplicateIds(
            f"record ids must be unique within one release; repeated: {shown} (equal ids "
            "would release one record twice)."
        ) from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
