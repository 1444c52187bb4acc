r"""How many candidates to fetch by protected similarity so that exact re-ranking finds the top k.

Private retrieval fetches the k' nearest *protected* vectors and re-ranks them with exact
vectors inside the trust boundary (DESIGN.md, "Private retrieval"; the query-side pattern is
RemoteRAG, [CH24]). This module computes k' from the mechanism's noise law and the corpus' own
similarity distribution, for a target recall of the true top k.

Model
-----
All vectors are unit vectors and similarity is the cosine. For a mechanism ``M`` and a unit
input ``x`` write the protected vector as

.. math::
    y = c\,x + \sqrt{1 - c^2}\,v, \qquad c = \cos(x, M(x)),\; v \perp x,\ \|v\| = 1.

For every isotropic mechanism (multivariate Laplace: noise radius Gamma(d, 1/epsilon) times a
uniform direction; Gaussian: radius sigma * chi_d; Purkayastha: angle theta with density
:math:`\propto e^{-\varepsilon\theta}\sin^{d-2}\theta`) the tangent direction ``v`` is uniform on
the sphere of directions orthogonal to ``x`` and independent of ``c``, so a mechanism enters only
through the law of ``c`` (:func:`cosine_law`: for radial noise ``R U``,
:math:`c = (1 + Ra)/\sqrt{1 + 2Ra + R^2}` with ``a`` a coordinate of ``U``; for Purkayastha
:math:`c = \cos\theta`). Other mechanisms are sampled through ``privatize`` (their tangent
direction is then only approximately uniform).

*Documents protected, clean query* ``q``. With clean score :math:`s = q \cdot x` and ``e`` the
unit part of ``q`` orthogonal to ``x``, the protected score is

.. math::
    t = q \cdot y = c\,s + \sqrt{1-c^2}\sqrt{1-s^2}\;\xi, \qquad \xi = v \cdot e,

where :math:`\xi` is a coordinate of a uniform point on :math:`S^{d-2}` (mean 0, variance
1/(d-1); taken as normal here, which is accurate for d in the tens and above). Documents get
independent noise, so given the clean scores the protected scores are independent.

*Protected query, clean documents* (RemoteRAG). Now the query's noise is shared by all
documents: with :math:`\alpha = \cos(q, \tilde q)` and :math:`w_i` the unit part of document
``i`` orthogonal to ``q``,

.. math::
    \tilde t_i = \alpha s_i + \sqrt{1-\alpha^2}\sqrt{1-s_i^2}\;\zeta_i, \qquad
    \zeta_i = \tilde v \cdot w_i ,

and the :math:`\zeta_i` are correlated through the documents' geometry. The model takes the
residual directions as equicorrelated with the corpus' mean residual cosine :math:`\rho`
(:attr:`ScoreProfile.rho`): :math:`\zeta_i = (\sqrt\rho Z_0 + \sqrt{1-\rho} Z_i)/\sqrt{d-1}`,
:math:`Z` standard normal, :math:`Z_0` shared. Given :math:`(\alpha, Z_0)`, which are drawn from
their laws, the scores are again independent.

*Both sides*: the query-side score :math:`\tilde s_i` takes the place of ``s`` in the
document-side law (a normal mixture in ``c``).

*Rank of a true top-k document.* Given the shared factors, document ``j`` of the true top k with
protected score :math:`t_j` is fetched at depth k' when fewer than k' of the other N - 1
documents score above it. That count is a sum of independent Bernoulli variables with
probabilities :math:`P(t_i > t_j \mid s_i)`; its mean and variance come from the histogram of
the corpus' clean scores for the query (:class:`ScoreProfile`), and the probability is taken from
the normal approximation with continuity correction. The predicted recall at depth k' is the
average over the profile's sample queries, the shared factors, the top-k documents and draws of
their own noise; :func:`rerank_depth` returns the smallest k' that reaches the target.

The sample queries stand in for future queries: build the profile from queries (or documents
used as queries) that are not the ones you will measure on.

References
----------
.. [CH24] Cheng, Y. et al. (2024). RemoteRAG: a privacy-preserving LLM cloud RAG service.
   arXiv:2412.12775.
.. [A26] Asghar, Zhao, Carpentier, Kaafar (2026). d_X-privacy for text and the curse of
   dimensionality. PoPETs. (The noisy dot product distribution.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ..core._validation import DataError, check_embeddings, check_int, check_real
from ..core.rng import as_generator
from ..mechanisms.base import Mechanism

__all__ = [
    "RerankPlanner",
    "ScoreProfile",
    "best_subspace_dimension",
    "candidate_bytes",
    "cosine_law",
    "document_rows",
    "predicted_recall",
    "protected_ranks",
    "pseudo_queries",
    "query_batch_size",
    "recall_at_depths",
    "rerank_depth",
    "subspace_profile_needed",
]

#: bins of the clean-score histogram over [-1, 1]
DEFAULT_BINS = 2000
#: relative size of the isotropic noise that turns documents into pseudo-queries
#: (:func:`pseudo_queries`); calibrated on GCIDE dev queries (docs/retrieval.md)
PSEUDO_QUERY_DILUTION = 0.75
#: the further dilution of pseudo-queries inside a subspace (:meth:`ScoreProfile.from_subspace`);
#: calibrated on GCIDE dev queries likewise
SUBSPACE_PSEUDO_QUERY_DILUTION = 0.5


def pseudo_queries(
    documents: Any, *, dilution: float = PSEUDO_QUERY_DILUTION, rng: Any = None
) -> Any:
    r"""Documents made to look like queries for a k' profile, when no real queries are at hand.

    A document used as a query is closer to its neighbours than a real query is (its near
    duplicates and sister senses stand out from the bulk), so a profile built from documents
    under-fetches: on GCIDE it reached recall 0.80 at a target of 0.90 and 0.885 at 0.95. A
    pseudo-query is the document diluted with isotropic noise,
    :math:`\tilde q = (x + \beta g/\sqrt d)/\|\cdot\|`, :math:`g \sim \mathcal N(0, I_d)`:
    every similarity shrinks towards the bulk and the bulk spreads, as for a real query that
    shares only part of its best match. The default beta = 0.75 was calibrated on GCIDE *dev*
    queries (the diluted documents' mean top-1 cosine then matches the queries'); it is a
    property of that task, not a law -- real queries (``profile_queries``) remain better.
    Profiles built from pseudo-queries exclude each one's source document.
    """
    D, _ = check_embeddings(documents, name="documents")
    beta = check_real("dilution", dilution, ge=0)
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    D = D / np.linalg.norm(D, axis=1, keepdims=True)
    G = as_generator(rng).standard_normal(D.shape) / math.sqrt(D.shape[1])
    out = D + beta * G
    return out / np.linalg.norm(out, axis=1, keepdims=True)


#: memory the candidates of one batch of queries may hold during a search (160 MiB): with
#: exact re-rank, k' candidates per query are fetched, their payloads opened and scored
SEARCH_BATCH_BYTES = 160 << 20
#: most queries in one batch (plain search: the treated queries and the store's answers)
MAX_QUERY_BATCH = 1024


# ---------------------------------------------------------------------------------------------
# searching in bounded memory
# ---------------------------------------------------------------------------------------------


def candidate_bytes(dim: int, *, payload_itemsize: int = 4) -> int:
    """Memory one fetched candidate holds while its batch is re-ranked, in bytes.

    Its sealed payload (``payload_itemsize * dim + 45`` bytes, :mod:`privembed.keys.payload`), its
    plaintext (kept until the batch's texts are read) and its vector's bytes gathered for the
    batch (``payload_itemsize * dim`` each), the opened vector as a float32 row and as a
    float64 row for the exact cosine, and about 1.5 KiB of Python objects (the hit, its
    metadata, the bookkeeping of the batch): an upper bound -- ``privembed search`` over a
    FAISS store of 117,659 records at k' = 1,000 grew by 4.3 MiB per query of a batch when
    payloads were opened one at a time (candidates shared by queries of a batch are opened
    once). Stored texts come on top.

    Examples
    --------
    >>> candidate_bytes(384)
    10797
    """
    dim = check_int("dim", dim, ge=1)
    itemsize = check_int("payload_itemsize", payload_itemsize, ge=1)
    return 3 * itemsize * dim + 45 + (4 + 8) * dim + 1536


def query_batch_size(
    depth: int,
    dim: int,
    *,
    budget_bytes: int = SEARCH_BATCH_BYTES,
    payload_itemsize: int = 4,
    max_batch: int = MAX_QUERY_BATCH,
) -> int:
    """Queries to search together so that their ``depth`` candidates each stay within
    ``budget_bytes`` (at least one query, at most ``max_batch``).

    A search holds the candidates of one batch at a time, so its peak memory follows k'
    (``depth``) and the dimension, never the number of queries.

    Examples
    --------
    >>> query_batch_size(1000, 384), query_batch_size(10_000, 384), query_batch_size(31_035, 384)
    (15, 1, 1)
    >>> query_batch_size(10, 384)   # plain search: capped
    1024
    """
    depth = check_int("depth", depth, ge=1)
    budget = check_int("budget_bytes", budget_bytes, ge=1)
    cap = check_int("max_batch", max_batch, ge=1)
    per_query = depth * candidate_bytes(dim, payload_itemsize=payload_itemsize)
    return max(1, min(cap, budget // per_query))


# ---------------------------------------------------------------------------------------------
# the law of cos(x, M(x))
# ---------------------------------------------------------------------------------------------


def _sphere_coordinate(rng: np.random.Generator, n: int, d: int) -> NDArray[np.float64]:
    """A coordinate of a uniform point on S^{d-1} (exact: g / sqrt(g^2 + chi^2_{d-1}))."""
    g = rng.standard_normal(n)
    return g / np.sqrt(g * g + rng.chisquare(d - 1, n))


def _radial_cosines(
    radius: NDArray[np.float64], rng: np.random.Generator, d: int
) -> NDArray[np.float64]:
    a = _sphere_coordinate(rng, radius.size, d)
    return (1.0 + radius * a) / np.sqrt(1.0 + 2.0 * radius * a + radius * radius)


def _laplace(m: Mechanism, d: int, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    return _radial_cosines(rng.standard_gamma(float(d), n) / float(m.epsilon), rng, d)  # type: ignore[attr-defined]


def _gaussian(m: Mechanism, d: int, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    return _radial_cosines(float(m.sigma) * np.sqrt(rng.chisquare(d, n)), rng, d)  # type: ignore[attr-defined]


def _purkayastha(m: Mechanism, d: int, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    table = m.angle_table(d)  # type: ignore[attr-defined]
    return np.cos(table.sample(rng.random(n), rng.random(n)))


#: closed-form laws by mechanism name (the noise law of each family); others are simulated
_COSINE_LAWS: dict[
    str, Callable[[Mechanism, int, int, np.random.Generator], NDArray[np.float64]]
] = {
    "laplace": _laplace,
    "gaussian": _gaussian,
    "empirical": _gaussian,
    "purkayastha": _purkayastha,
}


def _subspace_law(
    m: Mechanism, norms: NDArray[np.float64], rng: np.random.Generator
) -> NDArray[np.float64]:
    return np.asarray(m.cosine_draws(norms, rng=rng), dtype=np.float64)  # type: ignore[attr-defined]


#: laws of cos(v, M(v)) that depend on the signal's norm |v| (mechanisms that release a
#: projection with noise of a fixed scale)
_NORM_LAWS: dict[
    str, Callable[[Mechanism, NDArray[np.float64], np.random.Generator], NDArray[np.float64]]
] = {"subspace": _subspace_law}


def subspace_profile_needed(mechanism: Mechanism) -> bool:
    """Whether k' theory for ``mechanism`` needs a subspace profile
    (:meth:`ScoreProfile.from_subspace`): its noise law depends on the signal's norm."""
    return mechanism.name in _NORM_LAWS


def cosine_law(
    mechanism: Mechanism, d: int, *, n: int = 20_000, rng: Any = None
) -> NDArray[np.float64]:
    r"""``n`` draws of :math:`\cos(x, M(x))` for a unit input ``x`` in dimension ``d``.

    Laplace, Gaussian (``gaussian``, ``empirical``) and Purkayastha are sampled from their noise
    laws directly (no d-dimensional vectors); any other mechanism by privatising ``n`` random
    unit vectors with ``mechanism.privatize(X, rng=...)``.

    Examples
    --------
    >>> from privembed import get_mechanism
    >>> from privembed.core import theory
    >>> c = cosine_law(get_mechanism("laplace", epsilon=200.0), 384, n=200_000, rng=0)
    >>> bool(abs(c.mean() - theory.expected_cosine_laplace(200.0, 384)) < 1e-3)
    True
    """
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"mechanism must be a privembed Mechanism, got {mechanism!r}.")
    d = check_int("d", d, ge=3)
    n = check_int("n", n, ge=1)
    if mechanism.output_dim(d) != d:
        raise ValueError(
            f"k' theory needs a mechanism that keeps the dimension; {mechanism!r} maps {d} to "
            f"{mechanism.output_dim(d)} dimensions."
        )
    gen = as_generator(rng)
    law = _COSINE_LAWS.get(mechanism.name)
    if law is not None:
        return law(mechanism, d, n, gen)
    X = gen.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y = np.asarray(mechanism.privatize(X, rng=gen), dtype=np.float64)
    return np.einsum("ij,ij->i", X, Y) / np.linalg.norm(Y, axis=1)


