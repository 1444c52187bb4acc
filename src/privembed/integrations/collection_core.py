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

import json
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Self, Unpack

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int, check_keywords
from ..core.rng import as_generator
from ..keys.keyed import resolve_key
from ..keys.payload import PayloadCodec, PayloadError, release_digest
from ..mechanisms import Mechanism
from ..release import Batch, Release, ReleaseRequest, Releases, Rows, Source, publish
from ..search.sealed import PLACEHOLDER, SealedIndex
from .collection_plan import QueryOptions, _Planning, depth_options
from .collection_sealed import (
    SEALED_GENERATION,
    SEALED_TREATMENT,
    _sealed_params,
    _SealedCollection,
    sealed_protection,
)
from .query import QueryTreatment, protect_queries, query_treatment
from .stores import Candidates, Hit, VectorStore, check_metadata


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


class _Closing:
    """An object that ``with`` closes (:meth:`close`): a collection, a search session."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Upsert:
    """A collection's store as the sink of one batch's release: committed in the ledger before
    anything is sent, then the payloads sealed and the rows upserted
    (:func:`privembed.release.publish`)."""

    per_batch = False

    def __init__(self, col: ProtectedCollection, metadata: Any, texts: Any, dim_in: int) -> None:
        self.col, self.metadata, self.texts, self.dim_in = col, metadata, texts, dim_in
        self.destination = f"{type(col.store).__name__}:{col.store.collection}"
        self.Y: NDArray[Any] | None = None

    def run(self, source: Source, releases: Releases) -> None:
        col = self.col
        for batch in source.batches():
            Y = releases.protect(batch)
            releases.commit()  # the ledger records the release before anything is sent
            ids = batch.ids  # the ids the rows are released under (content ids folded)
            assert ids is not None
            blobs = col._seal(ids, batch.X, self.texts, Y)
            col._seal_arrays()
            col._record_info(self.dim_in)
            col.store.upsert(ids, Y, self.metadata, payloads=blobs)
            releases.published()
            self.Y = Y


class ProtectedCollection(_SealedCollection, _Planning, _Closing):
    """A vector-store collection whose vectors are protected by one mechanism.

    Its sealed side (:mod:`~privembed.integrations.collection_sealed`) and its k' planning
    (:mod:`~privembed.integrations.collection_plan`) are written apart, as the classes it is
    made of.

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
        # content ids fold to one record per clean vector (with a ledger)
        rows = Batch(arr, id_list, start=row_offset, fold=True)
        sink = _Upsert(self, metadata, texts, dim_in)
        request = ReleaseRequest(key=self.key, rng=self._rng, ledger=ledger)
        publish(Rows(rows, "embeddings", self.embedding_model), sink, self.mechanism, request)
        assert sink.Y is not None
        return sink.Y

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
    def query(self, Q: Any, k: int = 10, **options: Unpack[QueryOptions]) -> list[list[Hit]]:
        """Hits for plain query embeddings ``Q`` (nq, d) or (d,), best first; the keywords
        (``rerank``, ``recall``, ``protect_query``, ``rng``, ``batch_queries``) are
        :class:`~privembed.integrations.collection_plan.QueryOptions`.

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
        check_keywords("ProtectedCollection.query", options, QueryOptions)
        return [hits for batch in self.query_batches(Q, k, **options) for hits in batch]

    def query_batches(
        self, Q: Any, k: int = 10, **options: Unpack[QueryOptions]
    ) -> Iterator[list[list[Hit]]]:
        """:meth:`query`, one list of per-query hits per batch of ``batch_queries`` queries."""
        check_keywords("ProtectedCollection.query_batches", options, QueryOptions)
        k = check_int("k", k, ge=1)
        d_in = self.store.info.get("dim_in")
        arr = np.asarray(Q)
        if d_in is not None and arr.ndim >= 1 and arr.shape[-1] != d_in:
            raise DataError(
                f"query has dimension {arr.shape[-1]} but the collection was built from "
                f"{d_in}-dimensional embeddings (dimension mismatch)."
            )
        clean, _ = check_embeddings(arr, name="query")
        protect_query, batch_queries = options.get("protect_query"), options.get("batch_queries")
        if self.sealed:
            yield from self._sealed_batches(clean, k, protect_query, batch_queries)
            return
        opts = depth_options(options)
        depth = self._depth_of(k, opts)
        step = (
            self.query_batch_size(k, **opts)
            if batch_queries is None
            else check_int("batch_queries", batch_queries, ge=1)
        )
        rng = options.get("rng")
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
