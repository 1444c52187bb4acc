"""Which record a release charges when its ids come from the content: variants of one text fold
into one record.

Threat
------
``--ids-from-content`` names each record by a keyed HMAC of its content. If two variants of
one note -- the same text in another case, with a zero-width character, with a ligature --
get two names, each is a record with a budget of its own, and whoever can submit variants
averages their releases: 20 case variants of one note embedded by an uncased model (one clean
vector) lifted the cosine of the average to the clean vector from 0.164 to 0.536, each
release within its budget (issue 39, item 2). The budget must see one record.

The rule
--------
The server's rule (:mod:`privembed.server.service`), written here once for every front end
that derives ids from content (``privembed protect``, ``privembed index``):

* A text's content id is the HMAC of its canonical form -- Unicode NFKC, whitespace runs
  collapsed, ends stripped, **case-folded** (:func:`privembed.keys.keyed.content_ids`) -- so
  case, whitespace and compatibility variants of one text are one record, with or without a
  ledger.
* With a ledger, rows whose clean vectors are bit-identical are one record too: the first
  content id the ledger sees for a clean vector claims it, as an *alias* keyed by an HMAC of
  the vector under the release key (:func:`vector_alias_tags`; the ledger holds the tag, never
  the vector) in the ledger's alias table (:meth:`privembed.keys.ledger.Ledger.lookup_aliases`,
  :meth:`~privembed.keys.ledger.StagedRelease.claim_aliases`: bounded, surviving restarts,
  shared by every command using the ledger). So variants the canonical form misses but the
  model cannot see (zero-width characters its tokenizer drops, accents an uncased model
  strips) land on one record across commands -- and a file of embeddings released with
  ``--ids-from-content`` lands on the records of the texts it was embedded from.

Identity binds the budget; content binds the noise. Each exact text (or vector) still gets
keyed noise of its own and is charged as another release of its record, so averaging variants
spends that record's budget. Within one release (one command's file) a record is released
once: rows that fold into one record are refused, naming them (:func:`refuse_repeated`).

Claims are committed in the release's own transaction; a refused release records none of them
(the command leaves the ledger as it was). Aliases are bounded (least recently used forgotten
past the ledger's capacity, a million tags), which bounds the fold over very large histories.

:func:`vector_alias_tags` and :func:`fold_owners` are what the server's alias step computes
(``Service.alias_tags`` with its backend key and label, and ``Service._release``); it can call
them instead of its own copy.
"""

from __future__ import annotations

import hmac
from collections.abc import MutableMapping, Sequence
from typing import Any

from ..core import labels
from ..keys.keyed import vector_digests
from ..keys.ledger import DuplicateIds, Ledger, display_key, record_key

__all__ = [
    "AliasFold",
    "fold_owners",
    "is_content_id",
    "refuse_repeated",
    "refuse_variants",
    "rounds",
    "vector_alias_tags",
]

#: what a content id starts with (:func:`privembed.keys.keyed.content_ids`)
CONTENT_ID_PREFIX = "cid:"


def is_content_id(record_id: Any) -> bool:
    """Whether ``record_id`` is an id derived from content (a ``"cid:"`` string).

    Examples
    --------
    >>> is_content_id("cid:00ff"), is_content_id("note-1"), is_content_id(7)
    (True, False, False)
    """
    return isinstance(record_id, str) and record_id.startswith(CONTENT_ID_PREFIX)


def vector_alias_tags(
    key: bytes, X: Any, *, label: bytes = labels.CONTENT_VECTOR_ALIAS
) -> list[str]:
    """The alias tag of each clean row of ``X``: 128 bits of ``HMAC-SHA256(key, label ||
    digest)`` in hex, the digest of the row's canonical float32 bytes
    (:func:`privembed.keys.keyed.vector_digests`). Equal rows get equal tags; without the key
    a tag says nothing about its row.

    Examples
    --------
    >>> import numpy as np
    >>> a, b = vector_alias_tags(bytes(32), np.eye(2)[[0, 0]])
    >>> a == b, len(a)
    (True, 32)
    """
    return [hmac.digest(key, label + dg, "sha256")[:16].hex() for dg in vector_digests(X)]


def fold_owners(
    known: MutableMapping[str, Any], tags: Sequence[str], ids: Sequence[Any]
) -> list[Any]:
    """The record of each row: the owner ``known`` records for its tag, else the row's own id,
    which then claims the tag (a tag repeated within the rows is claimed by its first row).
    ``known`` is updated with the claims.

    Examples
    --------
    >>> known = {"t1": "cid:a"}
    >>> fold_owners(known, ["t1", "t2", "t2"], ["cid:x", "cid:y", "cid:z"])
    ['cid:a', 'cid:y', 'cid:y']
    """
    return [known.setdefault(t, rid) for t, rid in zip(tags, ids, strict=True)]