# ---------------------------------------------------------------------------------------------
# the corpus' similarity distribution
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreProfile:
    r"""Clean-score histograms of sample queries against the whole corpus.

    Attributes
    ----------
    counts : ndarray of int64, shape (n_queries, bins)
        Documents per score bin, for each sample query (all ``n_docs`` documents).
    top : ndarray of float64, shape (n_queries, top_k)
        Each sample query's largest clean scores, descending.
    n_docs : int
    dim : int
        Embedding dimension.
    rho : float
        Mean cosine between the documents' components orthogonal to a query (the residual
        equicorrelation of the query-side model); 0 for isotropic documents.
    edges : ndarray, shape (bins + 1,)
        Bin edges over [-1, 1].
    norms : ndarray, optional
        For a subspace mechanism (:meth:`from_subspace`): equal-mass quantiles of the
        documents' signal norms :math:`\|P(x - \mu)\|` (noise of a fixed scale perturbs a
        short signal more); ``None`` for unit vectors.
    top_norms : ndarray, shape (n_queries, top_k), optional
        The signal norms of each sample query's true top documents (subspace profiles).
    """

    counts: NDArray[np.int64]
    top: NDArray[np.float64]
    n_docs: int
    dim: int
    rho: float = 0.0
    edges: NDArray[np.float64] | None = None
    norms: NDArray[np.float64] | None = None
    top_norms: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        counts = np.asarray(self.counts, dtype=np.int64)
        top = np.asarray(self.top, dtype=np.float64)
        if (
            counts.ndim != 2
            or top.ndim != 2
            or counts.shape[0] != top.shape[0]
            or counts.shape[0] < 1
        ):
            raise DataError(
                f"counts (n_queries, bins) and top (n_queries, top_k) must be 2-D with the same "
                f"rows, got shapes {counts.shape} and {top.shape}."
            )
        edges = (
            np.linspace(-1.0, 1.0, counts.shape[1] + 1)
            if self.edges is None
            else np.asarray(self.edges, float)
        )
        if edges.shape != (counts.shape[1] + 1,):
            raise DataError(
                f"edges must have bins + 1 = {counts.shape[1] + 1} entries, got {edges.shape}."
            )
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "top", top)
        object.__setattr__(self, "edges", edges)
        if (self.norms is None) != (self.top_norms is None):
            raise DataError("norms and top_norms go together (a subspace profile has both).")
        if self.norms is not None:
            nm = np.asarray(self.norms, dtype=np.float64).ravel()
            tn = np.asarray(self.top_norms, dtype=np.float64)
            if tn.shape != top.shape or nm.size < 1 or not (nm > 0).all() or not (tn > 0).all():
                raise DataError(
                    f"norms must be positive and top_norms shaped like top {top.shape}, got "
                    f"{tn.shape}."
                )
            object.__setattr__(self, "norms", nm)
            object.__setattr__(self, "top_norms", tn)
        object.__setattr__(self, "n_docs", check_int("n_docs", self.n_docs, ge=2))
        object.__setattr__(self, "dim", check_int("dim", self.dim, ge=3))
        object.__setattr__(self, "rho", check_real("rho", self.rho, ge=0, lt=1))

    @property
    def n_queries(self) -> int:
        return int(self.counts.shape[0])

    @classmethod
    def from_scores(
        cls,
        scores: Any,
        *,
        dim: int,
        top_k: int = 100,
        bins: int = DEFAULT_BINS,
        rho: float = 0.0,
        exclude_identical: bool = False,
    ) -> ScoreProfile:
        """A profile from clean cosines ``scores`` of shape (n_queries, n_docs).

        ``exclude_identical`` drops, per query, the scores above 1 - 1e-6 (the query's own
        document when documents stand in for queries); ``n_docs`` is then the smallest count
        left over the queries.
        """
        S = np.asarray(scores, dtype=np.float64)
        if S.ndim != 2 or S.shape[1] < 2:
            raise DataError(
                f"scores must be (n_queries, n_docs) with n_docs >= 2, got shape {S.shape}."
            )
        if exclude_identical:
            S = np.where(S > 1.0 - 1e-6, -np.inf, S)
        bins = check_int("bins", bins, ge=10)
        top_k = min(check_int("top_k", top_k, ge=1), S.shape[1])
        edges = np.linspace(-1.0, 1.0, bins + 1)
        idx = np.clip(np.searchsorted(edges, np.clip(S, -1.0, 1.0), side="right") - 1, 0, bins - 1)
        counts = np.zeros((S.shape[0], bins), dtype=np.int64)
        for r in range(S.shape[0]):
            counts[r] = np.bincount(idx[r][np.isfinite(S[r])], minlength=bins)
        top = -np.sort(
            -np.partition(S, S.shape[1] - top_k, axis=1)[:, S.shape[1] - top_k :], axis=1
        )
        if exclude_identical and not np.isfinite(top).all():
            raise DataError("fewer than top_k documents are left after excluding identical ones.")
        return cls(counts, top, int(counts.sum(axis=1).min()), dim, rho, edges)

    @classmethod
    def from_embeddings(
        cls,
        queries: Any,
        documents: Any,
        *,
        top_k: int = 100,
        bins: int = DEFAULT_BINS,
        rho_sample: int = 2000,
        block: int = 256,
        exclude_identical: bool = True,
        sources: Any = None,
        rng: Any = None,
    ) -> ScoreProfile:
        """A profile from sample query embeddings and the corpus' (exact) document embeddings.

        Parameters
        ----------
        queries : array_like, shape (n_queries, d)
            Sample queries (a few hundred suffice; documents may stand in for queries). Use
            queries that are not the ones you evaluate on.
        documents : array_like, shape (n_docs, d)
            The whole corpus, exact vectors (inside the trust boundary).
        top_k : int, default 100
            Largest k for which the profile can answer.
        rho_sample : int, default 2000
            Documents sampled (with ``rng``) to estimate :attr:`rho`.
        exclude_identical : bool, default True
            Leave out a query's own document (cosine above 1 - 1e-6), so that documents of the
            corpus can serve as sample queries.
        sources : array_like of int, shape (n_queries,), optional
            The row of ``documents`` each query was made from (:func:`pseudo_queries`): left
            out of that query's scores.
        """
        Q, _ = check_embeddings(queries, name="queries")
        D, _ = check_embeddings(documents, name="documents", dim=Q.shape[1])
        src = _sources(sources, Q.shape[0], D.shape[0])
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        D32 = np.ascontiguousarray(D / np.linalg.norm(D, axis=1, keepdims=True), dtype=np.float32)
        bins = check_int("bins", bins, ge=10)
        top_k = min(check_int("top_k", top_k, ge=1), D.shape[0])
        edges = np.linspace(-1.0, 1.0, bins + 1)
        counts = np.zeros((Q.shape[0], bins), dtype=np.int64)
        top = np.zeros((Q.shape[0], top_k))
        for s in range(0, Q.shape[0], block):
            S = (Q[s : s + block].astype(np.float32) @ D32.T).astype(np.float64)
            if src is not None:
                S[np.arange(S.shape[0]), src[s : s + block]] = -np.inf
            part = cls.from_scores(
                S, dim=Q.shape[1], top_k=top_k, bins=bins, exclude_identical=exclude_identical
            )
            counts[s : s + S.shape[0]] = part.counts
            top[s : s + S.shape[0]] = part.top
        gen = as_generator(rng)
        pick = gen.choice(
            D.shape[0],
            size=min(check_int("rho_sample", rho_sample, ge=2), D.shape[0]),
            replace=False,
        )
        return cls(
            counts,
            top,
            int(counts.sum(axis=1).min()),
            Q.shape[1],
            _residual_rho(Q, D32[pick].astype(np.float64)),
            edges,
        )

    @classmethod
    def from_subspace(
        cls,
        queries: Any,
        documents: Any,
        mechanism: Mechanism,
        *,
        top_k: int = 100,
        bins: int = DEFAULT_BINS,
        norm_nodes: int = 32,
        block: int = 256,
        exclude_identical: bool = True,
        sources: Any = None,
        dilution: float = 0.0,
        rng: Any = None,
    ) -> ScoreProfile:
        r"""A profile for a mechanism that releases in a subspace (``subspace``): clean scores
        where the protected scores are formed.

        The true top documents are those of the clean *full-dimension* cosine (what re-ranking
        recovers); the scores recorded are the cosines in the subspace,
        :math:`\cos(P(q - \mu), P(x - \mu))` (what the store ranks by, before noise), with the
        documents' signal norms :math:`\|P(x - \mu)\|` (:attr:`norms`, :attr:`top_norms`),
        since noise of a fixed scale turns a short signal further. ``dim`` is k.

        Parameters
        ----------
        queries, documents : array_like
            As for :meth:`from_embeddings` (exact vectors, inside the trust boundary).
        mechanism : Mechanism
            With ``public_transform`` (the noise-free projection) and ``cosine_draws``.
        norm_nodes : int, default 32
            Quantiles of the documents' signal norms kept.
        sources : array_like of int, optional
            As for :meth:`from_embeddings`.
        dilution : float, default 0
            Pseudo-queries (:func:`pseudo_queries`) only: dilute the *projected* queries too,
            with isotropic noise of this relative size in the k dimensions (isotropic noise
            in d dimensions puts only k/d of its energy into the subspace, where a document
            used as a query would stay as close to its neighbours as before).
        rng : int, Generator or None
            The dilution's noise.
        """
        Q, _ = check_embeddings(queries, name="queries")
        D, _ = check_embeddings(documents, name="documents", dim=Q.shape[1])
        src = _sources(sources, Q.shape[0], D.shape[0])
        if not mechanism.has_public_transform or mechanism.name not in _NORM_LAWS:
            raise ValueError(
                f"from_subspace needs a subspace mechanism (public_transform and a cosine law "
                f"per signal norm), got {mechanism!r}."
            )
        Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        D32 = np.ascontiguousarray(D / np.linalg.norm(D, axis=1, keepdims=True), dtype=np.float32)
        A32, V32, r = _subspace_directions(mechanism, Qn, D32, dilution, rng)
        bins = check_int("bins", bins, ge=10)
        top_k = min(check_int("top_k", top_k, ge=1), D.shape[0] - 1)
        edges = np.linspace(-1.0, 1.0, bins + 1)
        counts, top, top_norms, n_docs = _subspace_scores(
            Qn, D32, A32, V32, r, src, edges, top_k, block, exclude_identical
        )
        if not np.isfinite(top).all():
            raise DataError("fewer than top_k documents are left after excluding identical ones.")
        pos = r[r > 0]
        if pos.size == 0:
            raise DataError("every document projects to zero in the subspace.")
        nodes = np.quantile(pos, (np.arange(norm_nodes) + 0.5) / norm_nodes)
        return cls(
            counts,
            top,
            n_docs,
            int(A32.shape[1]),
            0.0,
            edges,
            nodes,
            np.maximum(top_norms, float(pos.min())),
        )

    def save(self, path: str | Path) -> Path:
        """Write the profile to an ``.npz`` file (a few hundred kB)."""
        p = Path(path)
        with p.open("wb") as fh:
            np.savez_compressed(
                fh,
                counts=self.counts,
                top=self.top,
                edges=np.asarray(self.edges),
                meta=np.array([self.n_docs, self.dim], dtype=np.int64),
                rho=np.array([self.rho]),
                **self._norm_arrays(),
            )
        return p

    def _norm_arrays(self) -> dict[str, Any]:
        """The subspace arrays for a file (none for a profile of unit vectors)."""
        if self.norms is None:
            return {}
        return {"norms": np.asarray(self.norms), "top_norms": np.asarray(self.top_norms)}

    @classmethod
    def from_arrays(cls, z: Any) -> ScoreProfile:
        """A profile from the arrays :meth:`save` writes (an ``np.load`` result)."""
        return cls(
            z["counts"],
            z["top"],
            int(z["meta"][0]),
            int(z["meta"][1]),
            float(z["rho"][0]),
            z["edges"],
            z["norms"] if "norms" in z else None,
            z["top_norms"] if "top_norms" in z else None,
        )

    @classmethod
    def load(cls, path: str | Path) -> ScoreProfile:
        """Read a profile written by :meth:`save`."""
        with np.load(Path(path)) as z:
            try:
                return cls.from_arrays(z)
            except KeyError as exc:
                raise DataError(f"{path} is not a score profile (missing {exc}).") from None


