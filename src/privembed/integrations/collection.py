"""A protected collection: protect on the way into a vector store, treat queries on the way out.

:class:`ProtectedCollection` joins a :class:`~privembed.integrations.stores.VectorStore`, a
mechanism and its query-side treatment (:mod:`privembed.integrations.query`):

* :meth:`~ProtectedCollection.add` protects embeddings (keyed noise when a key is given, the
  same bits ``privembed protect`` would write) and upserts the releases;
* :meth:`~ProtectedCollection.add_released` upserts vectors that were protected elsewhere
  (a file written by ``privembed protect``), under the configuration recorded with them;
* :meth:`~ProtectedCollection.query` and :meth:`~ProtectedCollection.query_texts` apply the
  treatment the collection's mechanism requires and return hits, best first.

A *sealed* collection (``mechanism="sealed"``, :mod:`privembed.search.sealed`) stores no
protected vector at all: each record is a sealed payload beside one constant placeholder
vector. Its queries never reach the store: the key holder fetches every payload once per
collection object (or loads its encrypted local cache), opens them and ranks by the exact
cosine on its side.

The collection records the mechanism configuration, the guarantee, the key id and the embedding
model in the store's metadata, so a later process (``privembed search``) can query it correctly
with nothing but the store path, and refuses to mix vectors of different mechanisms or models in
one collection (their scores would not be comparable).

Ledger: with a :class:`~privembed.keys.ledger.Ledger`, every :meth:`~ProtectedCollection.add` is one
release, budget-checked before anything is sent and recorded *before* the upsert -- a store
upsert is not atomic, so a failure part-way over-counts (the safe direction) rather than leaving
released vectors unrecorded.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int
from ..core.cancel import checkpoint, cooperative
from ..core.rng import as_generator
from ..evaluation.evidence import with_evidence
from ..keys.keyed import resolve_key
from ..keys.payload import PayloadCodec, PayloadError, release_digest
from ..mechanisms import Mechanism
from ..release import Release, setting_note
from ..search.sealed import (
    PLACEHOLDER,
    SEALED_GUARANTEE,
    SEALED_GUARANTEE_TEXT,
    SealedIndex,
    sealed_batch_size,
    sealed_fetch_bytes,
    stamp,
)
from .query import QueryTreatment, protect_queries, query_treatment
from .stores import Candidates, Hit, VectorStore, check_metadata

__all__ = ["ProtectedCollection", "SearchResult", "Searcher", "index_file", "score_kind"]


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


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


class ProtectedCollection:
    """A vector-store collection whose vectors are protected by one mechanism.

    Parameters
    ----------
    store : VectorStore
        An open store. For a new collection its ``metric`` must be the one the treatment needs
        (use :meth:`open`, which picks it).
    mechanism : Mechanism, "none", "sealed" or None
        The mechanism for new vectors. ``None`` adopts the collection's stored configuration
        (query-only use, or :meth:`add_released`). ``"none"`` indexes plain, unprotected vectors.
        ``"sealed"`` stores no vector: every record is a sealed payload (the key is needed)
        beside a constant placeholder, and queries are ranked exactly on the client
        (:meth:`sealed_index`; :mod:`privembed.search.sealed` says what the store learns).
    key : bytes, optional
        Secret key for keyed noise (ids then required in :meth:`add`); a sealed collection's
        payloads are sealed and opened with it.
    rng : int, numpy.random.Generator or None
        Randomness without a key.
    embedding_model : str, optional
        Model that produced the embeddings (recorded; :meth:`query_texts` uses it).
    protection : dict, optional
        Protection metadata of vectors protected elsewhere (``privembed protect`` output); used
        with ``mechanism=None`` for a new collection.
    sealed_cache : bool, default True
        Sealed collections only: keep the index built from the decrypted payloads in a local
        file beside the store, encrypted under a key derived from ``key``
        (``.privembed-sealed-<collection>.cache``), so that the next collection object loads
        it instead of fetching every payload again while the store is unchanged.

    Examples
    --------
    >>> import tempfile
    >>> from privembed import get_mechanism
    >>> X = np.eye(4)
    >>> mech = get_mechanism("gaussian", epsilon=1e6, delta=1e-5)  # almost no noise
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with ProtectedCollection.open("faiss", tmp, "demo", mechanism=mech, key=b"k" * 32) as col:
    ...         Y = col.add(["a", "b", "c", "d"], X)   # the released vectors
    ...         [h.id for h in col.query(X[2], k=2)[0]][0]
    'c'
    """

    def __init__(
        self,
        store: VectorStore,
        *,
        mechanism: Mechanism | str | None = None,
        key: Any = None,
        rng: Any = None,
        embedding_model: str | None = None,
        protection: dict[str, Any] | None = None,
        payloads: bool | None = None,
        payload_dtype: str = "float32",
        pad_to: int | str = "padme",
        ledger: Any = None,
        sealed_cache: bool = True,
    ) -> None:
        self.store = store
        #: a :class:`~privembed.keys.ledger.Ledger` that re-ranking checks payloads against: a
        #: payload of an older release of its record (a rollback by the store) is refused
        self.ledger = ledger
        self.sealed_cache = bool(sealed_cache)
        self._index: SealedIndex | None = None
        stored = store.info.get("protection")
        self.key = None if key is None else resolve_key(key)
        if isinstance(mechanism, str):
            if mechanism not in ("none", "sealed"):
                raise ValueError(
                    "mechanism must be a Mechanism, 'none', 'sealed' or None, got "
                    f"mechanism={mechanism!r}."
                )
            protection = {"protected": False}
            if mechanism == "sealed":
                if self.key is None:
                    raise ValueError(self._needs_key(store))
                protection = sealed_protection(self.key)
            self.mechanism: Mechanism | None = None
        elif isinstance(mechanism, Mechanism):
            self.mechanism = mechanism
            protection = None  # computed by the protector below
        elif mechanism is None:
            self.mechanism = None
            if protection is None:
                if stored is None:
                    raise ValueError(
                        f"collection {store.collection!r} is new or holds no privembed "
                        "protection record; give a mechanism (or 'none' for plain vectors)."
                    )
                protection = stored
        else:
            raise TypeError(
                f"mechanism must be a Mechanism, 'none', 'sealed' or None, got "
                f"mechanism={mechanism!r}."
            )
        #: whether the collection is sealed: payloads only, ranked on the client
        self.sealed = protection is not None and bool(protection.get("sealed"))
        if self.sealed:
            if self.key is None:
                raise ValueError(self._needs_key(store))
            if payloads is False:
                raise ValueError(
                    "a sealed collection stores payloads and nothing else; payloads=False "
                    "does not apply."
                )
            payloads = True
        # one generator across adds: seeded adds never repeat each other's noise
        self._rng = None if rng is None else as_generator(rng)
        if self.mechanism is not None:
            probe = Release(self.mechanism, key=self.key, rng=0 if rng is not None else None)
            protection = probe.metadata()
            probe.close()
        elif rng is not None:
            raise ValueError("rng applies only when a mechanism protects new vectors.")
        assert protection is not None
        self.protection = protection
        if stored is not None:  # before the payloads: a mixed collection is named as such
            self._check_compatible(stored, embedding_model)
        self.codec = self._payload_codec(payloads, payload_dtype, pad_to)
        config = protection.get("mechanism") if protection.get("protected") else None
        if protection.get("protected") and not self.sealed and not isinstance(config, dict):
            raise ValueError("protection metadata has no mechanism configuration.")
        self._sealed_params = _sealed_params(config)
        if self._sealed_params and self.key is None:
            held = " and ".join(self._sealed_params)
            raise ValueError(
                f"{self._describe(protection)} keeps its {held} with the key holder, sealed "
                "beside the collection (queries are projected with them): give the key "
                "(--key-file)."
            )
        if self.mechanism is not None:
            self.treatment: QueryTreatment = query_treatment(self.mechanism)
        elif self.sealed:
            self.treatment = SEALED_TREATMENT
        elif self._sealed_params and config is not None:
            self.treatment = query_treatment(self._open_arrays(config))
        else:
            self.treatment = query_treatment(config)
        if stored is not None:
            self.embedding_model = store.info.get("embedding_model")
        else:
            self.embedding_model = embedding_model
        if store.metric != self.treatment.metric:
            raise ValueError(
                f"collection {store.collection!r} uses metric {store.metric!r} but "
                f"{self._describe(protection)} needs {self.treatment.metric!r}."
            )

    # ---- payloads ----------------------------------------------------------------------------
    def _payload_codec(
        self, payloads: bool | None, dtype: str, pad_to: int | str
    ) -> PayloadCodec | None:
        """The codec of the collection's sealed payloads (None if it has none or no key).

        ``payloads=True`` starts storing them (a key is needed); ``None`` follows the
        collection (existing payloads are opened when a key is given).
        """
        info = self.store.info.get("payloads")
        if payloads and self.key is None:
            raise ValueError(
                "payloads are sealed with your key: give a key (--key-file) to store them."
            )
        if payloads and info is None and self.store.count() > 0:
            raise ValueError(
                f"collection {self.store.collection!r} already holds vectors without payloads; "
                "payloads must be stored for every record (use a new collection)."
            )
        if payloads is False or self.key is None or (info is None and not payloads):
            return None
        codec = PayloadCodec(self.key, dtype=dtype if info is None else info["dtype"],
                             pad_to=pad_to if info is None else info.get("pad_to", 0))  # fmt: skip
        if info is not None and info.get("key_check") != codec.key_check:
            raise PayloadError(
                f"wrong key for collection {self.store.collection!r}: its payloads were sealed "
                f"with the key whose check is {info.get('key_check')}, this key's is "
                f"{codec.key_check}.",
                cause="wrong-key",
            )
        return codec

    @staticmethod
    def _needs_key(store: VectorStore) -> str:
        return (
            f"collection {store.collection!r} is sealed: its records are payloads that only "
            "your key opens; give the key (--key-file)."
        )

    @property
    def has_payloads(self) -> bool:
        """Whether the collection stores sealed payloads (exact vectors) for re-ranking."""
        return self.store.info.get("payloads") is not None

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        store: str,
        path: Any,
        collection: str = "privembed",
        *,
        mechanism: Mechanism | str | None = None,
        protection: dict[str, Any] | None = None,
        create: bool = True,
        store_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ProtectedCollection:
        """Open a store of kind ``store`` with the metric the mechanism's treatment needs."""
        from .stores import open_store

        metric = None
        if isinstance(mechanism, Mechanism):
            metric = query_treatment(mechanism).metric
        elif mechanism == "none":
            metric = query_treatment(None).metric
        elif mechanism == "sealed":
            metric = SEALED_TREATMENT.metric
        elif protection is not None:
            cfg = protection.get("mechanism") if protection.get("protected") else None
            metric = query_treatment(cfg).metric
        s = open_store(
            store, path, collection, metric=metric, create=create, **(store_options or {})
        )
        try:
            return cls(s, mechanism=mechanism, protection=protection, **kwargs)
        except BaseException:
            s.close()
            raise

    @staticmethod
    def _describe(protection: dict[str, Any]) -> str:
        if protection.get("sealed"):
            return "sealed payloads (no vectors)"
        if not protection.get("protected"):
            return "unprotected vectors"
        cfg = protection.get("mechanism") or {}
        return f"mechanism {cfg.get('mechanism', '?')!r}"

    def _check_compatible(self, stored: dict[str, Any], model: str | None) -> None:
        new, old = self.protection, stored
        if (
            bool(new.get("protected")) != bool(old.get("protected"))
            or bool(new.get("sealed")) != bool(old.get("sealed"))
            or _canon(new.get("mechanism")) != _canon(old.get("mechanism"))
        ):
            raise ValueError(
                f"collection {self.store.collection!r} holds vectors from "
                f"{self._describe(old)} ({old.get('guarantee_text', 'no guarantee')}); these "
                f"are from {self._describe(new)} with a different configuration -- mixing them "
                "makes scores incomparable; use another collection."
            )
        old_model = self.store.info.get("embedding_model")
        if model is not None and old_model is not None and model != old_model:
            raise ValueError(
                f"collection {self.store.collection!r} holds embeddings of model "
                f"{old_model!r}, not {model!r}; use another collection."
            )

    def _record_info(self, dim_in: int | None) -> None:
        if self.store.info.get("protection") is not None:
            return
        self.store.update_info(
            protection=self.protection,
            embedding_model=self.embedding_model,
            dim_in=None if dim_in is None else int(dim_in),
            query_treatment=self.treatment.description,
        )

    # ---- writing ---------------------------------------------------------------------------
    def add(
        self,
        ids: Sequence[Any],
        X: Any,
        metadata: Any = None,
        *,
        texts: Sequence[str] | None = None,
        ledger: Any = None,
        row_offset: int = 0,
    ) -> NDArray[Any]:
        """Protect ``X`` (n, d) and upsert it under ``ids``; returns the released vectors.

        With ``mechanism="none"`` the vectors are upserted as they are. ``ledger`` (a
        :class:`~privembed.keys.ledger.Ledger`) records the release before the upsert. When the
        collection stores payloads, each record's exact vector (and its text, if ``texts``
        are given) is sealed with the key and stored beside the protected vector: the store
        holds ciphertext only. A sealed collection stores the payloads alone (with each
        record's ``metadata`` sealed inside, not in the store) beside a constant placeholder,
        and returns the placeholder rows it stored; it takes no ledger (nothing is released).

        Raises
        ------
        privembed.DataError
            Bad rows, ids, metadata or texts.
        privembed.keys.ledger.BudgetExceeded
            The ledger's per-record budget would be passed (nothing is sent).
        """
        id_list = list(ids)
        if texts is not None and len(texts) != len(id_list):
            raise DataError(f"texts has {len(texts)} entries but there are {len(id_list)} ids.")
        # ids the store would merge (7 and "7") are refused before the ledger records anything
        self.store.check_ids(id_list)
        if self.sealed:
            return self._add_sealed(id_list, X, metadata, texts, ledger, row_offset)
        if self.mechanism is None:
            if self.protection.get("protected"):
                raise ValueError(
                    "this collection was opened without a mechanism; use add_released() for "
                    "vectors protected elsewhere, or open it with the mechanism."
                )
            Y, _ = check_embeddings(X, name="embeddings", row_offset=row_offset)
            self._record_info(Y.shape[1])
            self.store.upsert(id_list, Y, metadata, payloads=self._seal(id_list, Y, texts, Y))
            return Y
        arr = np.asarray(X)
        dim_in = arr.shape[-1] if arr.ndim else 0
        with Release(
            self.mechanism,
            key=self.key,
            rng=self._rng,
            ledger=ledger,
            model=self.embedding_model,
            destination=f"{type(self.store).__name__}:{self.store.collection}",
            name="embeddings",
        ) as rel:
            id_list = rel.fold(arr, id_list)  # content ids: one record per clean vector (ledger)
            Y = rel.protect(arr, id_list, row_offset=row_offset)
            rel.commit()  # the ledger records the release before anything is sent
            blobs = self._seal(id_list, arr, texts, Y)
            self._seal_arrays()
            self._record_info(dim_in)
            self.store.upsert(id_list, Y, metadata, payloads=blobs)
        return Y

    def _add_sealed(
        self,
        ids: list[Any],
        X: Any,
        metadata: Any,
        texts: Sequence[str] | None,
        ledger: Any,
        row_offset: int,
    ) -> NDArray[Any]:
        """:meth:`add` for a sealed collection: each row (with its text and metadata) sealed
        into a payload, stored beside the placeholder; returns what the store got (the
        placeholder rows). Everything is checked before anything is written."""
        if ledger is not None:
            raise ValueError(
                "a sealed collection releases no vector, so nothing is charged to a ledger; "
                "omit the ledger."
            )
        d_in = self.store.info.get("dim_in")
        arr, _ = check_embeddings(X, name="embeddings", dim=d_in, row_offset=row_offset)
        metas = check_metadata(metadata, arr.shape[0])
        self._record_info(arr.shape[1])
        blobs = self._seal(ids, arr, texts, None, metadatas=metas)
        held = np.tile(np.asarray(PLACEHOLDER, dtype=np.float32), (arr.shape[0], 1))
        # a new generation before the write (a cache taken while it runs is stale) and after
        self.store.update_info(**{SEALED_GENERATION: secrets.token_hex(16)})
        self.store.upsert(ids, held, None, payloads=blobs)
        self.store.update_info(**{SEALED_GENERATION: secrets.token_hex(16)})
        self._index = None  # the next query builds it again
        return held

    def _seal(
        self,
        ids: list[Any],
        X: Any,
        texts: Sequence[str] | None,
        released: Any,
        *,
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> list[bytes] | None:
        """Sealed payloads of the clean rows (None when the collection stores none), each
        bound to the release it is stored beside (:func:`privembed.keys.payload.release_digest` of
        its row of ``released``; ``None``: a sealed collection, which releases nothing).
        ``metadatas`` are sealed into the payloads too (a sealed collection's metadata)."""
        if self.codec is None:
            return None
        if self.store.info.get("payloads") is None:
            self.store.update_info(
                payloads={
                    "dtype": self.codec.dtype,
                    "pad_to": self.codec.pad_to,
                    "key_check": self.codec.key_check,
                    "texts": texts is not None,
                    "format": "privembed.keys.payload/2 (AES-256-GCM)",
                }
            )
        clean = np.asarray(X, dtype=np.float32)
        digests = None if released is None else [release_digest(r) for r in np.asarray(released)]
        return self.codec.seal_many(
            clean,
            ids=[str(i) for i in ids],  # the store's id: payloads open for what it returns
            collection=self.store.collection,
            texts=None if texts is None else list(texts),
            metadatas=None if metadatas is None else list(metadatas),
            releases=digests,
        )

    # ---- arrays the key holder keeps (a subspace basis) -----------------------------------------
    def _arrays_path(self) -> Path:
        return Path(self.store.path) / f".privembed-arrays-{self.store.collection}.sealed"

    def _seal_arrays(self) -> None:
        """Seal the arrays that the configuration records only by digest and that queries need
        (a subspace basis and mean) beside the store, with the key; the store never sees them."""
        if not self._sealed_params or self.mechanism is None or self._arrays_path().exists():
            return
        from ..data.io import atomic_output
        from ..keys.payload import PayloadCodec

        assert self.key is not None  # checked when the collection was opened
        params = self.mechanism.params
        arrays: dict[str, Any] = {
            k: np.asarray(params[k], dtype=np.float64) for k in self._sealed_params
        }
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        blob = PayloadCodec(self.key).seal(
            np.zeros(1, dtype=np.float32),
            record_id="privembed:mechanism-arrays",
            collection=self.store.collection,
            text=base64.b64encode(buf.getvalue()).decode("ascii"),
        )
        path = self._arrays_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path) as tmp:
            tmp.write_bytes(blob)

    def _open_arrays(self, config: dict[str, Any]) -> Mechanism:
        """The collection's mechanism, rebuilt from its configuration and the sealed arrays."""
        from ..keys.payload import PayloadCodec
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
        opened = PayloadCodec(self.key).open(
            path.read_bytes(), record_id="privembed:mechanism-arrays",
            collection=self.store.collection,
        )  # fmt: skip
        with np.load(io.BytesIO(base64.b64decode(opened.text or "")), allow_pickle=False) as z:
            arrays = {k: np.array(z[k]) for k in z.files}
        mech = build_mechanism(**{**config, **arrays})
        if mech.config != config:
            raise PayloadError(
                f"the sealed arrays of collection {self.store.collection!r} do not match its "
                "configuration (digests differ).",
                cause="mismatch",
            )
        return mech

    def add_released(
        self, ids: Sequence[Any], Y: Any, metadata: Any = None, *, dim_in: int | None = None
    ) -> None:
        """Upsert vectors already released under this collection's protection record.

        Payloads need the clean vectors, which a file of releases does not hold: a collection
        with payloads (a sealed one too) cannot take pre-released vectors.
        """
        if self.sealed:
            raise ValueError(
                "a sealed collection seals the clean embeddings (it stores no released "
                "vector); add() them instead."
            )
        if self.codec is not None or self.has_payloads:
            raise ValueError(
                "this collection stores payloads (exact vectors for re-ranking); released "
                "vectors alone cannot fill them -- index the clean embeddings with the "
                "mechanism instead."
            )
        arr, _ = check_embeddings(Y, name="released", allow_zero=True)
        if dim_in is None and self.treatment.kind == "none":
            dim_in = arr.shape[1]  # noise mechanisms keep the dimension
        self._record_info(dim_in)
        self.store.upsert(list(ids), arr, metadata)

    # ---- reading ---------------------------------------------------------------------------
    def query(
        self,
        Q: Any,
        k: int = 10,
        *,
        rerank: int | None = None,
        recall: float | None = None,
        protect_query: Mechanism | None = None,
        rng: Any = None,
        batch_queries: int | None = None,
    ) -> list[list[Hit]]:
        """Hits for plain query embeddings ``Q`` (nq, d) or (d,), best first.

        Without re-ranking, scores are estimates of the clean cosine where the mechanism allows
        it (:meth:`QueryTreatment.score_scale`: unbiased, so they may leave [-1, 1]), raw
        cosines otherwise.

        Private retrieval (DESIGN.md): with ``rerank=k'`` (or ``recall``: k' from theory,
        :class:`privembed.search.rerank.RerankPlanner` on the profile saved at indexing), the ``k'``
        nearest records by protected similarity are fetched, their payloads opened here with
        the key, and the top ``k`` re-ranked by the exact cosine to the clean query; the hits
        then carry exact cosines and the stored texts. ``protect_query`` protects the query
        before it reaches the store (RemoteRAG pattern) with keyed noise under the collection's
        key (:func:`~privembed.integrations.query.protect_queries`: a repeated query gets the
        same vector; without a key an explicit ``rng`` is required); the re-rank still uses the
        clean query.

        Queries are searched ``batch_queries`` at a time (default :meth:`query_batch_size`):
        only one batch's candidates are held at once, so memory follows k' and the dimension,
        not the number of queries (:meth:`query_batches` yields the batches as they finish).

        A sealed collection ranks every record by its exact cosine on the client
        (:meth:`sealed_index`, built on the first query); nothing about the query reaches the
        store. Its hits carry exact cosines, the sealed texts and metadata. ``rerank`` and
        ``recall`` are accepted and ignored there (the ranking is already exact over the whole
        corpus, so any k' is met); ``protect_query`` is refused (nothing is sent to protect).

        Raises
        ------
        privembed.keys.payload.PayloadError
            A wrong key, a missing, truncated or tampered payload, or one moved between records.
        ValueError
            Re-ranking asked of a collection made without payloads, or without the key.
        """
        out: list[list[Hit]] = []
        for hits in self.query_batches(
            Q, k, rerank=rerank, recall=recall, protect_query=protect_query, rng=rng,
            batch_queries=batch_queries,
        ):  # fmt: skip
            out.extend(hits)
        return out

    def query_batches(
        self,
        Q: Any,
        k: int = 10,
        *,
        rerank: int | None = None,
        recall: float | None = None,
        protect_query: Mechanism | None = None,
        rng: Any = None,
        batch_queries: int | None = None,
    ) -> Iterator[list[list[Hit]]]:
        """:meth:`query`, one list of per-query hits per batch of ``batch_queries`` queries."""
        k = check_int("k", k, ge=1)
        d_in = self.store.info.get("dim_in")
        arr = np.asarray(Q)
        if d_in is not None and arr.ndim >= 1 and arr.shape[-1] != d_in:
            raise DataError(
                f"query has dimension {arr.shape[-1]} but the collection was built from "
                f"{d_in}-dimensional embeddings (dimension mismatch)."
            )
        clean, _ = check_embeddings(arr, name="query")
        if self.sealed:
            yield from self._sealed_batches(clean, k, protect_query, batch_queries)
            return
        depth = self._depth(k, rerank, recall, protect_query)
        step = (
            self.query_batch_size(k, rerank=rerank, recall=recall, protect_query=protect_query)
            if batch_queries is None
            else check_int("batch_queries", batch_queries, ge=1)
        )
        sent = clean
        if protect_query is not None:  # keyed query noise: a repeat gets the same vector
            sent = protect_queries(protect_query, clean, key=self.key if rng is None else None,
                                   rng=rng, model=self.embedding_model)  # fmt: skip
        Qt = self.treatment.apply(sent)
        Qt = Qt[None, :] if Qt.ndim == 1 else Qt
        scale = 1.0
        if depth is None:
            d = int(d_in if d_in is not None else arr.shape[-1])
            scale = self.treatment.score_scale(d) if d >= 2 and protect_query is None else 1.0
        for s in range(0, Qt.shape[0], step):
            if depth is None:
                hits = self.store.search(Qt[s : s + step], k)
                if scale != 1.0:
                    hits = [[replace(h, score=h.score * scale) for h in hs] for hs in hits]
                yield hits
            else:
                fetched = self.store.candidates(Qt[s : s + step], depth)
                yield self._exact_top(clean[s : s + step], fetched, k)

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

    def query_batch_size(
        self,
        k: int = 10,
        *,
        rerank: int | None = None,
        recall: float | None = None,
        protect_query: Mechanism | None = None,
    ) -> int:
        """Queries :meth:`query` searches together for these settings: as many as keep their
        k' candidates each within :data:`privembed.search.rerank.SEARCH_BATCH_BYTES`
        (:func:`privembed.search.rerank.query_batch_size`)."""
        from ..search.rerank import query_batch_size

        k = check_int("k", k, ge=1)
        if self.sealed:
            return sealed_batch_size(self.store.count())
        depth = self._depth(k, rerank, recall, protect_query) or k
        info = self.store.info
        dim = int(info.get("dim_in") or info.get("dim") or 1)
        itemsize = 2 if (info.get("payloads") or {}).get("dtype") == "float16" else 4
        return query_batch_size(depth, dim, payload_itemsize=itemsize)

    def fetch_plan(
        self,
        k: int = 10,
        *,
        rerank: int | None = None,
        recall: float | None = None,
        protect_query: Mechanism | None = None,
    ) -> dict[str, Any] | None:
        """What one query fetches at these settings: ``depth`` (k' candidates), ``payloads``
        opened and ``bytes`` (candidates' vectors and payloads, ids, the query sent;
        :func:`privembed.evaluation.cost.query_cost`'s model). None when nothing is re-ranked;
        for a sealed collection every payload, once per session with its cache.

        ``search`` prints it: the k' that ``--recall`` chose and what it costs.
        """
        from ..evaluation.cost import Rates, query_cost

        n = max(1, self.store.count())
        info = self.store.info
        d_in = int(info.get("dim_in") or info.get("dim") or 1)
        if self.sealed:  # every payload, whether per query or once per session
            return {"depth": n, "payloads": n, "bytes": sealed_fetch_bytes(n, d_in), "sealed": True}
        depth = self._depth(k, rerank, recall, protect_query)
        if depth is None:
            return None
        d_store = int(info.get("dim") or d_in)
        untimed = Rates(0.0, 0.0, "not timed")  # bytes and payloads only
        c = query_cost("rerank", n=n, d=d_in, store_dim=d_store, depth=depth, rates=untimed)
        return {"depth": depth, "payloads": c.payloads, "bytes": c.bytes, "sealed": False}

    def _depth(
        self, k: int, rerank: int | None, recall: float | None, protect_query: Any
    ) -> int | None:
        if rerank is None and recall is None:
            return None
        if rerank is not None and recall is not None:
            raise ValueError("give rerank (k') or recall (k' from theory), not both.")
        if not self.has_payloads:
            raise ValueError(
                f"collection {self.store.collection!r} was made without payloads, so there are "
                "no exact vectors to re-rank with (index it with payloads: --payloads)."
            )
        if self.codec is None:
            raise ValueError("re-ranking opens the payloads with your key: give it (--key-file).")
        if rerank is not None:
            return check_int("rerank", rerank, ge=k)
        planner = self.planner(protect_query)
        depth = max(k, planner.depth(k=k, recall=float(recall)))  # type: ignore[arg-type]
        if not self.store.approximate:
            return depth
        # an approximate index finds a share r of the exact top k': plan for recall / r, with r
        # measured at the k' planned, until k' settles
        for _ in range(6):
            r = self._search_recall(depth)
            if recall / r >= 1.0:  # type: ignore[operator]
                raise ValueError(
                    f"the store's approximate index finds {r:.3f} of the exact top {depth:,}, "
                    f"so no k' reaches recall {recall}: search exactly (a FAISS 'Flat' store, "
                    "pgvector without an index) or with an index that searches deeper "
                    "(pgvector's HNSW returns at most 1,000)."
                )
            more = max(k, planner.depth(k=k, recall=recall / r))  # type: ignore[operator]
            if more <= depth:
                return depth
            depth = more
        raise ValueError(
            f"k' does not settle for recall {recall} with the store's approximate index (it "
            f"finds {r:.3f} of the exact top {depth:,}): search exactly (a FAISS 'Flat' store)."
        )

    def _search_recall(self, depth: int, n_queries: int = 32) -> float:
        """The store's measured recall of the exact top ``depth`` (``search_recall``) on
        pseudo-queries made from ``n_queries`` records' exact vectors (fixed seed), cached."""
        from ..search.rerank import pseudo_queries

        cache: dict[int, float] = self.__dict__.setdefault("_search_recalls", {})
        if depth not in cache:
            assert self.codec is not None
            ids = self.store.store_ids()
            pick = np.random.default_rng(0).choice(
                len(ids), min(n_queries, len(ids)), replace=False
            )
            chosen = [ids[i] for i in sorted(pick.tolist())]
            blobs = self.store.payloads(chosen)
            X = self.codec.open_batch(blobs, ids=chosen, collection=self.store.collection).vectors  # type: ignore[arg-type]
            Qt = self.treatment.apply(pseudo_queries(X, rng=0))
            cache[depth] = float(self.store.search_recall(Qt, depth))
        return cache[depth]

    def _exact_top(self, clean: NDArray[Any], fetched: Candidates, k: int) -> list[list[Hit]]:
        """Open the candidates' payloads -- each record once for the whole batch, read as one
        block (:meth:`VectorStore.payload_block`) and opened as one
        (:meth:`PayloadCodec.open_block`) -- and keep each query's top ``k`` by exact cosine
        (rows of ``clean``); hits are built for those only."""
        assert self.codec is not None
        nq = fetched.rows.shape[0]
        if len(fetched) == 0:
            return [[] for _ in range(nq)]
        ids = self.store.candidate_ids(fetched)
        block, offsets = self.store.payload_block(fetched)
        missing = np.flatnonzero(np.diff(offsets) == 0)
        if missing.size:
            raise PayloadError(
                f"record {ids[int(missing[0])]!r} has no payload in collection "
                f"{self.store.collection!r} ({missing.size} of {len(ids)} candidates); the "
                "store lost or dropped it.",
                cause="missing",
            )
        current = self._current_releases(ids)
        # one batch: the vectors stacked, texts parsed only for the hits kept
        opened = self.codec.open_block(block, offsets, ids=ids, collection=self.store.collection)
        if current:
            for rid, rel in zip(ids, opened.releases, strict=True):
                allowed = current.get(rid)
                if allowed is not None and rel not in allowed:
                    raise PayloadError(
                        f"payload of record {rid!r} belongs to another release of the record "
                        "than the ledger's current one (the store holds an older copy: a "
                        "rollback).",
                        cause="stale",
                    )
        V = opened.vectors.astype(np.float64)
        V /= np.sqrt(np.einsum("ij,ij->i", V, V))[:, None]  # no (u, d) temporary
        Qn = np.asarray(clean, dtype=np.float64)
        Qn = Qn / np.linalg.norm(Qn, axis=1, keepdims=True)
        out: list[list[Hit]] = []
        texts: dict[int, str | None] = {}
        for q, row in zip(Qn, fetched.rows, strict=True):
            row = row[row >= 0]
            exact = V[row] @ q  # per query: a score does not depend on the batch it is in
            keep = np.argsort(-exact, kind="stable")[:k]
            kept = row[keep].tolist()
            scores = exact[keep].tolist()
            hits = self.store.candidate_hits(fetched, kept, scores)
            for r in kept:
                if r not in texts:
                    texts[r] = opened.payload(r).text
            out.append([replace(h, text=texts[r]) for h, r in zip(hits, kept, strict=True)])
        return out

    def _current_releases(self, ids: list[str]) -> dict[str, frozenset[bytes]]:
        """For each store id the ledger recorded, the releases its payload may belong to
        (:meth:`privembed.keys.ledger.Ledger.current_releases`). The store id ``"5"`` is the
        record the collection's numeric ids make it (:meth:`VectorStore.record_id`: int 5 or
        string "5"); in a collection that has not recorded their type, both are looked up."""
        if self.ledger is None or not ids:
            return {}
        from ..keys.ledger import record_key

        untyped = self.store.numeric_ids is None
        keys: dict[str, list[str]] = {}
        for rid in ids:
            forms = [record_key(self.store.record_id(rid))]
            if untyped and rid.lstrip("-").isdigit() and str(int(rid)) == rid:
                forms.append(record_key(int(rid)))
            keys[rid] = forms
        found = self.ledger.current_releases([k for ks in keys.values() for k in ks])
        out: dict[str, frozenset[bytes]] = {}
        for rid, ks in keys.items():
            sets = [found[k] for k in ks if k in found]
            if sets:
                out[rid] = frozenset().union(*sets)
        return out

    def estimate_halfwidth(self) -> float | None:
        r"""Half-width of an approximate 95% interval for the clean cosine around a calibrated
        score (``None`` when scores are not estimates, or the law is not known).

        The estimate is :math:`t / \bar c` with
        :math:`t = c\,s + \sqrt{1-c^2}\sqrt{1-s^2}\,\xi` (:mod:`privembed.search.rerank`;
        :math:`\xi` has variance :math:`1/(d-1)`), so its variance is at most
        :math:`\max(\mathrm{Var}\,c,\ E[1-c^2]/(d-1)) / \bar c^2` whatever the clean cosine
        :math:`s`. The half-width is 1.96 times the square root of that bound, from the law of
        :math:`c` (:func:`privembed.search.rerank.cosine_law`, 20,000 draws, fixed seed). It holds
        for one record taken alone: the best-scoring hits of a search are selected for their
        high scores, so theirs lean high (the winner's curse).
        """
        cache = self.__dict__.setdefault("_halfwidth", {})
        d = self.store.info.get("dim_in") or self.store.dim
        if not self.treatment.calibrated or self.treatment.mechanism is None or d is None:
            return None
        d = int(d)
        if d not in cache:
            from ..search.rerank import cosine_law

            try:
                c = cosine_law(self.treatment.mechanism, d, n=20_000, rng=0)
            except ValueError:  # a mechanism that changes the dimension (projection)
                cache[d] = None
            else:
                var = max(float(c.var()), float(np.mean(1.0 - c * c)) / (d - 1))
                cache[d] = 1.96 * math.sqrt(var) / float(c.mean())
        return cache[d]

    # ---- k' from theory ---------------------------------------------------------------------
    def _profile_path(self) -> Path:
        return Path(self.store.path) / f".privembed-profile-{self.store.collection}.sealed"

    def _profile_target(self) -> _ProfileTarget:
        """What sealing a profile needs from this collection, without the store (the profile
        of :func:`index_file` is made once the store is closed and its vectors freed)."""
        if self.codec is None:
            raise ValueError("the profile is sealed with your key: give it (--key-file).")
        return _ProfileTarget(
            codec=self.codec,
            mechanism=self.mechanism if self.mechanism is not None else self.treatment.mechanism,
            collection=self.store.collection,
            path=self._profile_path(),
            n_total=self.store.count(),
        )

    def save_profile(
        self, sample: Any, documents: Any, *, rng: Any = None, source: str = "queries"
    ) -> None:
        """Build and keep the corpus' clean-score profile for :meth:`query` ``recall=``.

        ``documents`` are the corpus' clean vectors (or a uniform sample of them) and
        ``sample`` the rows that stand in for future queries: real queries when there are
        some (``source="queries"``), or rows of ``documents`` (``source="documents"``), which
        are diluted into pseudo-queries first (:func:`privembed.search.rerank.pseudo_queries`):
        documents used as they are make ``k'`` too small where queries and documents differ
        (on the GCIDE task, recall 0.05 below target on average, docs/retrieval.md). The profile holds similarity
        histograms of the clean corpus, so it is sealed with the key like a payload, beside
        the store.
        """
        from ..core._validation import check_choice

        source = check_choice("source", source, ("queries", "documents"))
        if self.sealed:
            raise ValueError(
                f"collection {self.store.collection!r} is sealed and ranks exactly: it has no "
                "k' to plan, so no score profile."
            )
        self._profile_target().seal(sample, documents, rng=rng, source=source)
        self.__dict__["_planners"] = {}

    @property
    def profile_source(self) -> str | None:
        """What stood in for queries in the k' profile: "queries", "documents", or None when
        the collection has no profile (or it was not opened yet)."""
        if "_profile_source" not in self.__dict__ and self._profile_path().exists():
            if self.codec is None:
                return None
            self.planner()
        return self.__dict__.get("_profile_source")

    def planner(self, protect_query: Mechanism | None = None) -> Any:
        """The :class:`privembed.search.rerank.RerankPlanner` of this collection (needs its profile)."""
        from ..search.rerank import RerankPlanner, ScoreProfile

        cache: dict[str | None, Any] = self.__dict__.setdefault("_planners", {})
        key = None if protect_query is None else protect_query.fingerprint
        if key in cache:
            return cache[key]
        path = self._profile_path()
        if not path.exists():
            raise ValueError(
                f"collection {self.store.collection!r} has no score profile for recall= (build "
                "one at indexing, or give rerank=k')."
            )
        assert self.codec is not None
        opened = self.codec.open(
            path.read_bytes(), record_id="privembed:rerank-profile",
            collection=self.store.collection,
        )  # fmt: skip
        with np.load(io.BytesIO(base64.b64decode(opened.text or ""))) as z:
            prof = ScoreProfile.from_arrays(z)
            self.__dict__["_profile_source"] = str(z["source"]) if "source" in z else "documents"
        docs = self.mechanism if self.mechanism is not None else self.treatment.mechanism
        cache[key] = RerankPlanner(prof, documents=docs, queries=protect_query, rng=0)
        return cache[key]

    def query_texts(
        self, texts: str | Sequence[str], k: int = 10, *, model: str | None = None
    ) -> list[list[Hit]]:
        """Embed ``texts`` with the collection's model (or ``model``) and :meth:`query`."""
        from ..data.embedders import Embedder

        name = model or self.embedding_model
        if name is None:
            raise ValueError(
                f"collection {self.store.collection!r} records no embedding model; pass the "
                "model that made its embeddings (--model)."
            )
        items = [texts] if isinstance(texts, str) else list(texts)
        return self.query(Embedder(name).encode(items), k)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> ProtectedCollection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


