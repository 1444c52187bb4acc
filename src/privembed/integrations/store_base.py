"""The vector store interface (:class:`VectorStore`) and what every adapter shares: hits and
candidates, the collection name and metadata checks, the typed-id rule (a collection keeps its
numeric ids of one type) and the base64 payload helpers of stores that keep payloads in their
metadata. The stores themselves and the overview: :mod:`privembed.integrations.stores`.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, TypedDict

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_choice, check_embeddings, check_int
from .query import METRICS

__all__ = [
    "DEFAULT_COLLECTION",
    "HNSW_EF_FACTOR",
    "HNSW_EF_MIN",
    "PAYLOAD_KEY",
    "Candidates",
    "Hit",
    "OpenOptions",
    "VectorStore",
    "check_collection_name",
    "check_metadata",
]

DEFAULT_COLLECTION = "privembed"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]$")
_INFO_KEY = "privembed"
_FORMAT = 1
#: metadata key of a record's sealed payload (base64); user metadata cannot use the prefix
PAYLOAD_KEY = "privembed_payload"
#: the info entry that records the type of a collection's numeric ids ("int" or "str")
_NUMERIC_IDS = "numeric_ids"
#: a string that is ``str(n)`` of an int ``n``: the store id an int id shares with a str id
_NUMERIC_ID = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)

#: :data:`HNSW_EF_MIN`): its recall of the exact top k' is measured and folded into k'. The
#: floor keeps shallow searches near-exact: on 20,000 real sentence embeddings (Laplace
#: epsilon 1,000, k' = 15) efSearch 64 found 0.978 of real queries' exact top k' and re-ranked
#: to the Flat index's top 10 on 24 of 30 queries, 256 found all of it (30 of 30)
HNSW_EF_FACTOR = 2.0
HNSW_EF_MIN = 256


class OpenOptions(TypedDict, total=False):
    """The keywords of :class:`VectorStore` that every store takes (a store's own
    ``__init__`` adds its options and passes these on).

    Attributes
    ----------
    metric : {"cosine", "ip"} or None
        Similarity of a new collection; for an existing one it must match (``None``: any).
    create : bool
        Create the collection if it does not exist (default True).
    """

    metric: str | None
    create: bool


class _Batch(NamedTuple):
    """One checked upsert, as :meth:`VectorStore.upsert` hands it to a store's ``_upsert``."""

    #: the store ids: strings, unique within the batch
    ids: list[str]
    #: the vectors, float32 (n, dim)
    X: NDArray[np.float32]
    metadata: list[dict[str, Any]] | None
    #: the sealed payloads, one a record (``None``: none in this batch)
    payloads: list[bytes] | None


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
    #: the longest collection name the store accepts, and why (``None``: 512, for every store)
    name_limit: ClassVar[tuple[int, str] | None] = None

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
        if self.name_limit is not None and len(collection) > self.name_limit[0]:
            most, why = self.name_limit
            raise ValueError(
                f"a {self.name} collection name has at most {most} characters ({why}), got "
                f"collection={collection!r}."
            )
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
    def _upsert(self, batch: _Batch) -> None:
        """Insert or replace a checked batch of vectors with their sealed payloads (replacing a
        record without one drops its old payload)."""

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

    def _collection_names(self) -> Iterable[str] | None:
        """The collections the store holds, for a message that names a missing one (``None``:
        unknown)."""
        return None

    def _listing(self) -> str:
        """`` (collections: a, b)`` for error messages (empty if unknown)."""
        names = self._collection_names()
        return "" if names is None else _named_collections(names)

    def _info_json(self) -> str:
        """:attr:`info` as the JSON text a store keeps beside the collection."""
        return json.dumps(self._info, sort_keys=True)

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
        self._upsert(_Batch(id_list, X32, meta, blobs))

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
        >>> from privembed.integrations.stores import FaissStore
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
        >>> from privembed.integrations.stores import FaissStore
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
        >>> from privembed.integrations.stores import FaissStore
        >>> with tempfile.TemporaryDirectory() as tmp, FaissStore(tmp, "demo") as s:
        ...     s.upsert(["a", "b", "c"], np.eye(3), payloads=[b"pa", b"pb", b"pc"])
        ...     c = s.candidates(np.array([[1.0, 0.2, 0.0], [0.0, 1.0, 0.1]]), k=2)
        ...     block, off = s.payload_block(c)
        ...     c.rows.tolist(), s.candidate_ids(c), bytes(block), off.tolist()
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
        >>> from privembed.integrations.stores import FaissStore
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
        >>> from privembed.integrations.stores import FaissStore
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


class _MetadataStore(VectorStore):
    """A store that keeps privembed's info in its collection's metadata (JSON under
    ``_INFO_KEY``) and each sealed payload as base64 in its record's metadata (under
    :data:`PAYLOAD_KEY`), reached through a client ``self._client``: Chroma and Qdrant."""

    _client: Any

    def _info_metadata(self) -> dict[str, str]:
        """The collection metadata that holds :attr:`info`."""
        return {_INFO_KEY: self._info_json()}

    @staticmethod
    def _stored_info(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
        """The info kept in a collection's metadata (``{}``: none, not privembed's)."""
        return _parse_info((metadata or {}).get(_INFO_KEY))

    @staticmethod
    def _record_payload(rid: str, metadata: Mapping[str, Any] | None) -> bytes | None:
        """The sealed payload kept in a record's metadata (``None``: none)."""
        return _decode_payload(rid, (metadata or {}).get(PAYLOAD_KEY))

    @staticmethod
    def _metadata_of(batch: _Batch) -> list[dict[str, Any]] | None:
        """The batch's metadata with its payloads in it (:func:`_with_payload_meta`)."""
        return _with_payload_meta(batch.metadata, batch.payloads, len(batch.ids))

    def close(self) -> None:
        if not self._closed and getattr(self, "_client", None) is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        super().close()


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


def _named_collections(names: Iterable[str]) -> str:
    """`` (collections: a, b)``: the collections a store holds, for a message that names a
    missing one."""
    return f" (collections: {', '.join(sorted(names)) or 'none'})"


def _parse_info(raw: Any) -> dict[str, Any]:
    """The privembed info a store kept as JSON text (or a dict); ``{}`` for anything else (a
    collection privembed did not make: refused by :class:`VectorStore`)."""
    if isinstance(raw, dict):
        return dict(raw)
    try:
        got = json.loads(raw)
    except (TypeError, ValueError):  # JSONDecodeError is a ValueError
        return {}
    return dict(got) if isinstance(got, dict) else {}


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