def _subspace_directions(
    mechanism: Mechanism, Qn: NDArray[Any], D32: NDArray[np.float32], dilution: float, rng: Any
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.float64]]:
    """The queries' and documents' unit directions in the subspace (the queries diluted with
    relative size ``dilution``) and the documents' signal norms."""
    V = np.asarray(mechanism.public_transform(D32), dtype=np.float64)
    r = np.linalg.norm(V, axis=1)
    V32 = (V / np.maximum(r, 1e-300)[:, None]).astype(np.float32)
    A = np.asarray(mechanism.public_transform(Qn), dtype=np.float64)
    A = A / np.maximum(np.linalg.norm(A, axis=1), 1e-300)[:, None]
    beta = check_real("dilution", dilution, ge=0)
    if beta > 0:
        A = A + beta * as_generator(rng).standard_normal(A.shape) / math.sqrt(A.shape[1])
    A32 = (A / np.maximum(np.linalg.norm(A, axis=1), 1e-300)[:, None]).astype(np.float32)
    return A32, V32, r


def _subspace_scores(
    Qn: NDArray[Any],
    D32: NDArray[np.float32],
    A32: NDArray[np.float32],
    V32: NDArray[np.float32],
    r: NDArray[np.float64],
    src: NDArray[np.int64] | None,
    edges: NDArray[np.float64],
    top_k: int,
    block: int,
    exclude_identical: bool,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], int]:
    """Per query, block by block: the histogram of subspace cosines, the subspace cosines and
    signal norms of the true (full-dimension) top documents, and the fewest documents scored."""
    bins = edges.size - 1
    counts = np.zeros((Qn.shape[0], bins), dtype=np.int64)
    top = np.zeros((Qn.shape[0], top_k))
    top_norms = np.zeros((Qn.shape[0], top_k))
    n_used = []
    for s in range(0, Qn.shape[0], block):
        full = (Qn[s : s + block].astype(np.float32) @ D32.T).astype(np.float64)
        sub = np.clip((A32[s : s + block] @ V32.T).astype(np.float64), -1.0, 1.0)
        same = full > 1.0 - 1e-6 if exclude_identical else np.zeros(full.shape, bool)
        if src is not None:
            same[np.arange(full.shape[0]), src[s : s + block]] = True
        full = np.where(same, -np.inf, full)
        sub = np.where(same, np.nan, sub)
        idx = np.clip(np.searchsorted(edges, sub, side="right") - 1, 0, bins - 1)
        for i in range(full.shape[0]):
            ok = np.isfinite(sub[i])
            counts[s + i] = np.bincount(idx[i][ok], minlength=bins)
            n_used.append(int(ok.sum()))
            best = np.argpartition(-full[i], top_k - 1)[:top_k]
            best = best[np.argsort(-full[i][best], kind="stable")]
            top[s + i] = sub[i][best]
            top_norms[s + i] = r[best]
    return counts, top, top_norms, int(min(n_used))