class Searcher:
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
        *,
        key: Any = None,
        model: str | None = None,
        texts: Any = None,
        store_options: dict[str, Any] | None = None,
        ledger: Any = None,
        sealed_cache: bool = True,
    ) -> None:
        from .stores import open_store

        if not Path(path).exists():
            raise FileNotFoundError(f"store not found: {path}")
        opened = open_store(store, path, collection, create=False, **(store_options or {}))
        try:
            self.collection = ProtectedCollection(
                opened, key=key, ledger=ledger, sealed_cache=sealed_cache
            )
        except BaseException:
            opened.close()
            raise
        self.model_name = model or self.collection.embedding_model
        self._embedder: Any = None
        self.texts = self._load_texts(texts)

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
        self,
        queries: str | Sequence[str],
        k: int = 10,
        *,
        rerank: int | None = None,
        recall: float | None = None,
        protect_query: Mechanism | None = None,
        batch_queries: int | None = None,
    ) -> list[SearchResult]:
        """Hits for text queries (see :meth:`ProtectedCollection.query`), embedded a batch at
        a time."""
        items = [queries] if isinstance(queries, str) else list(queries)
        out: list[SearchResult] = []
        step = batch_queries or self.batch_size(
            k, rerank=rerank, recall=recall, protect_query=protect_query
        )
        for s in range(0, len(items), step):
            chunk = items[s : s + step]
            out += self.search_vectors(
                self.embed(chunk), k, labels=chunk, rerank=rerank, recall=recall,
                protect_query=protect_query, batch_queries=step,
            )  # fmt: skip
        return out

    def batch_size(
        self,
        k: int = 10,
        *,
        rerank: int | None = None,
        recall: float | None = None,
        protect_query: Mechanism | None = None,
    ) -> int:
        """Queries searched together (:meth:`ProtectedCollection.query_batch_size`): read and
        embed queries in chunks of this size to keep a long query file in bounded memory."""
        return self.collection.query_batch_size(
            k, rerank=rerank, recall=recall, protect_query=protect_query
        )

    def search_vectors(
        self,
        Q: Any,
        k: int = 10,
        *,
        labels: Sequence[Any] | None = None,
        rerank: int | None = None,
        recall: float | None = None,
        protect_query: Mechanism | None = None,
        batch_queries: int | None = None,
        rng: Any = None,
    ) -> list[SearchResult]:
        """Hits for query embeddings (one :class:`SearchResult` per row); ``rng`` only for
        ``protect_query`` on a collection without a key (:meth:`ProtectedCollection.query`)."""
        col = self.collection
        hits = col.query(
            Q, k, rerank=rerank, recall=recall, protect_query=protect_query,
            batch_queries=batch_queries, rng=rng,
        )  # fmt: skip
        kind = score_kind(
            col, reranked=rerank is not None or recall is not None, protect_query=protect_query
        )
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

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _text_batches(
    path: Path,
    batch_rows: int,
    *,
    model: str | None,
    text_field: str,
    id_field: str,
    ids_from_content: bool,
    needs_ids: bool,
    key: Any = None,
) -> tuple[int, str, Any]:
    """(n, model id, iterator of (ids, X, texts, start)) for a file of texts, embedded here."""
    from ..data.embedders import Embedder
    from ..data.io import read_texts
    from ..release import content_ids

    ids, texts = read_texts(path, text_key=text_field, id_key=id_field)
    if ids is None:
        if needs_ids and not ids_from_content:
            raise DataError(
                f"{path.name}: keyed noise, payloads and the ledger need record ids, and these "
                f"texts have none (line numbers are not ids); add an {id_field!r} field "
                "(--id-field) or derive ids from the text (--ids-from-content)."
            )
        ids = content_ids(key=key, texts=texts) if ids_from_content else list(range(len(texts)))
    emb = Embedder(model)

    def gen() -> Any:
        for s in range(0, len(texts), batch_rows):
            chunk = texts[s : s + batch_rows]
            yield ids[s : s + batch_rows], emb.encode(chunk), chunk, s

    return len(texts), str(emb.metadata().get("embedding_model")), gen()


