"""Qdrant (local mode) behind :class:`~privembed.integrations.store_base.VectorStore`."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from .store_base import PAYLOAD_KEY, Hit, _Batch, _MetadataStore, _split_meta

__all__ = ["QdrantStore"]


#: namespace of the UUIDs that stand for record ids (Qdrant point ids are ints or UUIDs)
_QDRANT_NS = uuid.UUID("6f1c3a52-5c1e-4f7a-9d3e-1b0e6c1f2a77")
_QDRANT_ID = "privembed_id"


class QdrantStore(_MetadataStore):
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
        return self._stored_info(self._client.get_collection(self.collection).config.metadata)

    def _collection_names(self) -> list[str]:
        return [c.name for c in self._client.get_collections().collections]

    def _distance(self) -> Any:
        from qdrant_client import models

        return models.Distance.COSINE if self.metric == "cosine" else models.Distance.DOT

    def _create(self, dim: int) -> None:
        from qdrant_client import models

        self._client.create_collection(
            self.collection,
            vectors_config=models.VectorParams(size=dim, distance=self._distance()),
            metadata=self._info_metadata(),
        )

    def _write_info(self) -> None:
        self._client.update_collection(self.collection, metadata=self._info_metadata())

    def _upsert(self, batch: _Batch) -> None:
        from qdrant_client import models

        ids, X = batch.ids, batch.X
        metadata = self._metadata_of(batch)
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
                found[rid] = self._record_payload(rid, payload)
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