def document_rows(sample: Any, documents: Any, *, block: int = 256) -> NDArray[np.int64]:
    """The row of ``documents`` that each row of ``sample`` is (cosine above 1 - 1e-6).

    Raises
    ------
    DataError
        A sample row that is not one of the documents.
    """
    S, _ = check_embeddings(sample, name="sample")
    D, _ = check_embeddings(documents, name="documents", dim=np.shape(S)[-1])
    S32 = np.atleast_2d(np.asarray(S, dtype=np.float32))
    S32 = S32 / np.linalg.norm(S32, axis=1, keepdims=True)
    D32 = np.asarray(D, dtype=np.float32)
    D32 = D32 / np.linalg.norm(D32, axis=1, keepdims=True)
    out = np.empty(S32.shape[0], dtype=np.int64)
    for s in range(0, S32.shape[0], block):
        C = S32[s : s + block] @ D32.T
        out[s : s + C.shape[0]] = np.argmax(C, axis=1)
        if not (C.max(axis=1) > 1.0 - 1e-5).all():
            raise DataError("a sample row is not one of the documents.")
    return out


def _sources(sources: Any, n_queries: int, n_docs: int) -> NDArray[np.int64] | None:
    if sources is None:
        return None
    src = np.asarray(sources)
    if src.shape != (n_queries,) or not np.issubdtype(src.dtype, np.integer):
        raise DataError(f"sources must be {n_queries} row numbers, got shape {src.shape}.")
    if src.size and (src.min() < 0 or src.max() >= n_docs):
        raise DataError(f"sources must be row numbers in [0, {n_docs}).")
    return src.astype(np.int64)