def _profile_query_vectors(queries: Any, model: str | None) -> NDArray[np.float32]:
    """Sample queries for the k' profile: a file of texts (embedded with ``model``) or of
    embeddings, or an array."""
    from ..release import is_text_file

    if isinstance(queries, str | Path):
        qp = Path(queries)
        if not qp.exists():
            raise FileNotFoundError(f"profile queries not found: {qp}")
        if is_text_file(qp):
            from ..data.embedders import Embedder
            from ..data.io import read_text_table

            Q = Embedder(model).encode(read_text_table(qp).texts)
        else:
            from ..data.io import read_embeddings

            Q = read_embeddings(qp).X
    else:
        Q = queries
    arr, _ = check_embeddings(Q, name="profile queries")
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise DataError("profile queries must be a non-empty (n, d) array.")
    return np.asarray(arr, dtype=np.float32)


@dataclass
class _IndexInput:
    """A file opened for :func:`index_file`: its size, metadata and model, and its batches of
    (ids, X, texts to store, other columns, first row)."""

    path: Path
    n: int
    dim: int | None
    meta: dict[str, Any]
    model: str | None
    needs_ids: bool
    wanted: list[str]
    batches: Iterator[tuple[Any, Any, Any, Any, int]]
    #: the file's batches of (X, first row) once more (an embeddings file; None for texts,
    #: embedded as they are read): the profile's sample is gathered by row number
    reread: Callable[[], Iterator[tuple[Any, int]]] | None = None

    @property
    def protection(self) -> dict[str, Any]:
        """The protection the file records (for vectors protected elsewhere)."""
        from ..release import PROTECTION_KEYS

        return {k: self.meta[k] for k in PROTECTION_KEYS if k in self.meta}

    def ids(self, ids: Any, start: int, nb: int) -> list[Any]:
        """A batch's record ids, or its row numbers where no ids are needed."""
        if ids is not None:
            return list(ids)
        if self.needs_ids:
            raise DataError(
                f"{self.path} has no record ids; keyed noise, payloads and the ledger need "
                "an id column (--id-field) in a Parquet, .npz or .jsonl file."
            )
        return list(range(start, start + nb))

    def metadata(self, extra: Any, nb: int) -> list[dict[str, Any]] | None:
        """The ``--metadata-field`` columns of a batch, one dict per row (None: none wanted)."""
        if not self.wanted:
            return None
        have = [] if extra is None else list(extra.schema.names)
        missing = [c for c in self.wanted if c not in have]
        if missing:
            raise ValueError(
                f"{self.path} has no column(s) {missing} for --metadata-field "
                f"(other columns: {have or 'none'})."
            )
        cols = {c: extra.column(c).to_pylist() for c in self.wanted}
        return [{c: cols[c][i] for c in self.wanted} for i in range(nb)]


