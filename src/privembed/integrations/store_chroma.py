"""Chroma (embedded PersistentClient) behind :class:`~privembed.integrations.store_base.VectorStore`."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from .store_base import Hit, _Batch, _MetadataStore

__all__ = ["ChromaStore"]

#: hits per Chroma query call (SQLite allows 32,766 variables per statement)
_CHROMA_MAX_HITS = 16_000


class ChromaStore(_MetadataStore):
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
        return self._stored_info(self._col.metadata)

    def _collection_names(self) -> list[str] | None:
        try:
            return [c.name for c in self._client.list_collections()]
        except Exception:  # pragma: no cover - listing is only for the message
            return None

    def _create(self, dim: int) -> None:
        self._col = self._client.create_collection(
            self.collection,
            embedding_function=None,
            configuration={"hnsw": {"space": self.metric}},
            metadata=self._info_metadata(),
        )

    def _write_info(self) -> None:
        assert self._col is not None
        self._col.modify(metadata=self._info_metadata())

    def _upsert(self, batch: _Batch) -> None:
        ids, X = batch.ids, batch.X
        assert self._col is not None
        metadata = self._metadata_of(batch)
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
                found[str(rid)] = self._record_payload(str(rid), m)
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