def _residual_rho(Q: NDArray[np.float64], D: NDArray[np.float64]) -> float:
    """Mean pairwise cosine of the documents' unit components orthogonal to each query.

    Uses ``mean_{i != k} w_i . w_k = (n |mean w|^2 - 1) / (n - 1)``, averaged over the queries.
    """
    vals = []
    for q in Q[: min(len(Q), 64)]:
        W = D - np.outer(D @ q, q)
        W /= np.maximum(np.linalg.norm(W, axis=1, keepdims=True), 1e-12)
        n = W.shape[0]
        m = W.mean(axis=0)
        vals.append((n * float(m @ m) - 1.0) / (n - 1))
    return float(min(max(np.mean(vals), 0.0), 0.99))


# ---------------------------------------------------------------------------------------------
# the rank model
# ---------------------------------------------------------------------------------------------


def _quantile_nodes(sample: NDArray[np.float64], m: int) -> NDArray[np.float64]:
    """``m`` equal-mass nodes of a sample (midpoint quantiles): a quadrature for its law."""
    return np.quantile(sample, (np.arange(m) + 0.5) / m)


@dataclass
class _Side:
    """Shared-factor draws for one model: query-side (alpha, Z0) and the document cosine law."""

    alpha: NDArray[np.float64]  # (D,) query cosines (1 = clean query)
    z0: NDArray[np.float64]  # (D,) shared residual factor
    c_nodes: NDArray[np.float64]  # (L,) quadrature nodes of the document cosine (1 = clean docs)
    #: draws of the document cosine for the top documents: (M,), or (n_queries, k, M) when
    #: the law depends on each top document's own signal norm (subspace profiles)
    c_draws: NDArray[np.float64]