def _index_input(
    input: str | Path,
    batch_rows: int,
    *,
    model: str | None,
    column: str | None,
    id_column: str | None,
    metadata_columns: Sequence[str] | None,
    store_text: bool,
    text_field: str,
    ids_from_content: bool,
    needs_ids: bool,
    key: Any,
) -> _IndexInput:
    """Open a file of texts (embedded here) or of embeddings for :func:`index_file`."""
    from ..data.io import iter_batches
    from ..release import is_text_file

    input = Path(input)
    if not input.exists():
        raise FileNotFoundError(f"file not found: {input}")
    wanted = list(metadata_columns or [])
    if is_text_file(input):
        if wanted:
            raise ValueError(
                "--metadata-field reads columns of an embeddings file; for texts, run "
                "'privembed embed' first (it keeps every other field)."
            )
        n, text_model, text_gen = _text_batches(
            input,
            batch_rows,
            model=model,
            text_field=text_field,
            id_field=id_column or "id",
            ids_from_content=ids_from_content,
            needs_ids=needs_ids,
            key=key,
        )
        rows = ((ids, X, tx if store_text else None, None, s) for ids, X, tx, s in text_gen)
        return _IndexInput(input, n, None, {}, text_model, needs_ids, wanted, rows)
    if store_text:
        raise ValueError("--store-text needs texts as input (this file holds embeddings).")
    n, dim, meta, raw = iter_batches(
        input, batch_rows=batch_rows, column=column, id_column=id_column
    )
    batches = ((b.ids, b.X, None, b.extra, b.start) for b in raw)
    emb_model = meta.get("embedding_model") or model
    return _IndexInput(
        input, n, dim if dim > 0 else None, meta, emb_model, needs_ids, wanted, batches,
        _rereader(input, batch_rows, column=column, id_column=id_column),
    )  # fmt: skip


