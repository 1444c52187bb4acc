"""Vector stores behind one small adapter interface: Chroma (embedded), Qdrant (local), FAISS.

A :class:`VectorStore` is a named collection of vectors with string ids and optional per-record
metadata, searched by similarity. The interface is four operations -- :meth:`~VectorStore.upsert`,
:meth:`~VectorStore.search`, :meth:`~VectorStore.count` and the collection's privembed
:attr:`~VectorStore.info` -- plus :meth:`~VectorStore.close`. An adapter for another store
(LanceDB, pgvector, ...) implements the six ``_``-prefixed hooks, about a page of code,
``_payloads`` to fetch sealed payloads by id and ``_all_ids`` to list the record ids
(:meth:`~VectorStore.store_ids`: a sealed collection fetches every payload).

Every collection records, next to its vectors, the privembed information needed to query it
correctly (``info``): the similarity it was built for (``metric``: ``"cosine"`` or raw inner
product ``"ip"``, see :mod:`privembed.integrations.query`), the dimension, the embedding model and
the protection metadata (mechanism configuration, guarantee, key id). Chroma and Qdrant keep it in
the collection's own metadata, FAISS in its index file.

Nothing here downloads anything: Chroma collections are created without an embedding function
(vectors are always given explicitly) and with anonymised telemetry off.

Scores returned by :meth:`VectorStore.search` are similarities, higher is better: the cosine for
``metric="cosine"``, the inner product for ``metric="ip"``.

Record ids are ints or strings and typed (:func:`privembed.keys.keyed.typed_id`): ``7`` and
``"7"`` are two records to the ledger, the keyed noise and the sealed payloads. Every store
keys records by a string, ``str(id)``, which is the same for both; so a collection keeps its
*numeric* ids -- those that print as an integer -- of one type, recorded in its info
(``numeric_ids``: ``"int"`` or ``"str"``, set by the first upsert of one), and refuses the other
type (:meth:`VectorStore.check_ids`) instead of letting ``"7"`` replace the record ``7``. Ids
that do not print as an integer (``"doc-7"``, ``"007"``) go with either. Search returns the
store id (:attr:`Hit.id`, a string); :meth:`VectorStore.record_id` gives the typed id back.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import itertools
import json
import mmap
import os
import re
import secrets
import uuid
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_choice, check_embeddings, check_int
from .query import METRICS

__all__ = [
    "STORES",
    "ChromaStore",
    "FaissStore",
    "Hit",
    "PgVectorStore",
    "QdrantStore",
    "VectorStore",
    "check_metadata",
    "open_store",
]

DEFAULT_COLLECTION = "privembed"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]$")
_INFO_KEY = "privembed"
_FORMAT = 1
#: metadata key of a record's sealed payload (base64); user metadata cannot use the prefix
PAYLOAD_KEY = "privembed_payload"
#: hits per Chroma query call (SQLite allows 32,766 variables per statement)
_CHROMA_MAX_HITS = 16_000
#: the info entry that records the type of a collection's numeric ids ("int" or "str")
_NUMERIC_IDS = "numeric_ids"
#: a string that is ``str(n)`` of an int ``n``: the store id an int id shares with a str id
_NUMERIC_ID = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: record id, similarity score, stored metadata, optionally the vector.

    ``payload`` is the record's sealed payload (AES-GCM ciphertext, :mod:`privembed.keys.payload`)
    when the collection stores them; ``text`` is filled in by an exact re-rank that opened it.
    """

    id: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)
    vector: NDArray[np.float32] | None = None
    payload: bytes | None = None
    text: str | None = None


@dataclass(frozen=True)
class Candidates:
    """The ``k`` candidates of a batch of queries as arrays: what an exact re-rank needs from a
    search (:meth:`VectorStore.candidates`), without a Python object per candidate.

    Attributes
    ----------
    rows : ndarray of int64, shape (nq, k)
        Each query's candidates, best protected score first, as rows of ``keys`` (``-1`` where
        the store had fewer than ``k`` records to return).
    scores : ndarray of float32, shape (nq, k)
        Their protected similarity (``-inf`` at the ``-1`` rows).
    keys : ndarray of int64, shape (u,)
        The distinct candidates of the batch, ascending: the store's own handle of each (a
        FAISS label; for the other stores a position in :attr:`hits`). A record that several
        queries of the batch fetch is one key: its payload is read and opened once.
    """

    rows: NDArray[np.int64]
    scores: NDArray[np.float32]
    keys: NDArray[np.int64]
    #: stores that search through :class:`Hit` objects: the hit of each key (payload included)
    hits: list[Hit] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.keys.size)

    @staticmethod
    def of_hits(fetched: list[list[Hit]], k: int) -> Candidates:
        """Candidates of a search that returned hits (a store without array search)."""
        slot: dict[str, int] = {}
        table: list[Hit] = []
        rows = np.full((len(fetched), k), -1, dtype=np.int64)
        scores = np.full((len(fetched), k), -np.inf, dtype=np.float32)
        for qi, hs in enumerate(fetched):
            for j, h in enumerate(hs[:k]):
                r = slot.get(h.id)
                if r is None:
                    r = slot[h.id] = len(table)
                    table.append(h)
                rows[qi, j] = r
                scores[qi, j] = h.score
        return Candidates(rows, scores, np.arange(len(table), dtype=np.int64), table)