def _query_side(
    s: NDArray[np.float64], alpha: float, z0: float, rho: float, d: int
) -> tuple[Any, Any]:
    """Mean and variance of the query-side score given (alpha, Z0), for clean scores ``s``."""
    amp = (
        math.sqrt(max(1.0 - alpha * alpha, 0.0))
        * np.sqrt(np.clip(1.0 - s * s, 0.0, None))
        / math.sqrt(d - 1)
    )
    return alpha * s + amp * math.sqrt(rho) * z0, (amp * amp) * (1.0 - rho)


def _mixture_sf(
    t: NDArray[np.float64],
    m: NDArray[np.float64],
    v: NDArray[np.float64],
    c_nodes: NDArray[np.float64],
    d: int,
) -> NDArray[np.float64]:
    """P(score > t) for bins with query-side mean ``m``/variance ``v`` (shape (B,)), at ``t`` (T,),
    averaged over the document-cosine nodes. Returns (B, T)."""
    out = np.zeros((m.size, t.size))
    for c in c_nodes:
        mean = c * m
        var = c * c * v + (1.0 - c * c) * np.clip(1.0 - m * m, 0.0, None) / (d - 1)
        sd = np.sqrt(np.maximum(var, 1e-30))
        out += special.ndtr((mean[:, None] - t[None, :]) / sd[:, None])
    return out / c_nodes.size


