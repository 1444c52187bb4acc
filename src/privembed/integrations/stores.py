"""Vector stores behind one small adapter interface: Chroma (embedded), Qdrant (local), FAISS.

A :class:`VectorStore` is a named collection of vectors with string ids and optional per-record
metadata, searched by similarity. The interface is four operations -- :meth:`~VectorStore.upsert`,
:meth:`~VectorStore.search`, :meth:`~VectorStore.count` and the collection's privembed
:attr:`~VectorStore.info` -- plus :meth:`~VectorStore.close`. An adapter for another store
(LanceDB, pgvector, ...) implements the six ``_``-prefixed hooks, about a page of code,
``_payloads`` to fetch sealed payloads by id and ``_all_ids`` to list the record ids
(:meth:`~VectorStore.store_ids`: a sealed collection fetches every payload).

This module is the public face: the interface and what adapters share live in
:mod:`~privembed.integrations.store_base`, each store in a module of its own
(``store_chroma``, ``store_qdrant``, ``store_faiss`` with ``store_arrays``, ``store_pgvector``);
every name is re-exported here.

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

from pathlib import Path
from typing import Any

from ..core._validation import check_choice

# `x as x`: names other modules and tests import from here, kept importable
from .store_arrays import _gather as _gather
from .store_arrays import _join_utf8 as _join_utf8
from .store_arrays import _npy_rows as _npy_rows
from .store_arrays import _split_utf8 as _split_utf8
from .store_arrays import _Strings as _Strings
from .store_base import _FORMAT as _FORMAT
from .store_base import _INFO_KEY as _INFO_KEY
from .store_base import _NAME_RE as _NAME_RE
from .store_base import _NUMERIC_ID as _NUMERIC_ID
from .store_base import _NUMERIC_IDS as _NUMERIC_IDS
from .store_base import DEFAULT_COLLECTION as DEFAULT_COLLECTION
from .store_base import HNSW_EF_FACTOR as HNSW_EF_FACTOR
from .store_base import HNSW_EF_MIN as HNSW_EF_MIN
from .store_base import PAYLOAD_KEY as PAYLOAD_KEY
from .store_base import Candidates as Candidates
from .store_base import Hit, VectorStore, check_metadata
from .store_base import _decode_payload as _decode_payload
from .store_base import _is_int_id as _is_int_id
from .store_base import _joined as _joined
from .store_base import _numeric_kinds as _numeric_kinds
from .store_base import _split_meta as _split_meta
from .store_base import _with_payload as _with_payload
from .store_base import _with_payload_meta as _with_payload_meta
from .store_base import check_collection_name as check_collection_name
from .store_chroma import _CHROMA_MAX_HITS as _CHROMA_MAX_HITS
from .store_chroma import ChromaStore
from .store_faiss import _INDEX_MEMBER as _INDEX_MEMBER
from .store_faiss import FAISS_LAYOUT as FAISS_LAYOUT
from .store_faiss import FAISS_ONE_THREAD_BELOW as FAISS_ONE_THREAD_BELOW
from .store_faiss import PAYLOAD_MAP_CHUNK as PAYLOAD_MAP_CHUNK
from .store_faiss import FaissStore
from .store_faiss import _faiss_threads as _faiss_threads
from .store_pgvector import _PG_INDEXES as _PG_INDEXES
from .store_pgvector import _PG_MAX_NAME as _PG_MAX_NAME
from .store_pgvector import _PG_REGISTRY as _PG_REGISTRY
from .store_pgvector import PG_DSN_ENV as PG_DSN_ENV
from .store_pgvector import PG_EF_SEARCH_MAX as PG_EF_SEARCH_MAX
from .store_pgvector import PgVectorStore
from .store_pgvector import _pg_vector as _pg_vector
from .store_qdrant import _QDRANT_ID as _QDRANT_ID
from .store_qdrant import _QDRANT_NS as _QDRANT_NS
from .store_qdrant import QdrantStore

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