def _rereader(
    path: Path, batch_rows: int, *, column: str | None, id_column: str | None
) -> Callable[[], Iterator[tuple[Any, int]]]:
    """A second pass over an embeddings file, refused if the file changed since the first."""
    from ..data.io import iter_batches

    before = path.stat()

    def again() -> Iterator[tuple[Any, int]]:
        now = path.stat()
        if (now.st_size, now.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            raise DataError(f"{path} changed while it was indexed; index it again.")
        _, _, _, raw = iter_batches(path, batch_rows=batch_rows, column=column,
                                    id_column=id_column)  # fmt: skip
        return ((b.X, b.start) for b in raw)

    return again


def _check_index_mode(
    source: _IndexInput,
    mechanism: Mechanism | str | None,
    *,
    key: Any,
    rng: Any,
    ledger: Any,
    payloads: bool,
    allow_reprotect: bool,
) -> None:
    """Refuse a mechanism that does not fit the input (already protected or not), a ledger
    where nothing is released here, and payloads without the exact vectors."""
    from ..release import refuse_protected

    input = source.path
    protected_in = bool(source.meta.get("protected"))
    if mechanism == "sealed":
        if protected_in:
            raise ValueError(
                f"{input} is protected: a sealed collection seals the clean embeddings (a file "
                "of releases does not hold them)."
            )
        if key is None:
            raise ValueError("a sealed collection is sealed with your key: give it (--key-file).")
        if rng is not None:
            raise ValueError("a sealed collection adds no noise: --seed does not apply.")
        if ledger is not None:
            raise ValueError(
                "a sealed collection releases no vector, so nothing is charged: --ledger does "
                "not apply."
            )
        return
    if mechanism is None:
        if not protected_in:
            raise ValueError(
                f"{input} is not protected; pass --mechanism NAME to protect it on the way in "
                "(or --mechanism none to index plain vectors)."
            )
        if key is not None or rng is not None:
            raise ValueError(f"{input} is already protected; --key-file/--seed do not apply.")
    elif mechanism == "none":
        if protected_in:
            raise ValueError(f"{input} is protected; omit --mechanism to index it as it is.")
    else:
        refuse_protected(
            source.meta,
            input,
            allow=allow_reprotect,
            hint="omit --mechanism to index it as it is, or pass --allow-reprotect",
        )
    protects = isinstance(mechanism, Mechanism)
    if ledger is not None and not protects:
        raise ValueError("--ledger records new releases; this input is not protected here.")
    if payloads and mechanism is None:
        raise ValueError(
            "payloads hold the exact vectors, which a file of releases does not have: index "
            "the clean embeddings with the mechanism instead."
        )


#: bytes of clean scores (float64, one per document) a profile scores at once: the sample
#: queries go through in blocks of at most 256 rows and this many bytes (32 MiB: 20 queries a
#: block against 200,000 documents), as each block is copied a few times while it is binned
PROFILE_BLOCK_BYTES = 32 << 20


def _profile_block(n_docs: int, n_queries: int) -> int:
    """Sample queries scored at once against ``n_docs`` documents (:data:`PROFILE_BLOCK_BYTES`).

    The profile does not depend on it: each query's scores are its own, and a block is never a
    lone query unless there is only one (a product with one row is a matrix-vector product,
    whose sums can differ from a matrix product's in the last bit)."""
    top = max(2, min(256, PROFILE_BLOCK_BYTES // (8 * max(int(n_docs), 1))))
    for block in (*range(top, 1, -1), *range(top + 1, n_queries + 1)):
        if n_queries <= block or n_queries % block != 1:
            return block
    return top


@dataclass(frozen=True)
class _ProfileTarget:
    """Where a collection's clean-score profile goes and what it is made with: the payload
    codec (the profile is sealed like a payload), the mechanism whose k' it plans, the
    collection's name and profile file, and how many records the collection holds (a profile
    of a sample scales its counts up to them)."""

    codec: PayloadCodec
    mechanism: Mechanism | None
    collection: str
    path: Path
    n_total: int

    def seal(self, sample: Any, documents: Any, *, rng: Any, source: str) -> None:
        """Build the profile (:meth:`ProtectedCollection.save_profile`) and write it sealed."""
        from ..search.rerank import (
            SUBSPACE_PSEUDO_QUERY_DILUTION,
            ScoreProfile,
            document_rows,
            pseudo_queries,
            subspace_profile_needed,
        )

        n_docs = int(np.asarray(documents).shape[0])
        if n_docs < 3:
            raise ValueError(f"a score profile needs at least 3 documents, got {n_docs}.")
        sources, dilution = None, 0.0
        block = _profile_block(n_docs, int(np.asarray(sample).shape[0]))
        if source == "documents":  # documents stand in for queries: made query-like (k' theory)
            sources = document_rows(sample, documents, block=block)
            sample = pseudo_queries(sample, rng=rng)
            dilution = SUBSPACE_PSEUDO_QUERY_DILUTION
        mech = self.mechanism
        top_k = min(100, n_docs - 1)
        if mech is not None and subspace_profile_needed(mech):
            prof = ScoreProfile.from_subspace(
                sample, documents, mech, top_k=top_k, sources=sources, dilution=dilution,
                block=block, rng=rng,
            )  # fmt: skip
        else:
            prof = ScoreProfile.from_embeddings(
                sample, documents, top_k=top_k, rng=rng, sources=sources, block=block
            )
        n_total = max(self.n_total, prof.n_docs)
        if n_total > prof.n_docs:  # a sample of the corpus: histogram counts scaled up
            scale = n_total / prof.n_docs
            prof = replace(prof, counts=np.rint(prof.counts * scale).astype(np.int64))
            object.__setattr__(prof, "n_docs", n_total)
        buf = io.BytesIO()
        np.savez_compressed(
            buf,
            counts=prof.counts.astype(np.int64),
            top=prof.top,
            edges=np.asarray(prof.edges),
            meta=np.array([prof.n_docs, prof.dim], dtype=np.int64),
            rho=np.array([prof.rho]),
            source=np.array(source),
            **prof._norm_arrays(),
        )
        blob = self.codec.seal(
            np.zeros(1, dtype=np.float32),
            record_id="privembed:rerank-profile",
            collection=self.collection,
            text=base64.b64encode(buf.getvalue()).decode("ascii"),
        )
        from ..data.io import atomic_output

        self.path.parent.mkdir(parents=True, exist_ok=True)  # a store may not have written yet
        with atomic_output(self.path) as tmp:
            tmp.write_bytes(blob)


class _ProfileSample:
    """What a collection's clean-score profile is made from (payloads only): real queries, or
    ``count`` documents standing in for them, and a uniform sample of the documents."""

    def __init__(
        self,
        payloads: bool,
        queries: Any,
        max_docs: int,
        model: str | None,
        reread: Callable[[], Iterator[tuple[Any, int]]] | None = None,
    ) -> None:
        self.queries: NDArray[np.float32] | None = None
        if payloads and not isinstance(queries, int):
            self.queries = _profile_query_vectors(queries, model)
        elif not isinstance(queries, int) or isinstance(queries, bool):
            raise ValueError("profile queries apply to a collection with payloads (--payloads).")
        self.count = queries
        #: with a second pass over the input, the sample is kept as row numbers while the store
        #: fills (not max_docs x d) and its rows are read again once the store is closed
        self.reread = reread
        self.docs = _Reservoir(max_docs, rng=0, rows=reread is None) if payloads else None

    @property
    def source(self) -> str | None:
        """What stands for the queries: "queries", "documents", or None (no profile)."""
        if self.docs is None:
            return None
        return "queries" if self.queries is not None else "documents"

    def check_dim(self, X: Any) -> None:
        """Refuse documents whose dimension is not the real queries'."""
        if self.queries is not None and self.queries.shape[1] != np.shape(X)[1]:
            raise DataError(
                f"profile queries have dimension {self.queries.shape[1]}, the "
                f"documents {np.shape(X)[1]}."
            )

    def add(self, X: Any) -> None:
        """Offer a batch of documents to the sample."""
        if self.docs is not None:
            self.docs.add(np.asarray(X, dtype=np.float32))

    def target(self, col: ProtectedCollection, rows: int) -> _ProfileTarget | None:
        """Where the profile goes (None: no profile, or fewer than 3 documents indexed)."""
        if self.docs is None or rows < 3:
            return None
        return col._profile_target()

    def save(self, target: _ProfileTarget | None) -> None:
        """Seal the profile (``target``: :meth:`target`). The float16 sample is freed once it
        is read as float32, before the profile's own copies are made."""
        if target is None or self.docs is None:
            return
        docs = self.docs.rows() if self.reread is None else self.docs.gather(self.reread())
        self.docs = None
        if self.queries is not None:
            target.seal(self.queries, docs, rng=0, source="queries")
        else:
            pick = np.random.default_rng(1).choice(
                len(docs), size=min(int(self.count), len(docs)), replace=False
            )
            target.seal(docs[pick], docs, rng=0, source="documents")


@contextlib.contextmanager
def _removed_on_failure(store_path: Path) -> Iterator[None]:
    """Remove the store folder on failure if it did not exist before: a failed first index
    leaves no store behind."""
    created = not store_path.exists()
    try:
        yield
    except BaseException:
        if created and store_path.exists():
            import shutil

            shutil.rmtree(store_path, ignore_errors=True)
        raise


#: record ids an index checks for repeats in memory; beyond, in a private temporary SQLite
#: file (:class:`~privembed.release.ReleasedIds`): a million ids are about 100 MB in a set
SEEN_IN_MEMORY = 100_000


def _index_into(
    source: _IndexInput,
    store: str,
    path: str | Path,
    collection: str,
    profile: _ProfileSample,
    *,
    mechanism: Mechanism | str | None,
    ledger: Any,
    on_batch: Any,
    **options: Any,
) -> dict[str, Any]:
    """Open the collection and upsert every batch of ``source``, protected there (or as the
    releases they are, without a mechanism); then seal the profile. Returns the summary, with
    the setting note of a protected index (``setting``)."""
    from ..release import ReleasedIds

    seen = ReleasedIds(spill=SEEN_IN_MEMORY) if source.needs_ids else None
    rows, dim = 0, source.dim
    try:
        with _removed_on_failure(Path(path)):
            with ProtectedCollection.open(
                store,
                path,
                collection,
                mechanism=mechanism,
                protection=source.protection if mechanism is None else None,
                embedding_model=source.model,
                **options,
            ) as col:
                for b_ids, X, texts, extra, start in source.batches:
                    profile.check_dim(X)  # before the first upsert
                    nb = int(np.asarray(X).shape[0])
                    ids = source.ids(b_ids, start, nb)
                    if seen is not None:
                        seen.add_ids(ids, where=str(source.path))
                    metas = source.metadata(extra, nb)
                    if mechanism is None:
                        col.add_released(ids, X, metas, dim_in=source.meta.get("dim"))
                    else:
                        col.add(ids, X, metas, texts=texts, ledger=ledger, row_offset=start)
                    profile.add(X)
                    rows += nb
                    dim = int(np.asarray(X).shape[1])
                    if on_batch is not None:
                        on_batch(nb)
                    checkpoint("batch.written")
                target = profile.target(col, rows)
                summary = {
                    "rows": rows,
                    "n": source.n,
                    "dim": dim,
                    "total": col.store.count(),
                    "treatment": col.treatment.description,
                    "guarantee": col.protection.get("guarantee_text", "none (unprotected)"),
                    "payloads": col.has_payloads,
                    "sealed": col.sealed,
                    "profile": profile.source,
                    # what the setting does to vectors of this dimension (a SettingNote; None for
                    # vectors indexed as the releases they are)
                    "setting": with_evidence(
                        setting_note(mechanism, dim),
                        mechanism,
                        model=source.model,
                        keyed=col.key is not None,
                        ledger=ledger is not None,
                    )
                    if isinstance(mechanism, Mechanism) and dim is not None and dim >= 2
                    else None,
                }
            # the store is closed and its vectors freed before the profile copies the sample:
            # peak memory is the larger of the two, not their sum
            del col
            profile.save(target)
        return summary
    finally:
        if seen is not None:
            seen.close()


@cooperative
def index_file(
    input: str | Path,
    store: str,
    path: str | Path,
    collection: str = "privembed",
    *,
    mechanism: Mechanism | str | None = None,
    key: Any = None,
    rng: Any = None,
    ledger: Any = None,
    column: str | None = None,
    id_column: str | None = None,
    metadata_columns: Sequence[str] | None = None,
    model: str | None = None,
    batch_rows: int = 4096,
    allow_reprotect: bool = False,
    payloads: bool = False,
    payload_dtype: str = "float32",
    pad_to: int | str = "padme",
    store_text: bool = False,
    text_field: str = "text",
    ids_from_content: bool = False,
    profile_queries: Any = 200,
    profile_max_docs: int = 200_000,
    store_options: dict[str, Any] | None = None,
    on_start: Any = None,
    on_batch: Any = None,
) -> dict[str, Any]:
    """Protect an embeddings file -- or a file of texts, embedded here -- batch by batch and
    upsert it into a store (``privembed index``).

    ``mechanism=None`` indexes a file already protected by ``privembed protect`` under the
    configuration it records; ``"none"`` indexes plain vectors. Each batch is one release,
    recorded in the ``ledger`` before its upsert; record ids must be unique over the whole
    file (checked in bounded memory, so a second copy of an id is refused, not recorded free).

    With ``payloads`` (needs the key) every record's exact vector -- and with ``store_text`` its
    text -- is sealed beside its protected vector for exact re-ranking
    (:meth:`ProtectedCollection.query` ``rerank=``), and a clean-score profile of the corpus
    is sealed too, for ``recall=``: sample queries against up to ``profile_max_docs``
    documents (a uniform sample beyond that). ``profile_queries`` is a file of real queries
    (texts, embedded with the collection's model, or embeddings) or an array of their
    embeddings -- best -- or a number of documents to stand in for them, diluted into
    pseudo-queries (:func:`privembed.search.rerank.pseudo_queries`; documents as they are make ``k'``
    too small where queries and documents differ).

    ``mechanism="sealed"`` (needs the key) stores no vector: each record's exact vector, text
    (``store_text``) and metadata are sealed into its payload beside a constant placeholder,
    and searches rank on the client (:class:`ProtectedCollection`); ``payloads`` is implied and
    no profile is made (there is no k' to plan).

    ``store_options`` go to the store (:func:`privembed.integrations.stores.open_store`), e.g.
    ``{"factory": "SQfp16"}`` for a FAISS index of half-precision vectors.

    Returns
    -------
    dict
        ``rows``, ``n``, ``dim``, ``total`` (vectors in the collection), ``treatment``,
        ``guarantee``, ``payloads``, ``sealed``, ``profile`` (what stood for the queries, or
        None), ``setting`` (the :class:`~privembed.release.SettingNote` of a protected index,
        or None).
    """
    source = _index_input(
        input,
        batch_rows,
        model=model,
        column=column,
        id_column=id_column,
        metadata_columns=metadata_columns,
        store_text=store_text,
        text_field=text_field,
        ids_from_content=ids_from_content,
        needs_ids=key is not None or ledger is not None or payloads or mechanism == "sealed",
        key=key,
    )
    if on_start is not None:
        on_start(source.n)
    _check_index_mode(
        source,
        mechanism,
        key=key,
        rng=rng,
        ledger=ledger,
        payloads=payloads,
        allow_reprotect=allow_reprotect,
    )
    sealed = mechanism == "sealed"
    if sealed and not isinstance(profile_queries, int):
        raise ValueError("a sealed collection ranks exactly: profile queries do not apply.")
    profile = _ProfileSample(
        payloads and not sealed, profile_queries, profile_max_docs, source.model, source.reread
    )
    return _index_into(
        source,
        store,
        path,
        collection,
        profile,
        mechanism=mechanism,
        ledger=ledger,
        on_batch=on_batch,
        store_options=store_options,
        key=key,
        rng=rng,
        payloads=payloads or sealed or None,
        payload_dtype=payload_dtype,
        pad_to=pad_to,
    )


class _Reservoir:
    """A uniform sample of at most ``cap`` rows of a stream (Vitter's algorithm R): the row
    numbers it holds and, with ``rows``, the rows themselves in float16.

    Vectorised per batch, with the draws of the row-at-a-time algorithm: row ``s`` of the
    stream (``s >= cap``) takes slot ``integers(0, s + 1)`` when that is below ``cap``, the
    bounds of a batch drawn in one call (the same stream of numbers), and a later row of a
    batch drawn to the same slot as an earlier one replaces it. Holds ``cap`` row numbers, and
    ``cap`` x d float16 with ``rows``; without, :meth:`gather` reads the rows from a second
    pass over the stream.
    """

    def __init__(self, cap: int, *, rng: Any = None, rows: bool = True) -> None:
        self.cap = int(cap)
        self.seen = 0
        self.keep_rows = bool(rows)
        self._which = np.empty(0, dtype=np.int64)  # the stream row in each slot
        self._parts: list[NDArray[np.float16]] = []  # the first rows, until the sample is full
        self._rows: NDArray[np.float16] | None = None
        self._gen = np.random.default_rng(rng)

    def add(self, X: NDArray[Any]) -> None:
        A = np.asarray(X, dtype=np.float16) if self.keep_rows else np.asarray(X)
        n = int(A.shape[0])
        take = max(0, min(n, self.cap - self.seen))
        if take:
            self._which = np.concatenate([self._which, np.arange(self.seen, self.seen + take)])
            if self.keep_rows:
                self._parts.append(np.array(A[:take]))
        if take < n:
            if self.keep_rows and self._rows is None:
                self._rows = self._filled(A.shape[1])
            high = np.arange(self.seen + take + 1, self.seen + n + 1, dtype=np.int64)
            slot = self._gen.integers(0, high)
            hit = np.flatnonzero(slot < self.cap)
            # the last row drawn to a slot is the one that stays there
            _, last = np.unique(slot[hit][::-1], return_index=True)
            keep = hit[hit.size - 1 - last]
            self._which[slot[keep]] = self.seen + take + keep
            if self._rows is not None:
                self._rows[slot[keep]] = A[take + keep]
        self.seen += n

    def _filled(self, dim: int) -> NDArray[np.float16]:
        rows = np.concatenate(self._parts) if self._parts else np.empty((0, dim), np.float16)
        self._parts = []
        return rows

    def rows(self) -> NDArray[np.float32]:
        """The sample as float32, in slot order (kept rows only)."""
        if not self.keep_rows:
            raise ValueError("this sample keeps row numbers only: gather() its rows.")
        if self._rows is None:
            if not self._parts:
                return np.empty((0, 0), dtype=np.float32)
            self._rows = self._filled(self._parts[0].shape[1])
        return self._rows.astype(np.float32)

    def gather(self, batches: Iterator[tuple[Any, int]]) -> NDArray[np.float32]:
        """The sample as float32, in slot order, read from ``batches`` of (X, first row) of the
        same stream again: what :meth:`rows` returns when the rows are kept."""
        which = self._which
        out: NDArray[np.float16] | None = None
        found = 0
        for X, start in batches:
            A = np.asarray(X)
            if out is None:
                out = np.empty((which.size, A.shape[1]), dtype=np.float16)
            here = np.flatnonzero((which >= start) & (which < start + A.shape[0]))
            out[here] = np.asarray(A[which[here] - start], dtype=np.float16)
            found += here.size
        if out is None or found != which.size:
            raise DataError("the input ended before the rows of the profile's sample.")
        return out.astype(np.float32)