def _draw_side(
    documents: Mechanism | None,
    queries: Mechanism | None,
    d: int,
    rng: np.random.Generator,
    shared_draws: int,
    nodes: int,
    top_draws: int,
    profile: ScoreProfile | None = None,
) -> _Side:
    if queries is None:
        alpha, z0 = np.ones(1), np.zeros(1)
    else:
        alpha = cosine_law(queries, d, n=shared_draws, rng=rng)
        z0 = rng.standard_normal(shared_draws)
    if documents is None:
        c_nodes, c_draws = np.ones(1), np.ones(top_draws)
    elif profile is not None and profile.norms is not None:
        law_of = _NORM_LAWS.get(documents.name)
        if law_of is None:
            raise ValueError(
                f"this profile was made for a subspace mechanism; {documents!r} has no cosine "
                "law per signal norm."
            )
        pool = np.repeat(np.asarray(profile.norms), max(1, 20_000 // profile.norms.size))
        c_nodes = _quantile_nodes(law_of(documents, pool, rng), nodes)
        tn = np.asarray(profile.top_norms)[..., None]  # (nq, top_k, 1)
        c_draws = law_of(documents, np.repeat(tn, top_draws, axis=-1).ravel(), rng).reshape(
            (*tn.shape[:2], top_draws)
        )
    else:
        law = cosine_law(documents, d, n=max(20_000, top_draws), rng=rng)
        c_nodes, c_draws = _quantile_nodes(law, nodes), rng.choice(law, size=top_draws)
    return _Side(alpha, z0, c_nodes, c_draws)


def _rank_moments(
    profile: ScoreProfile,
    k: int,
    side: _Side,
    rng: np.random.Generator,
    grid: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Mean and variance of the number of documents above each sampled top-k score.

    Returns arrays of shape (n_queries, shared draws, k, top draws).
    """
    d = profile.dim
    edges = np.asarray(profile.edges)
    centers = 0.5 * (edges[:-1] + edges[1:])
    used = np.flatnonzero(profile.counts.sum(axis=0) > 0)
    s_bins = centers[used]
    counts = profile.counts[:, used].astype(np.float64)  # (nq, B)
    nq, M = profile.n_queries, side.c_draws.shape[-1]
    top = profile.top[:, :k]  # (nq, k)
    # bin of each top document (its own entry is removed from the competitor counts)
    top_bin = np.clip(np.searchsorted(s_bins, top), 0, s_bins.size - 1)
    mu = np.empty((nq, side.alpha.size, k, M))
    var = np.empty_like(mu)
    for r, (alpha, z0) in enumerate(zip(side.alpha, side.z0, strict=True)):
        mb, vb = _query_side(s_bins, float(alpha), float(z0), profile.rho, d)
        # protected scores of the top documents: query side, then the document cosine draws
        mt, vt = _query_side(top, float(alpha), float(z0), profile.rho, d)  # (nq, k)
        st = mt[..., None] + np.sqrt(vt)[..., None] * rng.standard_normal((nq, k, M))
        c = side.c_draws if side.c_draws.ndim == 1 else side.c_draws[:, :k, :]
        doc_sd = np.sqrt((1.0 - c * c) * np.clip(1.0 - st * st, 0.0, None) / (d - 1))
        t = c * st + doc_sd * rng.standard_normal((nq, k, M))
        # survival of every score bin on a grid that is dense where the top scores fall
        lo, hi = float(t.min()), float(t.max())
        span = max(hi - lo, 1e-6)
        tgrid = np.unique(
            np.concatenate(
                [
                    np.quantile(t, np.linspace(0, 1, grid // 2)),
                    np.linspace(lo - 0.05 * span, hi + 0.05 * span, grid // 2),
                ]
            )
        )
        sf = _mixture_sf(tgrid, mb, vb, side.c_nodes, d)  # (B, T)
        mu_grid = counts @ sf  # (nq, T)
        var_grid = counts @ (sf * (1.0 - sf))
        for qi in range(nq):
            m_q = np.interp(t[qi].ravel(), tgrid, mu_grid[qi]).reshape(k, M)
            v_q = np.interp(t[qi].ravel(), tgrid, var_grid[qi]).reshape(k, M)
            own = np.stack([np.interp(t[qi, j], tgrid, sf[top_bin[qi, j]]) for j in range(k)])
            mu[qi, r] = np.maximum(m_q - own, 0.0)
            var[qi, r] = np.maximum(v_q - own * (1.0 - own), 0.0)
    return mu, var


def _recall_from_moments(
    mu: NDArray[np.float64], var: NDArray[np.float64], depth: int
) -> NDArray[np.float64]:
    """P(fewer than ``depth`` others above) per query (normal approximation, continuity corrected)."""
    sd = np.sqrt(var)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (depth - 0.5 - mu) / sd
    p = np.where(sd > 0, special.ndtr(z), (mu < depth - 0.5).astype(float))
    return p.reshape(p.shape[0], -1).mean(axis=1)


@dataclass
class _Model:
    mu: NDArray[np.float64]
    var: NDArray[np.float64]
    n_docs: int
    k: int

    def recall(self, depth: int) -> float:
        return float(_recall_from_moments(self.mu, self.var, depth).mean())

    def depth(self, target: float) -> int:
        lo, hi = self.k, self.n_docs
        if self.recall(lo) >= target:
            return lo
        while hi - lo > 1:  # recall is non-decreasing in the depth
            mid = (lo + hi) // 2
            if self.recall(mid) >= target:
                hi = mid
            else:
                lo = mid
        return hi


def _check_mechanism(name: str, m: Any) -> Mechanism | None:
    if m is not None and not isinstance(m, Mechanism):
        raise TypeError(f"{name} must be a privembed Mechanism or None, got {name}={m!r}.")
    return m


def _build(
    profile: ScoreProfile,
    k: int,
    documents: Mechanism | None,
    queries: Mechanism | None,
    rng: Any,
    shared_draws: int,
    top_draws: int,
    nodes: int,
    grid: int,
) -> _Model:
    if not isinstance(profile, ScoreProfile):
        raise TypeError(f"profile must be a ScoreProfile, got profile={profile!r}.")
    k = check_int("k", k, ge=1)
    if k > profile.top.shape[1]:
        raise ValueError(f"k must be <= the profile's top_k = {profile.top.shape[1]}, got k={k}.")
    documents = _check_mechanism("documents", documents)
    queries = _check_mechanism("queries", queries)
    if documents is None and queries is None:
        raise ValueError("give the documents' mechanism, the queries' mechanism, or both.")
    if profile.norms is not None and queries is not None:
        raise ValueError(
            "k' theory for protected queries against a subspace collection is not modelled; "
            "give rerank=k' instead."
        )
    gen = as_generator(rng)
    side = _draw_side(documents, queries, profile.dim, gen, shared_draws, nodes, top_draws, profile)
    mu, var = _rank_moments(profile, k, side, gen, grid)
    return _Model(mu, var, profile.n_docs, k)


def predicted_recall(
    profile: ScoreProfile,
    depths: Sequence[int] | int,
    *,
    k: int = 10,
    documents: Mechanism | None = None,
    queries: Mechanism | None = None,
    rng: Any = None,
    shared_draws: int = 32,
    top_draws: int = 64,
) -> NDArray[np.float64]:
    """Predicted recall of the true top ``k`` among the top ``depths`` by protected similarity.

    Parameters
    ----------
    profile : ScoreProfile
    depths : int or sequence of int
        Candidate depths k' (>= 1).
    k : int, default 10
    documents, queries : Mechanism, optional
        The mechanism that protects the stored vectors, the one that protects queries, or both.
    rng : int, Generator or None
        Randomness of the model's own Monte-Carlo parts (shared factors, top-score draws).
    shared_draws, top_draws : int
        Draws of the query's shared noise factors and of each top document's protected score.

    Returns
    -------
    ndarray of float, one per depth
    """
    model = _build(
        profile,
        k,
        documents,
        queries,
        rng,
        shared_draws if queries is not None else 1,
        top_draws,
        16,
        512,
    )
    ds = np.atleast_1d(np.asarray(depths))
    return np.array([model.recall(check_int("depth", int(x), ge=1)) for x in ds])


def rerank_depth(
    profile: ScoreProfile,
    *,
    k: int = 10,
    recall: float = 0.95,
    documents: Mechanism | None = None,
    queries: Mechanism | None = None,
    rng: Any = None,
    shared_draws: int = 32,
    top_draws: int = 64,
) -> int:
    """The smallest k' whose top-k' by protected similarity holds ``recall`` of the true top k.

    Parameters
    ----------
    profile : ScoreProfile
        The corpus' clean-score distribution seen from sample queries (not the queries you
        evaluate on).
    k : int, default 10
    recall : float in (0, 1), default 0.95
        Target mean recall of the true top ``k`` (averaged over queries).
    documents : Mechanism, optional
        Protects the stored vectors (clean queries search protected documents).
    queries : Mechanism, optional
        Protects the query (RemoteRAG pattern). Give both for both sides.
    rng : int, Generator or None
        Randomness of the model's Monte-Carlo parts (the answer varies by a few percent of k'
        between seeds; fix it for reproducible plans).

    Returns
    -------
    int
        k' in [k, n_docs].

    Examples
    --------
    >>> from privembed import get_mechanism
    >>> rng = np.random.default_rng(0)
    >>> scores = np.tanh(rng.normal(0.1, 0.15, size=(20, 5000)))   # a synthetic corpus
    >>> prof = ScoreProfile.from_scores(scores, dim=384)
    >>> lap = get_mechanism("laplace", epsilon=300.0)
    >>> kp = rerank_depth(prof, k=10, recall=0.95, documents=lap, rng=0)
    >>> 10 < kp < 5000
    True
    """
    recall = check_real("recall", recall, gt=0, lt=1)
    model = _build(
        profile,
        k,
        documents,
        queries,
        rng,
        shared_draws if queries is not None else 1,
        top_draws,
        16,
        512,
    )
    return model.depth(recall)


class RerankPlanner:
    """k' for one corpus profile and one pair of mechanisms, cached per (k, recall).

    What a store keeps: build it once when the collection is indexed (the profile needs the
    exact vectors) and ask it at search time.

    Examples
    --------
    >>> from privembed import get_mechanism
    >>> rng = np.random.default_rng(1)
    >>> prof = ScoreProfile.from_scores(np.tanh(rng.normal(0.1, 0.15, (10, 2000))), dim=384)
    >>> plan = RerankPlanner(prof, documents=get_mechanism("purkayastha", epsilon=300.0), rng=0)
    >>> plan.depth(k=5, recall=0.9) == plan.depth(k=5, recall=0.9)
    True
    """

    def __init__(
        self,
        profile: ScoreProfile,
        *,
        documents: Mechanism | None = None,
        queries: Mechanism | None = None,
        rng: Any = None,
    ) -> None:
        if not isinstance(profile, ScoreProfile):
            raise TypeError(f"profile must be a ScoreProfile, got profile={profile!r}.")
        self.profile = profile
        self.documents = _check_mechanism("documents", documents)
        self.queries = _check_mechanism("queries", queries)
        if documents is None and queries is None:
            raise ValueError("give the documents' mechanism, the queries' mechanism, or both.")
        self._seed = as_generator(rng).integers(2**63)
        self._models: dict[int, _Model] = {}
        self._depths: dict[tuple[int, float], int] = {}

    def _model(self, k: int) -> _Model:
        if k not in self._models:
            shared = 32 if self.queries is not None else 1
            self._models[k] = _build(
                self.profile, k, self.documents, self.queries, int(self._seed), shared, 64, 16, 512
            )
        return self._models[k]

    def depth(self, *, k: int = 10, recall: float = 0.95) -> int:
        """k' for the true top ``k`` at mean ``recall``."""
        key = (check_int("k", k, ge=1), check_real("recall", recall, gt=0, lt=1))
        if key not in self._depths:
            self._depths[key] = self._model(key[0]).depth(key[1])
        return self._depths[key]

    def recall(self, depth: int, *, k: int = 10) -> float:
        """Predicted recall of the true top ``k`` at depth k'."""
        return self._model(check_int("k", k, ge=1)).recall(check_int("depth", depth, ge=1))


def best_subspace_dimension(
    queries: Any,
    documents: Any,
    build: Callable[[int], Mechanism],
    *,
    depth: int,
    candidates: Sequence[int] = (8, 12, 16, 24, 32, 48, 64, 96, 128),
    k: int = 10,
    rng: Any = None,
) -> tuple[int, dict[int, float]]:
    """The subspace dimension whose protected ranking best keeps the true top ``k`` within
    depth k', by the rank model on a subspace profile of each candidate.

    Parameters
    ----------
    queries, documents : array_like
        Sample queries (not the ones you evaluate on) and the corpus' exact vectors.
    build : callable
        ``build(dim)`` returns the subspace mechanism with ``dim`` components (e.g.
        ``lambda kk: SubspaceMechanism(basis=b, epsilon=50.0, k=kk)``).
    depth : int
        The k' that will be fetched.
    candidates : sequence of int
        Dimensions tried (those the basis cannot give are skipped).

    Returns
    -------
    (int, dict)
        The best dimension and the predicted recall of each candidate tried.
    """
    depth = check_int("depth", depth, ge=1)
    out: dict[int, float] = {}
    for c in sorted({int(x) for x in candidates}):
        try:
            mech = build(c)
        except ValueError:
            continue
        prof = ScoreProfile.from_subspace(queries, documents, mech, top_k=k)
        out[c] = RerankPlanner(prof, documents=mech, rng=rng).recall(depth, k=k)
    if not out:
        raise ValueError(f"no candidate dimension could be built from {list(candidates)}.")
    return max(out, key=lambda c: (out[c], -c)), out


# ---------------------------------------------------------------------------------------------
# measurement
# ---------------------------------------------------------------------------------------------


def protected_ranks(clean: Any, protected: Any, *, k: int = 10) -> NDArray[np.int64]:
    """Rank (1-based) by protected score of each query's true top-``k`` documents.

    Parameters
    ----------
    clean, protected : array_like, shape (n_queries, n_docs)
        Clean and protected similarity of every query to every document (a block of queries).

    Returns
    -------
    ndarray of int64, shape (n_queries, k)
        Rank among the protected scores (ties count against the document: pessimistic).
        Document j of the true top k is among the top k' fetched when its rank is <= k'.

    Examples
    --------
    >>> protected_ranks([[0.9, 0.5, 0.1]], [[0.2, 0.6, 0.1]], k=2).tolist()
    [[2, 1]]
    """
    C = np.asarray(clean, dtype=np.float64)
    P = np.asarray(protected, dtype=np.float64)
    if C.ndim != 2 or C.shape != P.shape:
        raise DataError(
            f"clean and protected must be 2-D of one shape, got {C.shape} and {P.shape}."
        )
    k = min(check_int("k", k, ge=1), C.shape[1])
    top = np.argpartition(-C, k - 1, axis=1)[:, :k]
    own = np.take_along_axis(P, top, axis=1)  # (nq, k)
    n = P.shape[1]
    ranks = np.empty(own.shape, dtype=np.int64)
    for r in range(P.shape[0]):  # documents scoring >= each own score, itself included
        ranks[r] = n - np.searchsorted(np.sort(P[r]), own[r], side="left")
    return ranks


def recall_at_depths(ranks: Any, depths: Sequence[int] | int) -> NDArray[np.float64]:
    """Mean share of the true top k within the first k' fetched, for each depth k'.

    Examples
    --------
    >>> recall_at_depths([[1, 5], [2, 3]], [2, 5]).tolist()
    [0.5, 1.0]
    """
    R = np.asarray(ranks)
    return np.array(
        [float((R <= check_int("depth", int(x), ge=1)).mean()) for x in np.atleast_1d(depths)]
    )
