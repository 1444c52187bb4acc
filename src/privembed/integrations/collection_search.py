"""A warm search session over a protected collection, and what its scores are.

:class:`Searcher` opens a :class:`~privembed.integrations.collection.ProtectedCollection` once
and its embedding model once, and answers text or vector queries with a :class:`SearchResult`
each: the hits, what their scores are (:func:`score_kind`) and, for calibrated estimates, an
approximate interval per hit (``privembed search``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_keywords
from .collection_core import ProtectedCollection, _Closing
from .collection_plan import (
    QueryOptions,
    RerankDepth,
    SearchOptions,
    depth_options,
)
from .stores import Hit

#: what a search's scores are (:attr:`SearchResult.score_kind`)
EXACT = "exact cosine"
EXACT_UNPROTECTED = "exact cosine (unprotected vectors)"
ESTIMATED = "estimated clean cosine"
PROTECTED = "cosine to the protected vector"
QUERY_PROTECTED = "cosine of the protected query"
QUERY_AND_DOCS_PROTECTED = "cosine of the protected query to the protected vector"


def score_kind(
    collection: ProtectedCollection, *, reranked: bool, protect_query: Any = None
) -> str:
    """What the scores of a search of ``collection`` are (one of the constants above)."""
    if reranked or collection.sealed:
        return EXACT
    if not collection.protection.get("protected"):
        return EXACT_UNPROTECTED if protect_query is None else QUERY_PROTECTED
    if protect_query is not None:
        return QUERY_AND_DOCS_PROTECTED
    return ESTIMATED if collection.treatment.calibrated else PROTECTED


@dataclass(frozen=True)
class SearchResult:
    """The hits of one query, with what their scores are.

    For ``score_kind == "estimated clean cosine"`` the scores are the calibrated estimates
    (unbiased, :meth:`ProtectedCollection.query`) clipped to [-1, 1], and ``intervals`` holds
    each hit's approximate 95% interval for its clean cosine
    (:meth:`ProtectedCollection.estimate_halfwidth`), also within [-1, 1]; ``None`` otherwise.
    """

    query: Any
    hits: list[Hit]
    #: "exact cosine" (re-ranked with the payloads, or unprotected vectors), "estimated clean
    #: cosine", "cosine to the protected vector" or "cosine of the protected query ..."
    score_kind: str
    intervals: list[tuple[float, float]] | None = None

    def to_dict(self) -> dict[str, Any]:
        hits = []
        for i, h in enumerate(self.hits):
            item: dict[str, Any] = {"id": h.id, "cosine": h.score}
            if self.intervals is not None:
                item["interval"] = list(self.intervals[i])
            item.update(text=h.text, metadata=h.metadata)
            hits.append(item)
        return {"query": self.query, "score_kind": self.score_kind, "hits": hits}


def _estimates(hits: list[Hit], halfwidth: float | None) -> tuple[list[Hit], Any]:
    """Hits with their estimates clipped to [-1, 1], and each one's interval (or None): the
    estimate plus or minus ``halfwidth``, clipped to [-1, 1] too (where a clean cosine lies)."""

    def clip(x: float) -> float:
        return min(1.0, max(-1.0, x))

    clipped = [replace(h, score=clip(h.score)) for h in hits]
    if halfwidth is None:
        return clipped, None
    return clipped, [(clip(h.score - halfwidth), clip(h.score + halfwidth)) for h in hits]


class SearcherOptions(TypedDict, total=False):
    """How a :class:`Searcher` opens its collection: its keywords (the parameters after
    ``collection``, described there)."""

    key: Any
    model: str | None
    texts: Any
    store_options: dict[str, Any] | None
    ledger: Any
    sealed_cache: bool


class Searcher(_Closing):
    """A warm search session: the collection opened once, the embedding model loaded once.

    Parameters
    ----------
    store, path, collection
        As for :meth:`ProtectedCollection.open` (the collection must exist).
    key : bytes or key file, optional
        Opens the collection's payloads for exact re-ranking (and their texts).
    model : str, optional
        Embedding model for text queries (default: the collection's).
    texts : mapping or path, optional
        Record id -> text kept locally (e.g. the JSONL the collection was indexed from), shown
        with hits whose payload holds no text.
    store_options : dict, optional
        Options of the store (:func:`~privembed.integrations.stores.open_store`).
    ledger : Ledger, optional
        The ledger the collection was indexed under: re-ranking refuses a payload of an older
        release of its record (a store that rolled a record back).
    sealed_cache : bool, default True
        A sealed collection's encrypted local index cache (:class:`ProtectedCollection`).

    Examples
    --------
    ``with Searcher("chroma", "db", key="secret.key") as s: s.search("chest pain", k=5,
    recall=0.95)[0].hits``
    """

    def __init__(
        self,
        store: str,
        path: Any,
        collection: str = "privembed",
        **options: Unpack[SearcherOptions],
    ) -> None:
        check_keywords("Searcher.__init__", options, SearcherOptions)
        if not Path(path).exists():
            raise FileNotFoundError(f"store not found: {path}")
        self.collection = ProtectedCollection.open(
            store,
            path,
            collection,
            create=False,
            store_options=options.get("store_options"),
            key=options.get("key"),
            ledger=options.get("ledger"),
            sealed_cache=options.get("sealed_cache", True),
        )
        model = options.get("model")
        self.model_name = model or self.collection.embedding_model
        self._embedder: Any = None
        self.texts = self._load_texts(options.get("texts"))

    @staticmethod
    def _load_texts(texts: Any) -> dict[str, str]:
        if texts is None:
            return {}
        if isinstance(texts, str | Path):
            from ..data.io import read_texts

            ids, items = read_texts(texts)
            if ids is None:
                raise DataError(f"{texts}: texts without ids cannot be matched to hits.")
            return {str(i): t for i, t in zip(ids, items, strict=True)}
        return {str(k): str(v) for k, v in dict(texts).items()}

    def embed(self, queries: Sequence[str]) -> NDArray[np.float32]:
        """Embed text queries with the collection's model (loaded once)."""
        if self._embedder is None:
            from ..data.embedders import Embedder

            if self.model_name is None:
                raise ValueError(
                    f"collection {self.collection.store.collection!r} records no embedding "
                    "model; pass the model that made its embeddings (--model)."
                )
            self._embedder = Embedder(self.model_name)
        return np.asarray(self._embedder.encode(list(queries)), dtype=np.float32)

    def search(
        self, queries: str | Sequence[str], k: int = 10, **options: Unpack[SearchOptions]
    ) -> list[SearchResult]:
        """Hits for text queries (see :meth:`ProtectedCollection.query`), embedded a batch at
        a time."""
        check_keywords("Searcher.search", options, SearchOptions)
        items = [queries] if isinstance(queries, str) else list(queries)
        out: list[SearchResult] = []
        depth = depth_options(options)
        step = options.get("batch_queries") or self.batch_size(k, **depth)
        for s in range(0, len(items), step):
            chunk = items[s : s + step]
            out += self.search_vectors(
                self.embed(chunk), k, labels=chunk, batch_queries=step, **depth
            )
        return out

    def batch_size(self, k: int = 10, **depth: Unpack[RerankDepth]) -> int:
        """Queries searched together (:meth:`ProtectedCollection.query_batch_size`): read and
        embed queries in chunks of this size to keep a long query file in bounded memory."""
        check_keywords("Searcher.batch_size", depth, RerankDepth)
        return self.collection.query_batch_size(k, **depth)

    def search_vectors(
        self,
        Q: Any,
        k: int = 10,
        *,
        labels: Sequence[Any] | None = None,
        **options: Unpack[QueryOptions],
    ) -> list[SearchResult]:
        """Hits for query embeddings (one :class:`SearchResult` per row); ``rng`` only for
        ``protect_query`` on a collection without a key (:meth:`ProtectedCollection.query`)."""
        check_keywords("Searcher.search_vectors", options, QueryOptions)
        col = self.collection
        hits = col.query(Q, k, **options)
        reranked = options.get("rerank") is not None or options.get("recall") is not None
        kind = score_kind(col, reranked=reranked, protect_query=options.get("protect_query"))
        halfwidth = col.estimate_halfwidth() if kind == ESTIMATED else None
        labels = list(labels) if labels is not None else list(range(len(hits)))
        out = []
        for q, hs in zip(labels, hits, strict=True):
            filled = [
                h
                if h.text is not None or h.id not in self.texts
                else replace(h, text=self.texts[h.id])
                for h in hs
            ]
            intervals = None
            if kind == ESTIMATED:
                filled, intervals = _estimates(filled, halfwidth)
            out.append(SearchResult(q, filled, kind, intervals))
        return out

    def close(self) -> None:
        self.collection.close()