def rounds(ids: Sequence[Any]) -> list[list[int]]:
    """The rows of ``ids`` in rounds of distinct ids, in order: a record's first row in round
    0, its second in round 1, ... -- one release per round where rows that are one record must
    all be released (the server's texts with one identity; variants given to a wrapper in one
    call), each a release of its record.

    Examples
    --------
    >>> rounds(["a", "b", "a", "c", "a"])
    [[0, 1, 3], [2], [4]]
    """
    seen: dict[Any, int] = {}
    out: list[list[int]] = []
    for i, r in enumerate(ids):
        n = seen.get(r, 0)
        seen[r] = n + 1
        if n == len(out):
            out.append([])
        out[n].append(i)
    return out


def refuse_repeated(
    ids: Sequence[Any], *, where: str, first_row: int = 0, why: str = "", hint: str = ""
) -> None:
    """Refuse rows that are one record within one release (:class:`DuplicateIds`), naming the
    rows of the first few records, ``why`` they are one record and what to do (``hint``).

    Examples
    --------
    >>> refuse_repeated(["cid:a", "cid:b"], where="notes.jsonl")
    >>> refuse_repeated(["cid:a", "cid:b", "cid:a"], where="notes.jsonl")
    Traceback (most recent call last):
    ...
    privembed.keys.ledger.DuplicateIds: notes.jsonl: rows 0 and 2 are one record ('cid:a'); a record is released once per release.
    """
    rows: dict[Any, list[int]] = {}
    for i, r in enumerate(ids):
        rows.setdefault(r, []).append(first_row + i)
    repeated = [(r, rs) for r, rs in rows.items() if len(rs) > 1]
    if not repeated:
        return
    shown = "; ".join(
        f"rows {', '.join(map(str, rs[:-1]))} and {rs[-1]} are one record "
        f"({display_key(record_key(r))})"
        for r, rs in repeated[:3]
    )
    more = f" (and {len(repeated) - 3} more records)" if len(repeated) > 3 else ""
    tail = "".join(f" {s}" for s in (why, hint) if s)
    raise DuplicateIds(
        f"{where}: {shown}{more}; a record is released once per release.{tail}"
    ) from None


#: why rows with content ids are one record, and what to do (the message of a refusal)
VARIANTS_WHY = (
    "With ids derived from the content, texts equal up to case, whitespace and Unicode "
    "compatibility forms are one record, and so are rows with one clean vector in a ledger."
)
VARIANTS_HINT = (
    "Release each variant in its own run (each is charged to the record), drop the repeats, "
    "or give the rows ids of their own (--id-field)."
)


class AliasFold:
    """The variant fold of one release over its ledger: content ids to the records the
    ledger's clean-vector aliases name (module docstring).

    Parameters
    ----------
    key : bytes
        The release key (the alias tags are keyed by it).
    ledger : Ledger
        Looked up for recorded aliases; the claims go to the release's staged commit.

    Notes
    -----
    A release of several batches claims tags in its first batches that the ledger only
    records at its commit: they are remembered here (and staged with the release), so a later
    batch meets them. That is memory in the number of rows folded: the fold is for releases of
    texts, which are held in memory anyway (a file of texts, a batch of ``index``).
    """

    def __init__(self, key: bytes, ledger: Ledger) -> None:
        self.key = key
        self.ledger = ledger
        self.claimed: dict[str, Any] = {}

    def owners(self, X: Any, ids: Sequence[Any]) -> tuple[list[Any], list[str], list[Any]]:
        """(the record of every row, the tags of the rows with content ids, their owners).

        Rows whose ids are not content ids keep them and claim nothing: an id the data gives
        names its record.
        """
        out = list(ids)
        rows = [i for i, r in enumerate(out) if is_content_id(r)]
        if not rows:
            return out, [], []
        sub = X if len(rows) == len(out) else X[rows]
        tags = vector_alias_tags(self.key, sub)
        known: dict[str, Any] = dict(self.ledger.lookup_aliases(tags))
        known.update((t, self.claimed[t]) for t in set(tags) if t in self.claimed)
        owners = fold_owners(known, tags, [out[i] for i in rows])
        for i, o in zip(rows, owners, strict=True):
            out[i] = o
        self.claimed.update(zip(tags, owners, strict=True))
        return out, tags, owners


def refuse_variants(ids: Sequence[Any], *, where: str, first_row: int = 0) -> None:
    """:func:`refuse_repeated` for content ids, saying why variants are one record."""
    refuse_repeated(ids, where=where, first_row=first_row, why=VARIANTS_WHY, hint=VARIANTS_HINT)
