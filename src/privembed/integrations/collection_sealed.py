"""Sealed collections, and the files a collection's key holder keeps beside its store.

A *sealed* collection (``mechanism="sealed"``, :mod:`privembed.search.sealed`) stores no
protected vector at all: each record is a sealed payload beside one constant placeholder
vector, and its queries never reach the store -- the key holder fetches every payload once per
collection object (or loads its encrypted local cache), opens them and ranks by the exact
cosine on its side (:class:`_SealedCollection`, a part of
:class:`~privembed.integrations.collection.ProtectedCollection`).

Arrays that a protection record keeps only by digest (a subspace basis and mean) and the k'
score profile are sealed with the key into files beside the store (:func:`_seal_npz`,
:func:`_open_npz`): the store never sees them.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import check_int
from ..keys.payload import PayloadCodec, PayloadError
from ..mechanisms import Mechanism
from ..search.sealed import (
    SEALED_GUARANTEE,
    SEALED_GUARANTEE_TEXT,
    SealedIndex,
    sealed_batch_size,
    stamp,
)
from .query import QueryTreatment
from .stores import Hit, VectorStore

#: the store info entry a sealed write changes (a random token): a cached index of an older
#: generation is stale
SEALED_GENERATION = "sealed_generation"
#: how a sealed collection's queries are treated: they never leave the client
SEALED_TREATMENT = QueryTreatment(
    "none",
    "cosine",
    "sealed: the query stays on the client; every payload is opened and ranked by exact cosine",
)


def sealed_protection(key: bytes) -> dict[str, Any]:
    """The protection record of a sealed collection: no mechanism, its guarantee as data (not
    differential privacy: :data:`privembed.search.sealed.SEALED_GUARANTEE`) and the key id."""
    from ..keys.keyed import key_id

    return {
        "protected": True,
        "sealed": True,
        "mechanism": None,
        "guarantee": json.loads(json.dumps(SEALED_GUARANTEE)),
        "guarantee_text": SEALED_GUARANTEE_TEXT,
        "key_id": key_id(key),
    }


def _sealed_params(config: dict[str, Any] | None) -> list[str]:
    """Parameters that a configuration records only by digest and that the query side needs
    (a subspace basis and mean): they stay with the key holder, sealed beside the collection."""
    from ..mechanisms import MECHANISMS

    if not isinstance(config, dict):
        return []
    cls = MECHANISMS.get(str(config.get("mechanism")))
    if cls is None or not cls.has_public_transform:
        return []
    return sorted(
        k for k, v in config.items() if isinstance(v, dict) and set(v) == {"sha256", "shape"}
    )


def _seal_npz(
    codec: PayloadCodec, path: Path, arrays: dict[str, Any], *, record_id: str, collection: str
) -> None:
    """Write ``arrays`` as an ``.npz`` sealed like a payload (under ``record_id``) to ``path``,
    atomically; the folder is made if the store has not written it yet."""
    from ..data.io import atomic_output

    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    blob = codec.seal(
        np.zeros(1, dtype=np.float32),
        record_id=record_id,
        collection=collection,
        text=base64.b64encode(buf.getvalue()).decode("ascii"),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp:
        tmp.write_bytes(blob)


def _open_npz(
    codec: PayloadCodec, path: Path, *, record_id: str, collection: str
) -> dict[str, NDArray[Any]]:
    """The arrays :func:`_seal_npz` wrote to ``path`` (a payload that does not open under
    ``record_id`` and ``collection`` raises :class:`~privembed.keys.payload.PayloadError`)."""
    opened = codec.open(path.read_bytes(), record_id=record_id, collection=collection)
    with np.load(io.BytesIO(base64.b64decode(opened.text or "")), allow_pickle=False) as z:
        return {k: np.array(z[k]) for k in z.files}


class _SealedCollection:
    """The sealed side of a :class:`~privembed.integrations.collection.ProtectedCollection`:
    the arrays its key holder keeps, and the exact local index of a sealed collection."""

    store: VectorStore
    key: bytes | None
    codec: PayloadCodec | None
    mechanism: Mechanism | None
    sealed: bool
    sealed_cache: bool
    _index: SealedIndex | None
    _sealed_params: list[str]

    def _arrays_path(self) -> Path:
        return Path(self.store.path) / f".privembed-arrays-{self.store.collection}.sealed"

    def _seal_arrays(self) -> None:
        """Seal the arrays that the configuration records only by digest and that queries need
        (a subspace basis and mean) beside the store, with the key; the store never sees them."""
        if not self._sealed_params or self.mechanism is None or self._arrays_path().exists():
            return
        assert self.key is not None  # checked when the collection was opened
        params = self.mechanism.params
        arrays = {k: np.asarray(params[k], dtype=np.float64) for k in self._sealed_params}
        _seal_npz(PayloadCodec(self.key), self._arrays_path(), arrays,
                  record_id="privembed:mechanism-arrays", collection=self.store.collection)  # fmt: skip

    def _open_arrays(self, config: dict[str, Any]) -> Mechanism:
        """The collection's mechanism, rebuilt from its configuration and the sealed arrays."""
        from ..mechanisms import build_mechanism

        path = self._arrays_path()
        if not path.exists():
            raise PayloadError(
                f"collection {self.store.collection!r} records its {', '.join(self._sealed_params)} "
                f"by digest only and the sealed copy ({path.name}) is missing: queries cannot be "
                "projected.",
                cause="missing",
            )
        assert self.key is not None  # checked when the collection was opened
        arrays = _open_npz(PayloadCodec(self.key), path, record_id="privembed:mechanism-arrays",
                           collection=self.store.collection)  # fmt: skip
        mech = build_mechanism(**{**config, **arrays})
        if mech.config != config:
            raise PayloadError(
                f"the sealed arrays of collection {self.store.collection!r} do not match its "
                "configuration (digests differ).",
                cause="mismatch",
            )
        return mech

    def _sealed_batches(
        self, clean: NDArray[Any], k: int, protect_query: Any, batch_queries: int | None
    ) -> Iterator[list[list[Hit]]]:
        """:meth:`query_batches` of a sealed collection: the local exact index, no store
        search."""
        if protect_query is not None:
            raise ValueError(
                f"collection {self.store.collection!r} is sealed: queries never leave the "
                "client, so there is nothing to protect (protect_query does not apply)."
            )
        index = self.sealed_index()
        Q = clean[None, :] if clean.ndim == 1 else clean
        step = (
            sealed_batch_size(len(index))
            if batch_queries is None
            else check_int("batch_queries", batch_queries, ge=1)
        )
        for s in range(0, Q.shape[0], step):
            yield [
                [
                    Hit(index.ids[r], score, dict(index.metadata[r] or {}), text=index.texts[r])
                    for r, score in row
                ]
                for row in index.search(Q[s : s + step], k)
            ]

    def sealed_index(self) -> SealedIndex:
        """The exact local index of a sealed collection (:class:`~privembed.search.sealed.
        SealedIndex`), built on first use and kept by this object: loaded from the encrypted
        cache beside the store when it is current (same record count, ids and write
        generation), else every payload fetched -- ids listed and sorted, then fetched and
        opened :data:`~privembed.search.sealed.FETCH_BATCH` at a time -- and the cache
        written (``sealed_cache``).

        Raises
        ------
        privembed.keys.payload.PayloadError
            A record without a payload, a payload that does not open (tampered, truncated,
            another record's), or a cache that fails authentication. Nothing is written.
        ValueError
            The collection is not sealed.
        """
        if not self.sealed:
            raise ValueError(f"collection {self.store.collection!r} is not sealed.")
        if self._index is not None:
            return self._index
        assert self.codec is not None and self.key is not None  # checked when opened
        name = self.store.collection
        ids = self.store.store_ids()
        current = stamp(ids, self.store.info.get(SEALED_GENERATION))
        path = self.sealed_cache_path
        index = None
        if self.sealed_cache:
            index = SealedIndex.load(path, key=self.key, collection=name, current=current)
        if index is None:
            index = SealedIndex.fetch(ids, self.store.payloads, self.codec, name)
            if self.sealed_cache:
                index.save(path, key=self.key, collection=name, current=current)
        self._index = index
        return index

    @property
    def sealed_cache_path(self) -> Path:
        """Where a sealed collection keeps its encrypted local index (beside the store)."""
        return Path(self.store.path) / f".privembed-sealed-{self.store.collection}.cache"