def check_collection_name(name: Any) -> str:
    """A collection name every store accepts: 3-512 of ``[A-Za-z0-9._-]``, alphanumeric ends.

    Examples
    --------
    >>> check_collection_name("notes-v1")
    'notes-v1'
    >>> check_collection_name("a/b")
    Traceback (most recent call last):
    ...
    ValueError: collection must be 3-512 characters from [A-Za-z0-9._-] starting and ending with a letter or digit, got collection='a/b'.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            "collection must be 3-512 characters from [A-Za-z0-9._-] starting and ending with "
            f"a letter or digit, got collection={name!r}."
        )
    return name


def check_metadata(metadata: Any, n: int) -> list[dict[str, Any]] | None:
    """``n`` flat metadata dicts as a store keeps them (``None`` values dropped, NumPy scalars
    as Python ones; ``None`` entries as ``{}``), or ``None`` for no metadata.

    Raises
    ------
    privembed.DataError
        The wrong number of entries.
    TypeError, ValueError
        An entry that is not a dict, a key that is not a string or uses the reserved
        ``privembed`` prefix, a value that is not a str, int, float, bool or None.
    """
    if metadata is None:
        return None
    rows = list(metadata)
    if len(rows) != n:
        raise DataError(f"metadata has {len(rows)} entries but there are {n} vectors.")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(rows):
        if m is None:
            out.append({})
            continue
        if not isinstance(m, Mapping):
            raise TypeError(f"metadata[{i}] must be a dict or None, got {type(m).__name__}.")
        clean: dict[str, Any] = {}
        for k, v in m.items():
            if not isinstance(k, str) or k.startswith(_INFO_KEY):
                raise ValueError(
                    f"metadata keys must be strings not starting with {_INFO_KEY!r}, got {k!r}."
                )
            if isinstance(v, np.generic):
                v = v.item()
            if v is not None and not isinstance(v, str | int | float | bool):
                raise TypeError(
                    f"metadata values must be str, int, float, bool or None, got {k}={v!r}."
                )
            if v is not None:
                clean[k] = v
        out.append(clean)
    return out


def _is_int_id(rid: Any) -> bool:
    """An int record id (Python or NumPy integer, not a bool), as :func:`typed_id` types it."""
    return type(rid) is int or (
        isinstance(rid, int | np.integer) and not isinstance(rid, bool | np.bool_)
    )


def _numeric_kinds(ids: Sequence[Any], keys: list[str]) -> tuple[int | None, str | None]:
    """The first int id and the first str id that prints as an integer (``None``: none), a
    str id named ``str(n)`` of an int ``n`` of ``ids`` preferred (the pair that collides)."""
    first_int: int | None = None
    first_str: str | None = None
    ints: set[str] = set()
    strs: list[Any] = []
    for rid, key in zip(ids, keys, strict=True):
        if _is_int_id(rid):
            ints.add(key)
            if first_int is None:
                first_int = int(rid)
        elif key and key[0] in "-0123456789" and _NUMERIC_ID.fullmatch(key):
            strs.append(rid)
    if strs:
        first_str = str(next((r for r in strs if str(r) in ints), strs[0]))
        if first_str in ints:
            first_int = int(first_str)
    return first_int, first_str


class VectorStore(abc.ABC):
    """A collection of vectors in a vector database (abstract adapter).

    Parameters
    ----------
    path : str or Path
        Where the database lives (a folder; created if missing).
    collection : str
        Collection name (see :func:`check_collection_name`).
    metric : {"cosine", "ip"}, optional
        Similarity for a new collection (default ``"cosine"``). For an existing collection it
        must match the stored one (``None`` accepts it).
    create : bool, default True
        Create the collection if it does not exist (on the first upsert); otherwise a missing
        collection is an error.

    Notes
    -----
    Subclasses implement ``_open`` (connect; return the stored info or None), ``_create`` (make
    the collection for a dimension), ``_write_info``, ``_upsert``, ``_search``, ``_count`` and
    ``_payloads`` (payloads by id) and ``_all_ids`` (every store id), and may override
    ``close``.
    """

    name: ClassVar[str] = "store"

    def __init__(
        self,
        path: str | Path,
        collection: str = DEFAULT_COLLECTION,
        *,
        metric: str | None = None,
        create: bool = True,
    ) -> None:
        self.path = Path(path)
        self.collection = check_collection_name(collection)
        if metric is not None:
            check_choice("metric", metric, METRICS)
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(f"store path must be a folder, got a file: {self.path}")
        if not create and not self.path.exists():
            raise FileNotFoundError(f"{self.name} store not found: {self.path}")
        self._closed = False
        stored = self._open()
        if stored is None:
            if not create:
                listing = self._listing()
                self.close()
                raise ValueError(
                    f"{self.path} has no {self.name} collection {self.collection!r}{listing}."
                )
            self._exists = False
            self._info: dict[str, Any] = {
                "format": _FORMAT,
                "store": self.name,
                "metric": metric or "cosine",
            }
        else:
            self._exists = True
            if stored.get("metric") not in METRICS:
                self.close()
                raise ValueError(
                    f"{self.name} collection {self.collection!r} in {self.path} was not created "
                    "by privembed (no privembed metadata); use a new collection name."
                )
            if metric is not None and stored["metric"] != metric:
                self.close()
                raise ValueError(
                    f"{self.name} collection {self.collection!r} uses metric "
                    f"{stored['metric']!r}, not {metric!r}; use a new collection name."
                )
            self._info = dict(stored)

    # ---- what adapters implement -------------------------------------------------------------
    @abc.abstractmethod
    def _open(self) -> dict[str, Any] | None:
        """Connect; return the stored privembed info of the collection, or None if missing."""

    @abc.abstractmethod
    def _create(self, dim: int) -> None:
        """Create the collection for vectors of dimension ``dim`` (with ``self._info``)."""

    @abc.abstractmethod
    def _write_info(self) -> None:
        """Persist ``self._info`` in an existing collection."""

    @abc.abstractmethod
    def _upsert(
        self,
        ids: list[str],
        X: NDArray[np.float32],
        metadata: list[dict[str, Any]] | None,
        payloads: list[bytes] | None,
    ) -> None:
        """Insert or replace vectors (ids already strings, unique; X float32 (n, dim)), with
        their sealed payloads (replacing a record without one drops its old payload)."""

    @abc.abstractmethod
    def _search(
        self, Q: NDArray[np.float32], k: int, with_vectors: bool, with_payloads: bool
    ) -> list[list[Hit]]:
        """Top-``k`` hits per query row (``k`` <= count); payloads may be left out when
        ``with_payloads`` is False."""

    @abc.abstractmethod
    def _count(self) -> int:
        """Number of vectors in an existing collection."""

    def _payloads(self, ids: list[str]) -> list[bytes | None]:
        """The stored payload of each id (``None``: no payload, or no such record), in one
        batch. Adapters that store payloads implement it (Chroma and Qdrant read the base64
        under :data:`PAYLOAD_KEY` in the records' metadata, FAISS its payload file)."""
        raise NotImplementedError(f"the {self.name} store cannot fetch payloads by id.")

    def _all_ids(self) -> list[str]:
        """Every store id of an existing collection, in any order (paged where the store pages:
        Chroma's get, Qdrant's scroll)."""
        raise NotImplementedError(f"the {self.name} store cannot list its record ids.")

    def _listing(self) -> str:
        """`` (collections: a, b)`` for error messages (empty if unknown)."""
        return ""

    # ---- the interface -----------------------------------------------------------------------
    @property
    def metric(self) -> str:
        """The similarity the collection is built for: ``"cosine"`` or ``"ip"``."""
        return str(self._info["metric"])

    @property
    def dim(self) -> int | None:
        """Vector dimension (``None`` before the first upsert)."""
        d = self._info.get("dim")
        return None if d is None else int(d)

    @property
    def info(self) -> dict[str, Any]:
        """The privembed information stored with the collection (a copy)."""
        return json.loads(json.dumps(self._info))

    def update_info(self, **entries: Any) -> None:
        """Add JSON-serialisable entries to :attr:`info` (``metric``/``dim``/``store`` are fixed)."""
        fixed = {"metric", "dim", "store", "format", _NUMERIC_IDS} & set(entries)
        if fixed:
            raise ValueError(f"info entries {sorted(fixed)} are set by the store itself.")
        try:
            json.dumps(entries)
        except TypeError as exc:
            raise TypeError(f"info entries must be JSON-serialisable: {exc}") from None
        self._info.update(entries)
        if self._exists:
            self._write_info()

    def upsert(
        self,
        ids: Sequence[Any],
        vectors: Any,
        metadata: Any = None,
        *,
        payloads: Sequence[bytes] | None = None,
    ) -> None:
        """Insert vectors, replacing any record with the same id (vector and metadata).

        Parameters
        ----------
        ids : sequence of str or int, length n
            Record ids (unique within the call), kept as ``str(id)``: a collection's ids that
            print as an integer are all ints or all strings (:meth:`check_ids`).
        vectors : array_like, shape (n, d)
        metadata : sequence of dict or None, length n, optional
            Flat per-record metadata (str, int, float, bool values; ``None`` values dropped).
        payloads : sequence of bytes, length n, optional
            Sealed payloads (:mod:`privembed.keys.payload`), stored beside each vector and returned
            in :attr:`Hit.payload` (Chroma and Qdrant: base64 under a reserved metadata key;
            FAISS: raw bytes in a file beside the index, read by id).

        Raises
        ------
        privembed.DataError
            Bad vectors (NaN/inf), wrong dimension, duplicate ids, an int and a str id that
            print alike (``7`` and ``"7"``, in the call or with the collection's numeric ids),
            metadata of the wrong length. Nothing is written.
        """
        self._check_open()
        X, _ = check_embeddings(vectors, name="vectors", dim=self.dim, allow_zero=True)
        n = X.shape[0]
        id_list, numeric = self._store_ids(ids)
        if len(id_list) != n:
            raise DataError(f"ids has {len(id_list)} entries but there are {n} vectors.")
        meta = check_metadata(metadata, n)
        blobs: list[bytes] | None = None
        if payloads is not None:
            blobs = [bytes(b) for b in payloads]
            if len(blobs) != n:
                raise DataError(f"payloads has {len(blobs)} entries but there are {n} vectors.")
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        if numeric is not None and _NUMERIC_IDS not in self._info:
            # recorded before the records, so that no numeric record is ever stored untyped
            self._info[_NUMERIC_IDS] = numeric
            if self._exists:
                self._write_info()
        if not self._exists:
            self._info["dim"] = int(X.shape[1])
            self._create(int(X.shape[1]))
            self._exists = True
        self._upsert(id_list, X32, meta, blobs)

    @property
    def numeric_ids(self) -> str | None:
        """The type of the collection's ids that print as an integer: ``"int"``, ``"str"``, or
        ``None`` before the first such id (and for collections written before privembed
        recorded it, until their next upsert of one)."""
        kind = self._info.get(_NUMERIC_IDS)
        return None if kind is None else str(kind)

    def check_ids(self, ids: Sequence[Any]) -> list[str]:
        """The store ids (``str(id)``) of record ids about to be upserted, checked without
        writing anything.

        Two ids the ledger and the payloads keep apart must not become one store id: ``7``
        and ``"7"`` are refused in one call, and a collection whose numeric ids are ints
        refuses ``"7"`` (and one of str ids refuses ``7``) -- one line naming both ids.

        Raises
        ------
        privembed.DataError
            Duplicate ids, or an int and a str id that print alike.

        Examples
        --------
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp, FaissStore(tmp, "demo") as s:
        ...     s.upsert([7, 8], np.eye(2))
        ...     s.check_ids(["7"])
        Traceback (most recent call last):
        ...
        privembed.core._validation.DataError: faiss collection 'demo' keeps its numeric record ids as ints: the str id '7' would share the store id '7' with the int id 7 (use one type; the ledger and the payloads keep 7 and '7' apart).
        """
        self._check_open()
        return self._store_ids(ids)[0]

    def _store_ids(self, ids: Sequence[Any]) -> tuple[list[str], str | None]:
        """:meth:`check_ids`, and the type of the call's numeric ids (``None``: none)."""
        rids = list(ids)
        keys = [str(i) for i in rids]
        first_int, first_str = _numeric_kinds(rids, keys)
        if first_int is not None and first_str is not None:
            if str(first_int) == str(first_str):
                raise DataError(
                    f"record ids {first_int!r} (int) and {first_str!r} (str) would share the "
                    f"store id {str(first_str)!r}; a collection keeps its numeric ids of one "
                    "type (the ledger and the payloads keep them apart)."
                )
            raise DataError(
                f"record ids {first_int!r} (int) and {first_str!r} (str) mix types: a "
                "collection keeps its numeric ids (those that print as an integer) of one "
                f"type, so that {first_int!r} and {str(first_int)!r} never share a store id."
            )
        if len(set(keys)) != len(keys):
            raise DataError("ids must be unique within one upsert.")
        numeric = "int" if first_int is not None else "str" if first_str is not None else None
        held = self._info.get(_NUMERIC_IDS)
        if numeric is not None and held is not None and numeric != held:
            got = first_int if first_int is not None else first_str
            n = int(str(got))
            other = str(n) if numeric == "int" else n
            raise DataError(
                f"{self.name} collection {self.collection!r} keeps its numeric record ids as "
                f"{held}s: the {numeric} id {got!r} would share the store id {str(n)!r} with "
                f"the {held} id {other!r} (use one type; the ledger and the payloads keep "
                f"{n!r} and {str(n)!r} apart)."
            )
        return keys, numeric

    def record_id(self, store_id: str) -> int | str:
        """The record id a store id (:attr:`Hit.id`) stands for, typed: ``7`` for ``"7"`` in a
        collection whose numeric ids are ints, else the string itself.

        Examples
        --------
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp, FaissStore(tmp, "demo") as s:
        ...     s.upsert([7, 8], np.eye(2))
        ...     hit = s.search([1.0, 0.0], k=1)[0][0]
        ...     hit.id, s.record_id(hit.id)
        ('7', 7)
        """
        if self._info.get(_NUMERIC_IDS) == "int" and _NUMERIC_ID.fullmatch(store_id):
            return int(store_id)
        return store_id

    def search(
        self, vectors: Any, k: int = 10, *, with_vectors: bool = False, with_payloads: bool = True
    ) -> list[list[Hit]]:
        """The ``k`` most similar records for each query vector (best first).

        Parameters
        ----------
        vectors : array_like, shape (nq, d) or (d,)
            Query vectors, already treated for the collection
            (:class:`~privembed.integrations.query.QueryTreatment`).
        k : int, >= 1
            Hits per query (fewer if the collection is smaller).
        with_vectors : bool
            Also return the stored vectors.
        with_payloads : bool, default True
            Return each hit's sealed payload (:attr:`Hit.payload`); ``False`` leaves them out
            (the FAISS store then reads none; :meth:`payloads` fetches them by id later).

        Returns
        -------
        list of list of Hit
            One list per query vector.
        """
        self._check_open()
        k = check_int("k", k, ge=1)
        Q, _ = check_embeddings(vectors, name="query", dim=self.dim, allow_zero=True)
        n = self.count()
        if n == 0:
            return [[] for _ in range(Q.shape[0])]
        hits = self._search(
            np.ascontiguousarray(Q, dtype=np.float32), min(k, n), with_vectors, with_payloads
        )
        return [[_with_payload(h, with_payloads) for h in hs] for hs in hits]

    def candidates(self, vectors: Any, k: int) -> Candidates:
        """The ``k`` most similar records of each query as arrays (:class:`Candidates`), for a
        re-rank that reads their payloads (:meth:`payload_block`) and keeps a few
        (:meth:`candidate_hits`). FAISS answers from its arrays; the other stores through
        their hits.

        Examples
        --------
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp, FaissStore(tmp, "demo") as s:
        ...     s.upsert(["a", "b", "c"], np.eye(3), payloads=[b"pa", b"pb", b"pc"])
        ...     c = s.candidates(np.array([[1.0, 0.2, 0.0], [0.0, 1.0, 0.1]]), k=2)
        ...     block, off = s.payload_block(c)
        ...     c.rows.tolist(), s.candidate_ids(c), block, off.tolist()
        ([[0, 1], [1, 2]], ['a', 'b', 'c'], b'papbpc', [0, 2, 4, 6])
        """
        self._check_open()
        k = check_int("k", k, ge=1)
        Q, _ = check_embeddings(vectors, name="query", dim=self.dim, allow_zero=True)
        n = self.count()
        if n == 0:
            return Candidates(
                np.full((Q.shape[0], 0), -1, dtype=np.int64),
                np.zeros((Q.shape[0], 0), dtype=np.float32),
                np.zeros(0, dtype=np.int64),
                [],
            )
        return self._candidates(np.ascontiguousarray(Q, dtype=np.float32), min(k, n))

    def _candidates(self, Q: NDArray[np.float32], k: int) -> Candidates:
        hits = self._search(Q, k, False, True)
        return Candidates.of_hits([[_with_payload(h) for h in hs] for hs in hits], k)

    @property
    def approximate(self) -> bool:
        """Whether the store's search is approximate *and* its recall is measured
        (:meth:`search_recall`): a re-rank planned for a target recall then folds that recall
        into k'. ``False`` here: an exact search, or one whose recall privembed cannot
        measure (Chroma's HNSW)."""
        return False

    def search_recall(self, vectors: Any, k: int) -> float:
        """Mean share of each query's exact top ``k`` that :meth:`search` returns at depth
        ``k`` (1 for an exact search)."""
        return 1.0

    def payload_block(self, candidates: Candidates) -> tuple[bytes | memoryview, NDArray[np.int64]]:
        """The sealed payloads of ``candidates.keys``, back to back, and their offsets
        (``u + 1``; an empty slice: the record has no payload), read in one batch.

        What :meth:`privembed.keys.payload.PayloadCodec.open_block` opens.
        """
        self._check_open()
        assert candidates.hits is not None
        blobs = [h.payload or b"" for h in candidates.hits]
        return _joined(blobs)

    def candidate_ids(self, candidates: Candidates) -> list[str]:
        """The store id (:attr:`Hit.id`) of each of ``candidates.keys``."""
        self._check_open()
        assert candidates.hits is not None
        return [h.id for h in candidates.hits]

    def candidate_hits(
        self, candidates: Candidates, keys: Sequence[int], scores: Sequence[float]
    ) -> list[Hit]:
        """Hits (id, score, metadata; no payload) of rows ``keys`` of ``candidates.keys``,
        with the given ``scores``: what a re-rank returns for the few it keeps."""
        self._check_open()
        assert candidates.hits is not None
        table = candidates.hits
        return [
            Hit(table[r].id, float(sc), table[r].metadata)
            for r, sc in zip(keys, scores, strict=True)
        ]

    def payloads(self, ids: Sequence[Any]) -> list[bytes | None]:
        """The sealed payload of each record id, in order (``None`` where a record has none or
        does not exist), fetched in one batch without reading any other record's payload.

        Examples
        --------
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp, FaissStore(tmp, "demo") as s:
        ...     s.upsert(["a", "b"], np.eye(2), payloads=[b"sealed-a", b"sealed-b"])
        ...     s.payloads(["b", "zz", "a"])
        [b'sealed-b', None, b'sealed-a']

        ``ids`` are record ids or the store ids that :meth:`search` returns (``"7"`` is the
        record ``7`` of a collection whose numeric ids are ints); an int id names no record
        in a collection whose numeric ids are strings.
        """
        self._check_open()
        rids = list(ids)
        id_list = [str(i) for i in rids]
        if not self._exists or not id_list:
            return [None] * len(id_list)
        uniq = list(dict.fromkeys(id_list))  # an id asked twice is fetched once (Chroma refuses)
        found = dict(zip(uniq, self._payloads(uniq), strict=True))
        got = [found[i] for i in id_list]
        if self._info.get(_NUMERIC_IDS) == "str":
            got = [None if _is_int_id(i) else b for i, b in zip(rids, got, strict=True)]
        return got

    def store_ids(self) -> list[str]:
        """Every record's store id (:attr:`Hit.id`), sorted: what fetches every payload of a
        sealed collection (:class:`privembed.search.sealed.SealedIndex`), without reading a
        vector or a payload.

        Examples
        --------
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp, FaissStore(tmp, "demo") as s:
        ...     s.upsert(["b", "a"], np.eye(2))
        ...     s.upsert(["b"], np.eye(2)[:1])  # replaced, still one record
        ...     s.store_ids()
        ['a', 'b']
        """
        self._check_open()
        return sorted(self._all_ids()) if self._exists else []

    def count(self) -> int:
        """Number of vectors in the collection."""
        self._check_open()
        return self._count() if self._exists else 0

    def close(self) -> None:
        """Release the database (idempotent)."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.name} store {self.path} is closed.")

    def __enter__(self) -> VectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self.path)!r}, collection={self.collection!r}, "
            f"metric={self.metric!r})"
        )


def _with_payload(h: Hit, keep: bool = True) -> Hit:
    """Move a sealed payload out of the metadata into :attr:`Hit.payload` (``keep=False``:
    drop it)."""
    if PAYLOAD_KEY not in h.metadata:
        return h
    meta = dict(h.metadata)
    raw = meta.pop(PAYLOAD_KEY)
    blob = _decode_payload(h.id, raw) if keep else None
    return Hit(h.id, h.score, meta, h.vector, blob, h.text)  # not replace(): per hit, ~5x dearer


def _split_meta(payload: Mapping[str, Any] | None, hidden: str) -> dict[str, Any]:
    return {k: v for k, v in (payload or {}).items() if k != hidden}


def _with_payload_meta(
    metadata: list[dict[str, Any]] | None, payloads: list[bytes] | None, n: int
) -> list[dict[str, Any]] | None:
    """Metadata with each payload as base64 under :data:`PAYLOAD_KEY` (Chroma, Qdrant)."""
    if payloads is None:
        return metadata
    return [
        {**(m or {}), PAYLOAD_KEY: base64.b64encode(b).decode("ascii")}
        for m, b in zip(metadata or [{} for _ in range(n)], payloads, strict=True)
    ]


def _joined(blobs: list[bytes]) -> tuple[bytes, NDArray[np.int64]]:
    off = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in blobs], out=off[1:])
    return b"".join(blobs), off


def _decode_payload(rid: str, raw: Any) -> bytes | None:
    if raw is None:
        return None
    try:
        return base64.b64decode(str(raw), validate=True)
    except (ValueError, TypeError):
        raise DataError(f"the stored payload of record {rid!r} is not valid base64.") from None


# ---------------------------------------------------------------------------------------------
# Chroma (embedded PersistentClient)
# ---------------------------------------------------------------------------------------------


class ChromaStore(VectorStore):
    """A collection in an embedded, persistent Chroma database (no server).

    Vectors are always passed explicitly (the collection has no embedding function, so Chroma
    never loads or downloads a model) and telemetry is off. ``metric`` maps to Chroma's HNSW
    ``space`` (``"cosine"`` or ``"ip"``); Chroma returns distances ``1 - similarity``, converted
    back here. Chroma's HNSW search is approximate (``ef_search=100``).
    """

    name = "chroma"

    def _open(self) -> dict[str, Any] | None:
        chromadb = require("chromadb", "integrations", purpose="the Chroma vector store")
        from chromadb.config import Settings

        self.path.mkdir(parents=True, exist_ok=True)
        self._client = chromadb.PersistentClient(
            path=str(self.path), settings=Settings(anonymized_telemetry=False)
        )
        try:
            self._col = self._client.get_collection(self.collection, embedding_function=None)
        except Exception as exc:
            if type(exc).__name__ == "NotFoundError" or "does not exist" in str(exc):
                self._col = None
                return None
            raise
        raw = (self._col.metadata or {}).get(_INFO_KEY)
        try:
            return dict(json.loads(raw)) if isinstance(raw, str) else {}
        except json.JSONDecodeError:
            return {}

    def _listing(self) -> str:
        try:
            names = sorted(c.name for c in self._client.list_collections())
        except Exception:  # pragma: no cover - listing is only for the message
            return ""
        return f" (collections: {', '.join(names) or 'none'})"

    def _create(self, dim: int) -> None:
        self._col = self._client.create_collection(
            self.collection,
            embedding_function=None,
            configuration={"hnsw": {"space": self.metric}},
            metadata={_INFO_KEY: json.dumps(self._info, sort_keys=True)},
        )

    def _write_info(self) -> None:
        assert self._col is not None
        self._col.modify(metadata={_INFO_KEY: json.dumps(self._info, sort_keys=True)})

    def _upsert(
        self,
        ids: list[str],
        X: NDArray[np.float32],
        metadata: list[dict[str, Any]] | None,
        payloads: list[bytes] | None,
    ) -> None:
        assert self._col is not None
        metadata = _with_payload_meta(metadata, payloads, len(ids))
        step = max(1, int(self._client.get_max_batch_size()))
        for s in range(0, len(ids), step):
            metas = None
            if metadata is not None:
                metas = [m or None for m in metadata[s : s + step]]
            # Chroma's upsert merges metadata; delete + add replaces records like the others
            existing = self._col.get(ids=ids[s : s + step], include=[])["ids"]
            if existing:
                self._col.delete(ids=existing)
            self._col.add(ids=ids[s : s + step], embeddings=X[s : s + step], metadatas=metas)

    def _search(
        self, Q: NDArray[np.float32], k: int, with_vectors: bool, with_payloads: bool
    ) -> list[list[Hit]]:
        assert self._col is not None
        include = ["distances", "metadatas"] + (["embeddings"] if with_vectors else [])
        out: list[list[Hit]] = []
        # Chroma fetches every hit's metadata in one SQL statement: keep queries x k under
        # SQLite's limit on variables
        step = max(1, _CHROMA_MAX_HITS // k)
        for s in range(0, Q.shape[0], step):
            out.extend(self._search_chunk(Q[s : s + step], k, include, with_vectors))
        return out

    def _search_chunk(
        self, Q: NDArray[np.float32], k: int, include: list[str], with_vectors: bool
    ) -> list[list[Hit]]:
        assert self._col is not None
        res = self._col.query(query_embeddings=Q, n_results=k, include=include)
        out: list[list[Hit]] = []
        for qi, ids in enumerate(res["ids"]):
            dists = res["distances"][qi]
            metas = res["metadatas"][qi] if res.get("metadatas") else [None] * len(ids)
            vecs = res["embeddings"][qi] if with_vectors else [None] * len(ids)
            out.append(
                [
                    Hit(
                        str(i),
                        1.0 - float(dist),
                        dict(m or {}),
                        None if v is None else np.asarray(v, dtype=np.float32),
                    )
                    for i, dist, m, v in zip(ids, dists, metas, vecs, strict=True)
                ]
            )
        return out

    def _payloads(self, ids: list[str]) -> list[bytes | None]:
        assert self._col is not None
        found: dict[str, bytes | None] = {}
        for s in range(0, len(ids), _CHROMA_MAX_HITS):
            res = self._col.get(ids=ids[s : s + _CHROMA_MAX_HITS], include=["metadatas"])
            for rid, m in zip(res["ids"], res["metadatas"] or [], strict=True):
                found[str(rid)] = _decode_payload(str(rid), (m or {}).get(PAYLOAD_KEY))
        return [found.get(i) for i in ids]

    def _all_ids(self) -> list[str]:
        assert self._col is not None
        out: list[str] = []
        while True:
            got = self._col.get(include=[], limit=_CHROMA_MAX_HITS, offset=len(out))["ids"]
            out.extend(str(i) for i in got)
            if len(got) < _CHROMA_MAX_HITS:
                return out

    def _count(self) -> int:
        assert self._col is not None
        return int(self._col.count())

    def close(self) -> None:
        if not self._closed and getattr(self, "_client", None) is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        super().close()


# ---------------------------------------------------------------------------------------------
# Qdrant (local mode)
# ---------------------------------------------------------------------------------------------

#: namespace of the UUIDs that stand for record ids (Qdrant point ids are ints or UUIDs)
_QDRANT_NS = uuid.UUID("6f1c3a52-5c1e-4f7a-9d3e-1b0e6c1f2a77")
_QDRANT_ID = "privembed_id"


class QdrantStore(VectorStore):
    """A collection in a local-mode Qdrant database (``QdrantClient(path=...)``, no server).

    Record ids become UUID5 point ids (Qdrant accepts only integers and UUIDs); the original id
    is kept in the payload under ``privembed_id``. ``metric`` maps to ``Distance.COSINE`` /
    ``Distance.DOT``. Local mode allows one client per folder at a time and searches exactly.
    """

    name = "qdrant"

    def _open(self) -> dict[str, Any] | None:
        qc = require("qdrant_client", "integrations", purpose="the Qdrant vector store")
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self._client = qc.QdrantClient(path=str(self.path))
        except RuntimeError as exc:
            raise ValueError(f"cannot open Qdrant store {self.path}: {exc}") from None
        if not self._client.collection_exists(self.collection):
            return None
        meta = self._client.get_collection(self.collection).config.metadata or {}
        raw = meta.get(_INFO_KEY)
        if isinstance(raw, str):
            try:
                return dict(json.loads(raw))
            except json.JSONDecodeError:
                return {}
        return dict(raw) if isinstance(raw, dict) else {}

    def _listing(self) -> str:
        names = sorted(c.name for c in self._client.get_collections().collections)
        return f" (collections: {', '.join(names) or 'none'})"

    def _distance(self) -> Any:
        from qdrant_client import models

        return models.Distance.COSINE if self.metric == "cosine" else models.Distance.DOT

    def _create(self, dim: int) -> None:
        from qdrant_client import models

        self._client.create_collection(
            self.collection,
            vectors_config=models.VectorParams(size=dim, distance=self._distance()),
            metadata={_INFO_KEY: json.dumps(self._info, sort_keys=True)},
        )

    def _write_info(self) -> None:
        self._client.update_collection(
            self.collection, metadata={_INFO_KEY: json.dumps(self._info, sort_keys=True)}
        )

    def _upsert(
        self,
        ids: list[str],
        X: NDArray[np.float32],
        metadata: list[dict[str, Any]] | None,
        payloads: list[bytes] | None,
    ) -> None:
        from qdrant_client import models

        metadata = _with_payload_meta(metadata, payloads, len(ids))
        step = 1024
        for s in range(0, len(ids), step):
            chunk = ids[s : s + step]
            metas = metadata[s : s + step] if metadata is not None else [{}] * len(chunk)
            self._client.upsert(
                self.collection,
                points=models.Batch(
                    ids=[str(uuid.uuid5(_QDRANT_NS, i)) for i in chunk],
                    vectors=X[s : s + step].tolist(),
                    payloads=[{**m, _QDRANT_ID: i} for i, m in zip(chunk, metas, strict=True)],
                ),
            )

    def _search(
        self, Q: NDArray[np.float32], k: int, with_vectors: bool, with_payloads: bool
    ) -> list[list[Hit]]:
        from qdrant_client import models

        reqs = [
            models.QueryRequest(
                query=q.tolist(), limit=k, with_payload=True, with_vector=with_vectors
            )
            for q in Q
        ]
        res = self._client.query_batch_points(self.collection, requests=reqs)
        out: list[list[Hit]] = []
        for r in res:
            hits = []
            for p in r.points:
                payload = dict(p.payload or {})
                vec = None
                if with_vectors and p.vector is not None:
                    vec = np.asarray(p.vector, dtype=np.float32)
                hits.append(
                    Hit(
                        str(payload.get(_QDRANT_ID)),
                        float(p.score),
                        _split_meta(payload, _QDRANT_ID),
                        vec,
                    )
                )
            out.append(hits)
        return out

    def _payloads(self, ids: list[str]) -> list[bytes | None]:
        found: dict[str, bytes | None] = {}
        step = 1024
        for s in range(0, len(ids), step):
            points = self._client.retrieve(
                self.collection,
                ids=[str(uuid.uuid5(_QDRANT_NS, i)) for i in ids[s : s + step]],
                with_payload=[_QDRANT_ID, PAYLOAD_KEY],
                with_vectors=False,
            )
            for p in points:
                payload = dict(p.payload or {})
                rid = str(payload.get(_QDRANT_ID))
                found[rid] = _decode_payload(rid, payload.get(PAYLOAD_KEY))
        return [found.get(i) for i in ids]

    def _all_ids(self) -> list[str]:
        out: list[str] = []
        offset: Any = None
        while True:
            points, offset = self._client.scroll(
                self.collection, limit=1024, offset=offset, with_payload=[_QDRANT_ID],
                with_vectors=False,
            )  # fmt: skip
            out.extend(str((p.payload or {}).get(_QDRANT_ID)) for p in points)
            if offset is None:
                return out

    def _count(self) -> int:
        return int(self._client.count(self.collection, exact=True).count)

    def close(self) -> None:
        if not self._closed and getattr(self, "_client", None) is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        super().close()


# ---------------------------------------------------------------------------------------------
# FAISS (one local index file, payloads in a file beside it)
# ---------------------------------------------------------------------------------------------

#: layout of the index file this version writes. Layout 1 (privembed before 0.x of issue 27)
#: kept each record's payload as base64 inside its metadata, in a fixed-width string array
#: (every record as wide as the longest): it is still read, and rewritten as layout 2 on the
#: next save or by :meth:`FaissStore.compact`.
FAISS_LAYOUT = 2
#: searches of fewer queries than this run FAISS on one OpenMP thread: for a flat index FAISS
#: parallelises over queries below its BLAS threshold (20), so a lone query gains nothing
#: from a second thread but pays for waking it (docs/benchmarks.md, re-rank latency)
FAISS_ONE_THREAD_BELOW = 20
#: an HNSW index searches a depth of k with efSearch = this factor times k (at least
#: :data:`HNSW_EF_MIN`): its recall of the exact top k' is measured and folded into k'. The
#: floor keeps shallow searches near-exact: on 20,000 real sentence embeddings (Laplace
#: epsilon 1,000, k' = 15) efSearch 64 found 0.978 of real queries' exact top k' and re-ranked
#: to the Flat index's top 10 on 24 of 30 queries, 256 found all of it (30 of 30)
HNSW_EF_FACTOR = 2.0
#: payloads a re-rank reads through one memory map of the payload file: the pages a map
#: touches count in the process' memory until it is closed, and on Linux 6.18 each payload
#: touched at random in a 1.66 GB payload file (1M records) brought ~640 kB in with it despite
#: MADV_RANDOM (1,000 payloads through one map: +633 MB peak RSS; through maps of 64: +67 MB;
#: benchmarks/bench_memory.py), so a map covers few payloads
PAYLOAD_MAP_CHUNK = 64
HNSW_EF_MIN = 256
#: the zip member of a layout-2 index file that holds FAISS's own serialisation of the index
_INDEX_MEMBER = "index.faiss"


@contextlib.contextmanager
def _faiss_threads(faiss: Any, nq: int) -> Any:
    """FAISS on one OpenMP thread for a search of few queries, in the calling thread only
    (libgomp keeps the thread count per thread), restored afterwards."""
    if nq >= FAISS_ONE_THREAD_BELOW:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _gather(
    src: Any,
    starts: NDArray[np.int64],
    lens: NDArray[np.int64],
    off: NDArray[np.int64],
    out: NDArray[np.uint8],
) -> None:
    """``out[off[i] : off[i] + lens[i]] = src[starts[i] : starts[i] + lens[i]]`` for every i
    (``starts`` ascending): one gather of whole rows per distinct length, in source order (the
    views of ``src`` end with the call, so a memory map can close after it)."""
    buf = np.frombuffer(src, dtype=np.uint8)
    windows = np.lib.stride_tricks.sliding_window_view
    for length in np.unique(lens[lens > 0]).tolist():
        rows = np.flatnonzero(lens == length)
        windows(out, length, writeable=True)[off[rows]] = windows(buf, length)[starts[rows]]
    del buf


def _join_utf8(items: Sequence[str]) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """Strings as one UTF-8 byte array and offsets (n + 1): no fixed-width padding."""
    encoded = [t.encode("utf-8", "surrogatepass") for t in items]
    off = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=off[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), off


def _split_utf8(blob: NDArray[Any], off: NDArray[Any]) -> list[str]:
    raw = np.asarray(blob, dtype=np.uint8).tobytes()
    bounds = np.asarray(off, dtype=np.int64).tolist()
    if len(bounds) < 1 or bounds[0] != 0 or bounds[-1] != len(raw):
        raise ValueError("string offsets do not match their bytes")
    seen: dict[bytes, str] = {}  # equal strings share one object (most metadata is "{}")
    out = []
    for a, b in itertools.pairwise(bounds):
        chunk = raw[a:b]
        text = seen.get(chunk) if b - a <= 8 else None
        if text is None:
            text = chunk.decode("utf-8", "surrogatepass")
            if b - a <= 8:
                seen[chunk] = text
        out.append(text)
    return out


class _Strings:
    """A list of strings kept as UTF-8 bytes and offsets until one is changed: a store opened
    to search decodes the ids and metadata of its hits only (at 117,659 records the decoded
    lists and their index cost about 15 MiB of the store's memory)."""

    __slots__ = ("_items", "_off", "_raw")

    def __init__(self, raw: bytes = b"", off: NDArray[Any] | None = None) -> None:
        self._off = np.zeros(1, dtype=np.int64) if off is None else np.asarray(off, np.int64)
        if (
            self._off.ndim != 1
            or self._off[0] != 0
            or self._off[-1] != len(raw)
            or (np.diff(self._off) < 0).any()
        ):
            raise ValueError("string offsets do not match their bytes")
        self._raw = raw
        self._items: list[str] | None = None

    @classmethod
    def of(cls, items: list[str]) -> _Strings:
        out = cls()
        out._items = items
        return out

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else self._off.size - 1

    def __getitem__(self, i: int) -> str:
        if self._items is not None:
            return self._items[i]
        if not 0 <= i < self._off.size - 1:
            raise IndexError(i)
        a, b = int(self._off[i]), int(self._off[i + 1])
        return self._raw[a:b].decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        if self._items is not None:
            return iter(self._items)
        return (self[i] for i in range(len(self)))

    def take(self, positions: Sequence[int]) -> list[str]:
        """The strings at ``positions`` (valid indices), decoded in one pass: a search's hits
        (``self[i]`` per hit costs a numpy scalar read and a bounds check each)."""
        if self._items is not None:
            items = self._items
            return [items[i] for i in positions]
        idx = np.asarray(positions, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self._off.size - 1):
            raise IndexError(f"positions outside 0..{self._off.size - 2}")
        raw = self._raw
        return [
            raw[a:b].decode("utf-8", "surrogatepass")
            for a, b in zip(self._off[idx].tolist(), self._off[idx + 1].tolist(), strict=True)
        ]

    def _list(self) -> list[str]:
        if self._items is None:
            self._items = _split_utf8(np.frombuffer(self._raw, dtype=np.uint8), self._off)
            self._raw, self._off = b"", np.zeros(1, dtype=np.int64)
        return self._items

    def append(self, item: str) -> None:
        self._list().append(item)

    def __setitem__(self, i: int, item: str) -> None:
        self._list()[i] = item

    def arrays(self) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
        """The UTF-8 bytes and offsets (as :func:`_join_utf8` writes them)."""
        if self._items is None:
            return np.frombuffer(self._raw, dtype=np.uint8), self._off
        return _join_utf8(self._items)


def _npy_rows(zf: zipfile.ZipFile, name: str, chunk_bytes: int = 1 << 24) -> Iterator[list[str]]:
    """The rows of a 1-D string array member of an ``.npz``, in chunks of about
    ``chunk_bytes`` (a layout-1 metadata array is as wide as its longest row: reading it whole
    took 1 GB at 117k records)."""
    with zf.open(f"{name}.npy") as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        else:
            shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        if dtype.kind != "U" or len(shape) != 1:
            raise ValueError(f"{name} is not a 1-D string array (dtype {dtype}, shape {shape})")
        n, width = int(shape[0]), int(dtype.itemsize)
        if width == 0:
            yield [""] * n
            return
        step = max(1, chunk_bytes // width)
        for s in range(0, n, step):
            rows = min(step, n - s)
            buf = fh.read(rows * width)
            if len(buf) != rows * width:
                raise ValueError(f"{name} is truncated")
            yield np.frombuffer(buf, dtype=dtype).tolist()


class FaissStore(VectorStore):
    """A FAISS index in a local file, ``<path>/<collection>.faiss.npz``, for large collections.

    The index file holds the serialised index, the id map (FAISS labels are int64; label ``i``
    is the ``i``-th record id ever added), each record's metadata (JSON), the position of its
    sealed payload and the privembed info -- ids and metadata as UTF-8 bytes with offsets, so a
    record costs what its text costs. The payloads themselves (AES-GCM ciphertext, about
    4·d + 45 bytes) sit as raw bytes, one after another, in
    ``<path>/<collection>.faiss.<token>.payloads``: opening the store never reads them, a search
    reads those of its hits by position. With payloads a record takes its vector's bytes plus
    its payload's, about 2.05× the vectors at d = 384 (docs/benchmarks.md).

    The index file is loaded whole, changed in memory, and written atomically (temporary file +
    rename) by :meth:`save` and on :meth:`close`. Payloads are appended to their file as they
    are upserted, and flushed to disk before an index file that refers to them replaces the old
    one: a crash leaves the previous index with its payloads (bytes appended since are
    unreferenced), never an index pointing at missing bytes. A replaced payload's old bytes stay
    until the file is rewritten -- by :meth:`compact`, or by a save once they are more than
    half of it. Index files of the earlier layout (payloads as base64 in the metadata) open as
    they are and are converted by their next save (any upsert) or by :meth:`compact`.

    One process writes a store at a time (the last :meth:`save` wins); readers in other
    processes see the store as it was when they opened it.

    Parameters
    ----------
    factory : str, optional
        FAISS ``index_factory`` description of a new index (wrapped in ``IDMap2``; default
        ``"Flat"``): ``"Flat"`` searches exactly; ``"SQfp16"`` keeps the vectors in half
        precision (half the memory, a faster scan; scores within about 1e-3 of float32's, so
        the k' candidates of a re-rank are the same in practice: docs/benchmarks.md);
        ``"HNSW32"`` is approximate (searched with ``efSearch`` = max(256, 2 k) for a depth
        k; its recall of the exact top k' is measured by :meth:`search_recall` and folded into
        the k' of ``recall=``), pays on low-dimensional or lightly perturbed vectors (a
        subspace store; at Laplace epsilon <= 200 in 384 dimensions a search deep enough to keep
        the exact top k' costs what the flat scan costs: docs/benchmarks.md), and cannot replace
        existing ids. An existing store keeps the index it was made with (a different
        ``factory`` for it is refused). For ``metric="cosine"`` vectors and queries are
        normalised and searched by inner product.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with FaissStore(tmp, "demo") as s:
    ...         s.upsert(["a", "b"], np.array([[1.0, 0.0], [0.0, 1.0]]), [{"n": 1}, None])
    ...     with FaissStore(tmp, "demo", create=False) as s:  # reopened from the file
    ...         hit = s.search(np.array([1.0, 0.1]), k=1)[0][0]
    ...         (hit.id, round(hit.score, 3), hit.metadata, s.count(), s.metric)
    ('a', 0.995, {'n': 1}, 2, 'cosine')
    """

    name = "faiss"
    suffix = ".faiss.npz"
    #: a save rewrites the payload file when unreferenced bytes exceed half of it and this many
    compact_after_bytes = 64 << 20

    def __init__(
        self,
        path: str | Path,
        collection: str = DEFAULT_COLLECTION,
        *,
        metric: str | None = None,
        create: bool = True,
        factory: str | None = None,
    ) -> None:
        if factory is not None and (not isinstance(factory, str) or not factory):
            raise ValueError(
                f"factory must be a FAISS index_factory string, got factory={factory!r}."
            )
        self.factory = factory or "Flat"
        super().__init__(path, collection, metric=metric, create=create)
        made = self._info.get("factory") if self._exists else None
        if made is not None:
            if factory is not None and factory != made:
                self.close()
                raise ValueError(
                    f"FAISS store {self.file} was made with the index {made!r}, not "
                    f"{factory!r}: a store keeps its index (make a new store for another)."
                )
            self.factory = str(made)

    @property
    def file(self) -> Path:
        """The index file."""
        return self.path / f"{self.collection}{self.suffix}"

    @property
    def payload_file(self) -> Path | None:
        """The file of sealed payloads (``None`` until the first payload is stored)."""
        return self._pfile

    @property
    def layout(self) -> int:
        """Layout of the index file as it is on disk (:data:`FAISS_LAYOUT` once saved)."""
        return self._layout

    def _open(self) -> dict[str, Any] | None:
        self._faiss = require("faiss", "text", purpose="the FAISS vector store")
        self._index: Any = None
        self._ids = _Strings()
        self._label_map: dict[str, int] | None = None  # built on first use (:attr:`_labels`)
        self._meta = _Strings()
        #: (offset, length) of each label's payload in the payload file; length -1: none
        self._pos = np.zeros((0, 2), dtype=np.int64)
        self._legacy: dict[int, bytes] = {}  # payloads read from a layout-1 file, until saved
        self._pfile: Path | None = None
        self._pfh: Any = None
        self._unflushed = False
        self._garbage = 0
        self._layout = FAISS_LAYOUT
        self._dirty = False
        if not self.file.exists():
            return None
        try:
            with zipfile.ZipFile(self.file) as zf:
                if _INDEX_MEMBER in zf.namelist():
                    info = self._read_layout2(zf)
                else:
                    self._layout = 1
            if self._layout == 1:
                with np.load(self.file, allow_pickle=False) as z:
                    info = json.loads(str(z["info"]))
                    self._index = self._faiss.deserialize_index(
                        np.array(z["index"], dtype=np.uint8)
                    )
                self._read_layout1()
        except (OSError, ValueError, KeyError, IndexError, RuntimeError, zipfile.BadZipFile) as exc:
            self._close_files()
            raise DataError(f"cannot read FAISS store {self.file}: {exc}") from None
        self._present = np.zeros(len(self._ids), dtype=bool)
        if self._index.ntotal:
            self._present[self._label_array()] = True
        return dict(info)

    def _read_layout2(self, zf: zipfile.ZipFile) -> dict[str, Any]:
        """Read a layout-2 file; returns the info. The index is streamed from the zip into
        FAISS, so opening costs the index itself, not two more copies of it."""

        def array(name: str) -> NDArray[Any]:
            with zf.open(f"{name}.npy") as fh:
                return np.lib.format.read_array(fh, allow_pickle=False)

        layout = int(array("layout"))
        if layout != FAISS_LAYOUT:
            raise ValueError(f"layout {layout} is newer than this privembed reads ({FAISS_LAYOUT})")
        info = json.loads(str(array("info")))
        with zf.open(_INDEX_MEMBER) as fh:
            self._index = self._faiss.read_index(self._faiss.PyCallbackIOReader(fh.read, 1 << 20))
        self._ids = _Strings(array("ids").tobytes(), array("ids_off"))
        self._meta = _Strings(array("meta").tobytes(), array("meta_off"))
        pos = np.array(array("payload_pos"), dtype=np.int64).reshape(-1, 2)
        if len(self._meta) != len(self._ids) or pos.shape[0] != len(self._ids):
            raise ValueError("ids, metadata and payload positions differ in length")
        self._pos = pos
        name = str(array("payload_file"))
        if not name:
            if (pos[:, 1] >= 0).any():
                raise ValueError("payload positions without a payload file")
            return info
        if Path(name).name != name or not name.startswith(f"{self.collection}.faiss."):
            raise ValueError(f"bad payload file name {name!r}")
        pfile = self.path / name
        if not pfile.exists():
            raise ValueError(f"its payload file {name} is missing")
        self._pfile = pfile
        self._pfh = pfile.open("r+b")
        size = os.fstat(self._pfh.fileno()).st_size
        live = pos[pos[:, 1] >= 0]
        if live.size and (live[:, 0].min() < 0 or int((live[:, 0] + live[:, 1]).max()) > size):
            raise ValueError(f"its payload file {name} is shorter than the index says")
        self._garbage = size - int(live[:, 1].sum())
        return info

    def _read_layout1(self) -> None:
        """Ids and metadata of a layout-1 file, read in chunks; the base64 payloads in the
        metadata move to :attr:`_legacy` (raw bytes) until the next save writes them out."""
        with zipfile.ZipFile(self.file) as zf:
            self._ids = _Strings.of([rid for rows in _npy_rows(zf, "ids") for rid in rows])
            self._meta = _Strings.of([])
            label = 0
            for rows in _npy_rows(zf, "metadata"):
                for text in rows:
                    if PAYLOAD_KEY in text:
                        meta = json.loads(text)
                        raw = meta.pop(PAYLOAD_KEY, None)
                        blob = _decode_payload(self._ids[label], raw)
                        if blob is not None:
                            self._legacy[label] = blob
                        text = json.dumps(meta)
                    self._meta.append(text)
                    label += 1
        if len(self._meta) != len(self._ids):
            raise ValueError("ids and metadata differ in length")
        self._pos = np.full((len(self._ids), 2), -1, dtype=np.int64)

    @property
    def _labels(self) -> dict[str, int]:
        """Record id -> FAISS label, built on first use (writes and fetches by id)."""
        if self._label_map is None:
            self._label_map = {rid: i for i, rid in enumerate(self._ids._list())}
        return self._label_map

    def _label_array(self) -> NDArray[np.int64]:
        idmap = self._faiss.downcast_index(self._index)
        return np.asarray(self._faiss.vector_to_array(idmap.id_map), dtype=np.int64)

    def _listing(self) -> str:
        names = sorted(p.name[: -len(self.suffix)] for p in self.path.glob(f"*{self.suffix}"))
        return f" (collections: {', '.join(names) or 'none'})"

    def _create(self, dim: int) -> None:
        faiss = self._faiss
        try:
            self._index = faiss.index_factory(
                dim, f"IDMap2,{self.factory}", faiss.METRIC_INNER_PRODUCT
            )
        except RuntimeError as exc:
            raise ValueError(
                f"bad FAISS factory {self.factory!r}: {str(exc).splitlines()[0]}"
            ) from None
        self._present = np.zeros(0, dtype=bool)
        self._info["factory"] = self.factory
        self._dirty = True

    def _write_info(self) -> None:
        self._dirty = True

    def _prep(self, X: NDArray[np.float32]) -> NDArray[np.float32]:
        if self.metric == "cosine":
            norms = np.linalg.norm(X, axis=1, keepdims=True)
            return np.ascontiguousarray(X / np.where(norms > 0, norms, 1.0), dtype=np.float32)
        return np.ascontiguousarray(X, dtype=np.float32)

    def _upsert(
        self,
        ids: list[str],
        X: NDArray[np.float32],
        metadata: list[dict[str, Any]] | None,
        payloads: list[bytes] | None,
    ) -> None:
        labels = np.empty(len(ids), dtype=np.int64)
        replace = []
        for j, rid in enumerate(ids):
            known = self._labels.get(rid)
            if known is None:
                lab = len(self._ids)
                self._labels[rid] = lab
                self._ids.append(rid)
                self._meta.append("{}")
            else:
                lab = known
                if lab < self._present.size and self._present[lab]:
                    replace.append(lab)
            labels[j] = lab
        grow = len(self._ids) - self._present.size
        if grow > 0:
            self._present = np.concatenate([self._present, np.zeros(grow, dtype=bool)])
        grow = len(self._ids) - self._pos.shape[0]
        if grow > 0:
            self._pos = np.concatenate([self._pos, np.full((grow, 2), -1, dtype=np.int64)])
        if replace:
            try:
                self._index.remove_ids(np.asarray(replace, dtype=np.int64))
            except RuntimeError:
                raise ValueError(
                    f"FAISS index {self.factory!r} cannot replace existing ids "
                    f"(e.g. {self._ids[replace[0]]!r}); use factory='Flat' or new ids."
                ) from None
        if self._index.ntotal == 0 and not self._index.is_trained:
            raise ValueError(
                f"FAISS index {self.factory!r} needs training; use an index that does not "
                "(e.g. 'Flat' or 'HNSW32')."
            )
        self._index.add_with_ids(self._prep(X), labels)
        self._present[labels] = True
        # a replaced record's metadata and payload are replaced too (none given: none kept)
        old = self._pos[labels, 1]
        self._garbage += int(old[old > 0].sum())
        for lab in labels.tolist():
            self._legacy.pop(lab, None)
        if payloads is None:
            self._pos[labels] = -1
        else:
            self._pos[labels] = self._append(payloads)
        metas = metadata if metadata is not None else [{}] * len(ids)
        for label, m in zip(labels.tolist(), metas, strict=True):
            self._meta[label] = json.dumps(m) if m else "{}"
        self._dirty = True

    def _append(self, blobs: list[bytes]) -> NDArray[np.int64]:
        """Append payloads to the payload file (created on first use); their (offset, length)."""
        if self._pfh is None:
            self.path.mkdir(parents=True, exist_ok=True)
            self._pfile = self.path / f"{self.collection}.faiss.{secrets.token_hex(8)}.payloads"
            self._pfh = self._pfile.open("x+b")
        end = self._pfh.seek(0, os.SEEK_END)
        lens = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
        self._pfh.write(b"".join(blobs))
        self._unflushed = True
        pos = np.empty((len(blobs), 2), dtype=np.int64)
        pos[:, 1] = lens
        pos[:, 0] = end + np.cumsum(lens) - lens
        return pos

    def _reader(self) -> int:
        """The payload file's descriptor, its appended bytes flushed (reads use ``pread``: a
        memory map would count every page the kernel maps around a read -- 64 kB for each
        1.6 kB payload -- in the process' RSS until the whole file is resident)."""
        assert self._pfh is not None
        if self._unflushed:
            self._pfh.flush()
            self._unflushed = False
        return int(self._pfh.fileno())

    def _read(self, labels: Sequence[int]) -> list[bytes | None]:
        """The payloads of FAISS labels, in order (one ``pread`` each)."""
        if not labels:
            return []
        pos = self._pos[np.asarray(labels, dtype=np.int64)].tolist()
        fd = self._reader() if self._pfh is not None else -1
        legacy, pread = self._legacy, os.pread
        out: list[bytes | None] = []
        for lab, (o, n) in zip(labels, pos, strict=True):
            if n >= 0:
                blob = pread(fd, n, o)
                if len(blob) != n:
                    raise DataError(
                        f"the payload file {self._pfile} ends before the payload of record "
                        f"{self._ids[lab]!r} (truncated?)."
                    )
                out.append(blob)
            else:
                out.append(legacy.get(lab) if legacy else None)
        return out

    def _payloads(self, ids: list[str]) -> list[bytes | None]:
        labels = [self._labels.get(i, -1) for i in ids]
        present = [lab for lab in labels if lab >= 0 and self._present[lab]]
        got = dict(zip(present, self._read(present), strict=True))
        return [got.get(lab) for lab in labels]

    def _search(
        self, Q: NDArray[np.float32], k: int, with_vectors: bool, with_payloads: bool
    ) -> list[list[Hit]]:
        with _faiss_threads(self._faiss, Q.shape[0]), self._search_depth(k):
            D, I = self._index.search(self._prep(Q), k)  # noqa: E741 - FAISS's name
        payload: dict[int, bytes | None] = {}
        if with_payloads:
            found = I[I >= 0].tolist()
            payload = dict(zip(found, self._read(found), strict=True))
        out: list[list[Hit]] = []
        for drow, irow in zip(D.tolist(), I.tolist(), strict=True):
            labels = [lab for lab in irow if lab >= 0]  # FAISS pads short answers with -1
            scores = [sc for sc, lab in zip(drow, irow, strict=True) if lab >= 0]
            ids = self._ids.take(labels)
            metas = [{} if m == "{}" else json.loads(m) for m in self._meta.take(labels)]
            vecs: list[NDArray[np.float32] | None] = [None] * len(labels)
            if with_vectors:
                vecs = [np.asarray(self._index.reconstruct(lab), np.float32) for lab in labels]
            get = payload.get
            out.append([
                Hit(rid, sc, meta, vec, get(lab))
                for rid, sc, meta, vec, lab in zip(ids, scores, metas, vecs, labels, strict=True)
            ])  # fmt: skip
        return out

    # ---- a re-rank's candidates, as arrays ------------------------------------------------------
    @property
    def approximate(self) -> bool:
        """Whether the index searches approximately (HNSW): its recall of the exact top k' is
        then measured (:meth:`search_recall`) and folded into the k' of a re-rank."""
        return self._hnsw() is not None

    def _hnsw(self) -> Any:
        """The HNSW graph of the index (``None``: an exact index)."""
        if self._index is None:
            return None
        inner = self._faiss.downcast_index(self._faiss.downcast_index(self._index).index)
        return getattr(inner, "hnsw", None)

    @contextlib.contextmanager
    def _search_depth(self, k: int) -> Iterator[None]:
        """An HNSW index searched with ``efSearch`` set from the depth ``k``
        (:data:`HNSW_EF_FACTOR` times k, at least :data:`HNSW_EF_MIN`), restored afterwards."""
        graph = self._hnsw()
        if graph is None:
            yield
            return
        before = graph.efSearch
        graph.efSearch = max(HNSW_EF_MIN, int(np.ceil(self.ef_factor * k)))
        try:
            yield
        finally:
            graph.efSearch = before

    @property
    def ef_factor(self) -> float:
        """efSearch per unit of depth of an HNSW index (the store's info ``ef_factor``, else
        :data:`HNSW_EF_FACTOR`)."""
        return float(self._info.get("ef_factor", HNSW_EF_FACTOR))

    def _candidates(self, Q: NDArray[np.float32], k: int) -> Candidates:
        with _faiss_threads(self._faiss, Q.shape[0]), self._search_depth(k):
            D, I = self._index.search(self._prep(Q), k)  # noqa: E741 - FAISS's name
        found = I >= 0  # FAISS pads short answers with -1
        keys, inv = np.unique(I[found], return_inverse=True)
        rows = np.full(I.shape, -1, dtype=np.int64)
        rows[found] = inv
        scores = np.where(found, D, -np.inf).astype(np.float32)
        return Candidates(rows, scores, keys.astype(np.int64))

    def payload_block(self, candidates: Candidates) -> tuple[bytes | memoryview, NDArray[np.int64]]:
        """The candidates' payloads read through one memory map of the payload file, in file
        order, a gather per payload length (one for payloads of vectors alone, which all have
        one length): no read call per payload. The map lives for the call only, so a search
        does not keep the pages it read in its memory."""
        self._check_open()
        if candidates.hits is not None:
            return super().payload_block(candidates)
        labels = candidates.keys
        if self._legacy or self._pfh is None:  # payloads of a layout-1 file, until saved
            return _joined([b or b"" for b in self._read(labels.tolist())])
        pos = self._pos[labels]
        lens = np.where(pos[:, 1] >= 0, pos[:, 1], 0)
        off = np.zeros(labels.size + 1, dtype=np.int64)
        np.cumsum(lens, out=off[1:])
        fd = self._reader()
        size = os.fstat(fd).st_size
        over = np.flatnonzero(pos[:, 0] + lens > size)
        if over.size:
            raise DataError(
                f"the payload file {self._pfile} ends before the payload of record "
                f"{self._ids[int(labels[over[0]])]!r} (truncated?)."
            )
        out = np.empty(int(off[-1]), dtype=np.uint8)
        # a map counts the pages it touches in the process' memory while it lives (about two
        # of 4 kB a payload): at most PAYLOAD_MAP_CHUNK payloads are read through one map, the
        # next chunk further on in the file through the next
        rows = np.flatnonzero(lens > 0)
        rows = rows[np.argsort(pos[rows, 0], kind="stable")]
        for c in range(0, rows.size, PAYLOAD_MAP_CHUNK):
            part = rows[c : c + PAYLOAD_MAP_CHUNK]
            first = int(pos[part[0], 0]) // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
            last = int((pos[part, 0] + lens[part]).max())
            with mmap.mmap(fd, last - first, offset=first, access=mmap.ACCESS_READ) as mm:
                mm.madvise(mmap.MADV_RANDOM)  # no read-ahead around each payload
                _gather(mm, pos[part, 0] - first, lens[part], off[part], out)
        return out.data, off  # the gathered bytes themselves (a memoryview), not a copy

    def candidate_ids(self, candidates: Candidates) -> list[str]:
        self._check_open()
        if candidates.hits is not None:
            return super().candidate_ids(candidates)
        return self._ids.take(candidates.keys.tolist())

    def candidate_hits(
        self, candidates: Candidates, keys: Sequence[int], scores: Sequence[float]
    ) -> list[Hit]:
        self._check_open()
        if candidates.hits is not None:
            return super().candidate_hits(candidates, keys, scores)
        labels = candidates.keys[np.asarray(keys, dtype=np.int64)].tolist()
        ids = self._ids.take(labels)
        metas = [{} if m == "{}" else json.loads(m) for m in self._meta.take(labels)]
        return [Hit(rid, float(sc), meta) for rid, sc, meta in zip(ids, scores, metas, strict=True)]

    def search_recall(self, vectors: Any, k: int) -> float:
        """Mean share of each query's exact top ``k`` (by the stored vectors, scanned in
        chunks) that the index's search returns at depth ``k``: 1 for an exact index.

        What a re-rank loses to an approximate index beyond what the noise costs; the k' of
        ``--recall`` divides its target by it (:meth:`ProtectedCollection.query
        <privembed.integrations.collection.ProtectedCollection.query>`).
        """
        self._check_open()
        k = check_int("k", k, ge=1)
        Q, _ = check_embeddings(vectors, name="query", dim=self.dim, allow_zero=True)
        n = self.count()
        if self._hnsw() is None or n == 0:
            return 1.0
        k = min(k, n)
        Qp = self._prep(np.ascontiguousarray(Q, dtype=np.float32))
        got = self._candidates(Qp, k)
        found = np.where(got.rows >= 0, got.keys[np.maximum(got.rows, 0)], -1)
        idmap = self._faiss.downcast_index(self._index)
        inner = self._faiss.downcast_index(idmap.index)
        labels = self._label_array()
        best_s = np.full((Qp.shape[0], 0), -np.inf, dtype=np.float32)
        best_l = np.zeros((Qp.shape[0], 0), dtype=np.int64)
        step = max(1024, (32 << 20) // (4 * inner.d))  # about 32 MiB of vectors at a time
        for s in range(0, n, step):
            C = inner.reconstruct_n(s, min(step, n - s))
            S = np.concatenate([best_s, Qp @ C.T], axis=1)
            L = np.concatenate([best_l, np.broadcast_to(labels[s : s + C.shape[0]], (Qp.shape[0], C.shape[0]))], axis=1)  # fmt: skip
            top = np.argpartition(-S, k - 1, axis=1)[:, :k] if S.shape[1] > k else np.argsort(-S, axis=1)  # fmt: skip
            best_s = np.take_along_axis(S, top, axis=1)
            best_l = np.take_along_axis(L, top, axis=1)
        hit = [np.isin(e, f).mean() for e, f in zip(best_l, found, strict=True)]
        return float(np.mean(hit))

    def _all_ids(self) -> list[str]:
        return self._ids.take(np.flatnonzero(self._present[: len(self._ids)]).tolist())

    def _count(self) -> int:
        return int(self._index.ntotal)

    def _rewrite_payloads(self) -> Path | None:
        """Copy every live payload into a new payload file, in label order, a chunk at a time;
        returns the old file (to delete once the index file that no longer refers to it is in
        place)."""
        old_fd = self._reader() if self._pfh is not None else -1
        old_pos, legacy = self._pos, self._legacy
        old_file, old_fh = self._pfile, self._pfh
        self._pfile, self._pfh, self._unflushed = None, None, False
        self._pos = np.full((len(self._ids), 2), -1, dtype=np.int64)
        live = np.flatnonzero(self._present[: len(self._ids)])
        step = 4096
        for s in range(0, live.size, step):
            labs, blobs = [], []
            for lab, (o, n) in zip(live[s : s + step].tolist(), old_pos[live[s : s + step]]
                                   .tolist(), strict=True):  # fmt: skip
                blob = os.pread(old_fd, n, o) if n >= 0 else legacy.get(lab)
                if blob is not None:
                    labs.append(lab)
                    blobs.append(blob)
            if blobs:
                self._pos[np.asarray(labs, dtype=np.int64)] = self._append(blobs)
        self._legacy = {}
        self._garbage = 0
        if old_fh is not None:
            old_fh.close()
        return old_file

    def save(self) -> None:
        """Write the index file atomically (no-op if nothing changed); payloads appended since
        the last save are flushed to disk first."""
        if not self._dirty or self._index is None:
            return
        self._write(rewrite=bool(self._legacy) or self._too_much_garbage())

    def _too_much_garbage(self) -> bool:
        if self._pfh is None:
            return False
        size = os.fstat(self._pfh.fileno()).st_size
        return self._garbage > max(size // 2, self.compact_after_bytes)

    def compact(self) -> None:
        """Rewrite the payload file with only the payloads records refer to, and the index file
        in the current layout (converts a store written by an earlier privembed)."""
        self._check_open()
        if self._index is None:
            return
        self._write(rewrite=True)

    def _write(self, *, rewrite: bool) -> None:
        from ..data.io import atomic_output

        self.path.mkdir(parents=True, exist_ok=True)
        old = self._rewrite_payloads() if rewrite else None
        if self._pfh is not None:
            self._pfh.flush()
            os.fsync(self._pfh.fileno())
            self._unflushed = False
        ids, ids_off = self._ids.arrays()
        meta, meta_off = self._meta.arrays()
        arrays = {
            "layout": np.array(FAISS_LAYOUT),
            "ids": ids,
            "ids_off": ids_off,
            "meta": meta,
            "meta_off": meta_off,
            "payload_pos": self._pos,
            "payload_file": np.array("" if self._pfile is None else self._pfile.name),
            "info": np.array(json.dumps(self._info, sort_keys=True)),
        }
        with atomic_output(self.file) as tmp, zipfile.ZipFile(tmp, "w") as zf:
            for name, arr in arrays.items():
                with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, arr, allow_pickle=False)
            with zf.open(_INDEX_MEMBER, "w", force_zip64=True) as fh:  # streamed, no copy
                self._faiss.write_index(self._index, self._faiss.PyCallbackIOWriter(fh.write))
        self._dirty = False
        self._layout = FAISS_LAYOUT
        if old is not None and old != self._pfile:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

    def _close_files(self) -> None:
        if getattr(self, "_pfh", None) is not None:
            self._pfh.close()
            self._pfh = None

    def close(self) -> None:
        if not self._closed:
            try:
                if getattr(self, "_index", None) is not None:
                    self.save()
            finally:
                self._close_files()
        super().close()


# ---------------------------------------------------------------------------------------------
# pgvector (PostgreSQL, where teams already keep sensitive data)
# ---------------------------------------------------------------------------------------------

#: environment variable holding the pgvector store's database (a libpq URL or key=value DSN)
PG_DSN_ENV = "PRIVEMBED_PG_DSN"
#: the registry of privembed collections in a database: name -> privembed info (JSON)
_PG_REGISTRY = "privembed_collections"
#: longest collection name (PostgreSQL identifiers are 63 bytes: "pev_" + name + "_hnsw")
_PG_MAX_NAME = 50
_PG_INDEXES = ("hnsw", "ivfflat")
#: pgvector's largest hnsw.ef_search
PG_EF_SEARCH_MAX = 1000


def _pg_vector(value: Any) -> NDArray[np.float32]:
    """A ``vector`` column as float32 (pgvector's loader gives a ``Vector`` or an array)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)


class PgVectorStore(VectorStore):
    """A collection in PostgreSQL with pgvector: one table per collection.

    Protected vectors live in a ``vector(d)`` column, sealed payloads in ``bytea``, ids in a
    ``text`` primary key and metadata in ``jsonb``; the collection's privembed info is a row of
    ``privembed_collections``. Searches scan exactly (``ORDER BY embedding <=> q``) unless the
    collection was created with ``index="hnsw"`` or ``index="ivfflat"`` (approximate; built
    with the collection, or after the first upsert for IVFFlat, whose lists need data).
    ``metric`` maps to pgvector's cosine distance (``<=>``, score ``1 - distance``) or negative
    inner product (``<#>``, score ``-distance``).

    An index built on loaded data is much cheaper than one grown row by row: the configured
    index is built after the first upsert (HNSW and IVFFlat alike) and kept up to date by
    later ones; for a bulk load, create the collection without one and call
    :meth:`build_index` after loading.

    Every value travels as a bound parameter; the only identifiers in SQL text are the
    collection's table and index names, quoted (``psycopg.sql.Identifier``) from a validated
    name of at most 50 characters (``pev_<collection>``).

    Parameters
    ----------
    path : str or Path
        A local folder for what stays inside the trust boundary beside the collection (the
        sealed score profile that ``recall=`` plans ``k'`` from).
    dsn : str, optional
        The database: a libpq URL or ``key=value`` string. Default: the environment variable
        ``PRIVEMBED_PG_DSN``; libpq's own (``PGPASSWORD``, ``~/.pgpass``) fill in the rest.
        Never shown with its password (messages, :attr:`info`, ``repr``).
    index : {None, "hnsw", "ivfflat"}
        Approximate index of a new collection (default: none, exact search).
    lists : int, optional
        IVFFlat lists (default ``max(1, rows / 1000)`` at build time); ``probes`` per query.
    ef_search : int, default 100
        HNSW candidates per query.
    """

    name = "pgvector"

    def __init__(
        self,
        path: str | Path,
        collection: str = DEFAULT_COLLECTION,
        *,
        metric: str | None = None,
        create: bool = True,
        dsn: str | None = None,
        index: str | None = None,
        lists: int | None = None,
        probes: int = 10,
        ef_search: int = 100,
    ) -> None:
        import os

        from ..keys.ledger_pg import redact_url

        check_collection_name(collection)
        if len(collection) > _PG_MAX_NAME:
            raise ValueError(
                f"a pgvector collection name has at most {_PG_MAX_NAME} characters (PostgreSQL "
                f"identifiers are 63 bytes), got collection={collection!r}."
            )
        if index is not None:
            check_choice("index", index, _PG_INDEXES)
        if lists is not None:
            check_int("lists", lists, ge=1)
        self.index_kind = index
        self.lists = lists
        self.probes = check_int("probes", probes, ge=1)
        self.ef_search = check_int("ef_search", ef_search, ge=1)
        given = dsn if dsn is not None else os.environ.get(PG_DSN_ENV)
        if not given:
            raise ValueError(
                f"the pgvector store needs a database: pass dsn=... or set {PG_DSN_ENV} "
                "(a postgresql:// URL; the password from PGPASSWORD or ~/.pgpass)."
            )
        self._dsn = given
        self.where = redact_url(given)
        self._conn: Any = None
        super().__init__(path, collection, metric=metric, create=create)

    # ---- the connection ------------------------------------------------------------------------
    def _fail(self, exc: BaseException, doing: str) -> Exception:
        """One line naming what failed, never the DSN's password."""
        from ..keys.ledger_pg import scrub

        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        psycopg = self._pg
        cls: type[Exception] = (
            DataError if isinstance(exc, psycopg.DataError | UnicodeEncodeError) else ValueError
        )
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            cls = ConnectionError
        return cls(f"pgvector store {self.where}: {doing}: {scrub(text, self._dsn)}")

    def _table(self) -> Any:
        return self._sql.Identifier(f"pev_{self.collection}")

    def _open(self) -> dict[str, Any] | None:
        self._pg = require("psycopg", "postgres", purpose="the pgvector store")
        pgvector_psycopg = require("pgvector.psycopg", "postgres", purpose="the pgvector store")
        from psycopg import sql

        self._sql = sql
        try:
            conn = self._pg.connect(self._dsn, autocommit=True, connect_timeout=30)
        except (self._pg.Error, ValueError) as exc:
            raise self._fail(exc, "cannot connect") from None
        self._conn = conn
        try:
            have = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
            if have is None:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            pgvector_psycopg.register_vector(conn)
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (name TEXT PRIMARY KEY, info TEXT NOT NULL)"
                ).format(sql.Identifier(_PG_REGISTRY))
            )
            row = conn.execute(
                sql.SQL("SELECT info FROM {} WHERE name = %s").format(sql.Identifier(_PG_REGISTRY)),
                (self.collection,),
            ).fetchone()
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot open the collection registry") from None
        if row is None:
            return None
        try:
            return dict(json.loads(row[0]))
        except (json.JSONDecodeError, TypeError, ValueError):
            return {}

    def _listing(self) -> str:
        rows = self._conn.execute(
            self._sql.SQL("SELECT name FROM {} ORDER BY name").format(
                self._sql.Identifier(_PG_REGISTRY)
            )
        ).fetchall()
        return f" (collections: {', '.join(r[0] for r in rows) or 'none'})"

    def _ops(self) -> tuple[str, str]:
        """(distance operator, operator class) of the collection's metric."""
        return ("<=>", "vector_cosine_ops") if self.metric == "cosine" else ("<#>", "vector_ip_ops")

    def _create(self, dim: int) -> None:
        sql = self._sql
        self.path.mkdir(parents=True, exist_ok=True)
        if self.index_kind is not None:
            self._info["index"] = self.index_kind
        try:
            with self._conn.transaction():
                self._conn.execute(
                    sql.SQL(
                        "CREATE TABLE {} (id TEXT PRIMARY KEY, embedding vector({}) NOT NULL, "
                        "payload BYTEA, metadata JSONB NOT NULL DEFAULT '{{}}'::jsonb)"
                    ).format(self._table(), sql.Literal(int(dim)))
                )
                self._conn.execute(
                    sql.SQL("INSERT INTO {} (name, info) VALUES (%s, %s)").format(
                        sql.Identifier(_PG_REGISTRY)
                    ),
                    (self.collection, json.dumps(self._info, sort_keys=True)),
                )
        except self._pg.Error as exc:
            raise self._fail(exc, f"cannot create collection {self.collection!r}") from None

    def build_index(self, kind: str | None = None) -> None:
        """Build the collection's approximate index now (``kind``: ``"hnsw"`` or
        ``"ivfflat"``; default the configured one), on the data already loaded; later upserts
        keep it up to date and searches use it."""
        self._check_open()
        if kind is not None:
            check_choice("index", kind, _PG_INDEXES)
            if self._info.get("index") not in (None, kind):
                raise ValueError(
                    f"collection {self.collection!r} has a {self._info['index']} index already."
                )
            self._info["index"] = kind
            if self._exists:
                self._write_info()
        if not self._exists:
            raise ValueError(f"collection {self.collection!r} is empty: upsert data first.")
        try:
            self._build_index()
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot build the index") from None

    def _build_index(self) -> None:
        """``CREATE INDEX IF NOT EXISTS`` of the collection's kind (HNSW or IVFFlat)."""
        sql = self._sql
        kind = self._info.get("index")
        if kind not in _PG_INDEXES:
            return
        op_class = sql.SQL(self._ops()[1])  # a constant of this module, never user text
        name = sql.Identifier(f"pev_{self.collection}_{'hnsw' if kind == 'hnsw' else 'ivf'}")
        if kind == "hnsw":
            stmt = sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding {})").format(
                name, self._table(), op_class
            )
        else:
            n = self._count()
            lists = self.lists or max(1, n // 1000)
            stmt = sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} USING ivfflat (embedding {}) WITH (lists = {})"
            ).format(name, self._table(), op_class, sql.Literal(int(lists)))
        with self._conn.transaction():
            # a graph that fits in memory builds several times faster (session default 64 MB)
            self._conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
            self._conn.execute(stmt)

    def _write_info(self) -> None:
        sql = self._sql
        try:
            self._conn.execute(
                sql.SQL("UPDATE {} SET info = %s WHERE name = %s").format(
                    sql.Identifier(_PG_REGISTRY)
                ),
                (json.dumps(self._info, sort_keys=True), self.collection),
            )
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot update the collection's info") from None

    def _upsert(
        self,
        ids: list[str],
        X: NDArray[np.float32],
        metadata: list[dict[str, Any]] | None,
        payloads: list[bytes] | None,
    ) -> None:
        from psycopg.types.json import Jsonb

        sql = self._sql
        metas = metadata if metadata is not None else [{}] * len(ids)
        blobs: list[bytes | None] = list(payloads) if payloads is not None else [None] * len(ids)
        rows = [
            (rid, vec, blob, Jsonb(dict(m or {})))
            for rid, vec, m, blob in zip(ids, X, metas, blobs, strict=True)
        ]
        staged = sql.Identifier("pev_staged")
        try:
            with self._conn.transaction():
                self._conn.execute(
                    sql.SQL(
                        "CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS) "
                        "ON COMMIT DELETE ROWS"
                    ).format(staged, self._table())
                )
                with self._conn.cursor() as cur:
                    copy_sql = sql.SQL(
                        "COPY {} (id, embedding, payload, metadata) FROM STDIN (FORMAT BINARY)"
                    ).format(staged)
                    with cur.copy(copy_sql) as cp:
                        cp.set_types(["text", "vector", "bytea", "jsonb"])
                        for r in rows:
                            cp.write_row(r)
                self._conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (id, embedding, payload, metadata) SELECT id, embedding, "
                        "payload, metadata FROM {} ON CONFLICT (id) DO UPDATE SET "
                        "embedding = EXCLUDED.embedding, payload = EXCLUDED.payload, "
                        "metadata = EXCLUDED.metadata"
                    ).format(self._table(), staged)
                )
            if self._info.get("index") in _PG_INDEXES:
                self._build_index()  # once there is data (IVFFlat's lists need it); then a no-op
        except (self._pg.Error, UnicodeEncodeError) as exc:
            raise self._fail(exc, "cannot upsert") from None

    @property
    def approximate(self) -> bool:
        """Whether searches go through an approximate index (HNSW or IVFFlat): its recall is
        measured against an exact scan (:meth:`search_recall`) and folded into k'."""
        return self._info.get("index") in _PG_INDEXES

    def ef_search_for(self, k: int) -> int:
        """``hnsw.ef_search`` of a search of depth ``k``: :data:`HNSW_EF_FACTOR` times k, at
        least the store's ``ef_search`` and :data:`HNSW_EF_MIN`, at most pgvector's limit (1,000; a deeper search
        returns fewer than k rows, which its measured recall shows)."""
        ef = max(self.ef_search, HNSW_EF_MIN, int(np.ceil(HNSW_EF_FACTOR * k)))
        return min(PG_EF_SEARCH_MAX, ef)

    def search_recall(self, vectors: Any, k: int) -> float:
        """Mean share of each query's exact top ``k`` (the same query with index scans off:
        a sequential scan) that the indexed search returns."""
        self._check_open()
        k = check_int("k", k, ge=1)
        Q, _ = check_embeddings(vectors, name="query", dim=self.dim, allow_zero=True)
        if not self.approximate or not self._exists:
            return 1.0
        Q = np.ascontiguousarray(Q, dtype=np.float32)
        got = self._search(Q, k, False, False)
        exact = self._search(Q, k, False, False, exact=True)
        want = min(k, self._count())  # a short indexed answer counts as misses
        shares = [
            len({h.id for h in a} & {h.id for h in b}) / max(1, want)
            for a, b in zip(got, exact, strict=True)
        ]
        return float(np.mean(shares))

    def _search(
        self,
        Q: NDArray[np.float32],
        k: int,
        with_vectors: bool,
        with_payloads: bool,
        *,
        exact: bool = False,
    ) -> list[list[Hit]]:
        sql = self._sql
        op, _ = self._ops()
        score = "1 - (embedding <=> %s)" if op == "<=>" else "-(embedding <#> %s)"
        cols = (
            "id, {score}, metadata, "
            + ("payload" if with_payloads else "NULL::bytea")
            + (", embedding" if with_vectors else "")
        )
        # exact: an order no index serves (the distance plus 0), so every row is scored and
        # sorted -- a statement of its own, never a cached plan of the indexed one
        order = f"(embedding {op} %s) + 0" if exact else f"embedding {op} %s"
        stmt = sql.SQL(
            "SELECT " + cols.format(score=score) + " FROM {} ORDER BY " + order + " LIMIT %s"
        ).format(self._table())  # the operator and columns are constants of this module
        out: list[list[Hit]] = []
        try:
            with self._conn.transaction():
                kind = None if exact else self._info.get("index")
                if kind == "hnsw":
                    self._conn.execute(
                        sql.SQL("SET LOCAL hnsw.ef_search = {}").format(
                            sql.Literal(self.ef_search_for(k))
                        )
                    )
                elif kind == "ivfflat":
                    self._conn.execute(
                        sql.SQL("SET LOCAL ivfflat.probes = {}").format(sql.Literal(self.probes))
                    )
                with self._conn.cursor() as cur:
                    for q in Q:
                        cur.execute(stmt, (q, q, k), prepare=True)
                        hits = []
                        for row in cur.fetchall():
                            blob = None if row[3] is None else bytes(row[3])
                            vec = _pg_vector(row[4]) if with_vectors else None
                            hits.append(
                                Hit(str(row[0]), float(row[1]), dict(row[2] or {}), vec, blob)
                            )
                        out.append(hits)
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot search") from None
        return out

    def _payloads(self, ids: list[str]) -> list[bytes | None]:
        try:
            rows = self._conn.execute(
                self._sql.SQL("SELECT id, payload FROM {} WHERE id = ANY(%s)").format(
                    self._table()
                ),
                (ids,),
            ).fetchall()
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot read payloads") from None
        found = {str(r[0]): (None if r[1] is None else bytes(r[1])) for r in rows}
        return [found.get(i) for i in ids]

    def _all_ids(self) -> list[str]:
        try:
            rows = self._conn.execute(
                self._sql.SQL("SELECT id FROM {}").format(self._table())
            ).fetchall()
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot list the record ids") from None
        return [str(r[0]) for r in rows]

    def _count(self) -> int:
        try:
            row = self._conn.execute(
                self._sql.SQL("SELECT COUNT(*) FROM {}").format(self._table())
            ).fetchone()
        except self._pg.Error as exc:
            raise self._fail(exc, "cannot count") from None
        return int(row[0])

    def close(self) -> None:
        if not self._closed and self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        super().close()

    def __repr__(self) -> str:
        return (
            f"PgVectorStore(dsn={self.where!r}, collection={self.collection!r}, "
            f"metric={self.metric!r})"
        )


STORES: dict[str, type[VectorStore]] = {
    "chroma": ChromaStore,
    "qdrant": QdrantStore,
    "faiss": FaissStore,
    "pgvector": PgVectorStore,
}


def open_store(
    kind: str,
    path: str | Path,
    collection: str = DEFAULT_COLLECTION,
    *,
    metric: str | None = None,
    create: bool = True,
    **options: Any,
) -> VectorStore:
    """Open (or prepare to create) a collection in a store of the given kind.

    Examples
    --------
    >>> open_store("milvus", "db")
    Traceback (most recent call last):
    ...
    ValueError: store must be one of 'chroma', 'faiss', 'pgvector', 'qdrant', got store='milvus'.
    """
    check_choice("store", kind, tuple(sorted(STORES)))
    return STORES[kind](path, collection, metric=metric, create=create, **options)
