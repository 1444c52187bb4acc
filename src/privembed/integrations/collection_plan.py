"""How deep a protected collection's re-rank fetches, and the score profile that plans it.

The k' of a search (``recall=``) comes from the theory of :mod:`privembed.search.rerank` on a
clean-score profile of the corpus, built at indexing from the exact vectors and sealed with the
key beside the store (:class:`_ProfileTarget`); :class:`_Planning`, a part of
:class:`~privembed.integrations.collection.ProtectedCollection`, reads it back as a
:class:`~privembed.search.rerank.RerankPlanner` and sizes the batches of a search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np

from ..core._validation import check_int, check_keywords
from ..keys.payload import PayloadCodec
from ..mechanisms import Mechanism
from ..search.sealed import sealed_batch_size, sealed_fetch_bytes
from .collection_sealed import _open_npz, _seal_npz
from .query import QueryTreatment
from .stores import VectorStore

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
        _seal_npz(self.codec, self.path, {**prof._arrays(), "source": np.array(source)},
                  record_id="privembed:rerank-profile", collection=self.collection)  # fmt: skip


class RerankDepth(TypedDict, total=False):
    """How deep a search of a protected collection fetches: the keywords that
    :meth:`~privembed.integrations.collection.ProtectedCollection.query`, its batch size and
    fetch plan, and :class:`~privembed.integrations.collection_search.Searcher` share (all
    optional; none given: a plain search of depth ``k``).

    Attributes
    ----------
    rerank : int or None
        ``k'``: fetch this many candidates by protected similarity and re-rank them by the
        exact cosine opened from their payloads (``k' >= k``).
    recall : float or None
        ``k'`` from theory for this recall of the exact top ``k`` (the collection's score
        profile); not with ``rerank``.
    protect_query : Mechanism or None
        Protect the query before it reaches the store (keyed query noise).
    """

    rerank: int | None
    recall: float | None
    protect_query: Mechanism | None


class SearchOptions(RerankDepth, total=False):
    """:class:`RerankDepth` and how many queries are searched at once.

    Attributes
    ----------
    batch_queries : int or None
        Queries searched at once (default :meth:`_Planning.query_batch_size`).
    """

    batch_queries: int | None


class QueryOptions(SearchOptions, total=False):
    """:class:`SearchOptions` of a search by query vectors
    (:meth:`~privembed.integrations.collection.ProtectedCollection.query`).

    Attributes
    ----------
    rng : seed or Generator, optional
        The noise of ``protect_query`` on a collection without a key.
    """

    rng: Any


def depth_options(options: SearchOptions) -> RerankDepth:
    """The :class:`RerankDepth` part of ``options`` (what sizes a batch and plans k')."""
    return {
        "rerank": options.get("rerank"),
        "recall": options.get("recall"),
        "protect_query": options.get("protect_query"),
    }


class _Planning:
    """The k' side of a :class:`~privembed.integrations.collection.ProtectedCollection`: the
    depth and batch size of a search, what it fetches, and the score profile behind
    ``recall=``."""

    store: VectorStore
    codec: PayloadCodec | None
    mechanism: Mechanism | None
    treatment: QueryTreatment
    sealed: bool

    @property
    def has_payloads(self) -> bool:
        """Whether the collection stores sealed payloads (exact vectors) for re-ranking."""
        return self.store.info.get("payloads") is not None

    def query_batch_size(self, k: int = 10, **opts: Unpack[RerankDepth]) -> int:
        """Queries :meth:`query` searches together for these settings: as many as keep their
        k' candidates each within :data:`privembed.search.rerank.SEARCH_BATCH_BYTES`
        (:func:`privembed.search.rerank.query_batch_size`)."""
        from ..search.rerank import query_batch_size

        check_keywords("_Planning.query_batch_size", opts, RerankDepth)
        k = check_int("k", k, ge=1)
        if self.sealed:
            return sealed_batch_size(self.store.count())
        depth = self._depth_of(k, opts) or k
        info = self.store.info
        dim = int(info.get("dim_in") or info.get("dim") or 1)
        itemsize = 2 if (info.get("payloads") or {}).get("dtype") == "float16" else 4
        return query_batch_size(depth, dim, payload_itemsize=itemsize)

    def fetch_plan(self, k: int = 10, **opts: Unpack[RerankDepth]) -> dict[str, Any] | None:
        """What one query fetches at these settings: ``depth`` (k' candidates), ``payloads``
        opened and ``bytes`` (candidates' vectors and payloads, ids, the query sent;
        :func:`privembed.evaluation.cost.query_cost`'s model). None when nothing is re-ranked;
        for a sealed collection every payload, once per session with its cache.

        ``search`` prints it: the k' that ``--recall`` chose and what it costs.
        """
        from ..evaluation.cost import Rates, query_cost

        check_keywords("_Planning.fetch_plan", opts, RerankDepth)
        n = max(1, self.store.count())
        info = self.store.info
        d_in = int(info.get("dim_in") or info.get("dim") or 1)
        if self.sealed:  # every payload, whether per query or once per session
            return {"depth": n, "payloads": n, "bytes": sealed_fetch_bytes(n, d_in), "sealed": True}
        depth = self._depth_of(k, opts)
        if depth is None:
            return None
        d_store = int(info.get("dim") or d_in)
        untimed = Rates(0.0, 0.0, "not timed")  # bytes and payloads only
        c = query_cost("rerank", n=n, d=d_in, store_dim=d_store, depth=depth, rates=untimed)
        return {"depth": depth, "payloads": c.payloads, "bytes": c.bytes, "sealed": False}

    def _depth_of(self, k: int, opts: RerankDepth) -> int | None:
        """:meth:`_depth` of a parameter group."""
        return self._depth(k, opts.get("rerank"), opts.get("recall"), opts.get("protect_query"))

    def _depth(
        self, k: int, rerank: int | None, recall: float | None, protect_query: Any
    ) -> int | None:
        """k' of a re-ranking search (``None``: no re-rank, a plain search of depth ``k``)."""
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
        z = _open_npz(self.codec, path, record_id="privembed:rerank-profile",
                      collection=self.store.collection)  # fmt: skip
        prof = ScoreProfile.from_arrays(z)
        self.__dict__["_profile_source"] = str(z["source"]) if "source" in z else "documents"
        docs = self.mechanism if self.mechanism is not None else self.treatment.mechanism
        cache[key] = RerankPlanner(prof, documents=docs, queries=protect_query, rng=0)
        return cache[key]
