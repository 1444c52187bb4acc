"""The rank model: the predicted recall of the true top k at depth k', and the k' it needs.

Given a :class:`~privembed.search.rerank_profile.ScoreProfile` and the mechanisms that protect
the documents, the queries, or both (their cosine laws, :mod:`privembed.search.rerank_law`),
the count of documents scoring above each true top-k document is modelled by its mean and
variance (:mod:`privembed.search.rerank` states the model), and :func:`rerank_depth` and
:class:`RerankPlanner` search the smallest k' that reaches a target recall.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ..core._validation import check_int, check_keywords, check_real
from ..core.rng import as_generator
from ..mechanisms.base import Mechanism
from .rerank_law import _NORM_LAWS, cosine_law
from .rerank_profile import ScoreProfile


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


def _checked(
    profile: ScoreProfile, documents: Any, queries: Any
) -> tuple[Mechanism | None, Mechanism | None]:
    """The documents' and the queries' mechanisms, checked (at least one) with the profile."""
    if not isinstance(profile, ScoreProfile):
        raise TypeError(f"profile must be a ScoreProfile, got profile={profile!r}.")
    documents = _check_mechanism("documents", documents)
    queries = _check_mechanism("queries", queries)
    if documents is None and queries is None:
        raise ValueError("give the documents' mechanism, the queries' mechanism, or both.")
    return documents, queries


class RankModel(TypedDict, total=False):
    """The rank model's keywords, which :func:`predicted_recall` and :func:`rerank_depth` share
    (all optional; at least one of ``documents`` and ``queries`` must be given).

    Attributes
    ----------
    k : int, default 10
        The true top ``k`` whose recall is modelled.
    documents, queries : Mechanism, optional
        The mechanism that protects the stored vectors, the one that protects queries, or both.
    rng : int, Generator or None
        Randomness of the model's own Monte-Carlo parts (shared factors, top-score draws).
    shared_draws, top_draws : int, default 32, 64
        Draws of the query's shared noise factors and of each top document's protected score.
    """

    k: int
    documents: Mechanism | None
    queries: Mechanism | None
    rng: Any
    shared_draws: int
    top_draws: int


def _build(
    profile: ScoreProfile,
    *,
    k: int = 10,
    documents: Mechanism | None = None,
    queries: Mechanism | None = None,
    rng: Any = None,
    shared_draws: int = 32,
    top_draws: int = 64,
    nodes: int = 16,
    grid: int = 512,
) -> _Model:
    """The rank model of ``profile`` for the true top ``k``; ``shared_draws`` of the query's
    noise apply to protected queries only (a clean query is one draw)."""
    documents, queries = _checked(profile, documents, queries)
    k = check_int("k", k, ge=1)
    if k > profile.top.shape[1]:
        raise ValueError(f"k must be <= the profile's top_k = {profile.top.shape[1]}, got k={k}.")
    if profile.norms is not None and queries is not None:
        raise ValueError(
            "k' theory for protected queries against a subspace collection is not modelled; "
            "give rerank=k' instead."
        )
    shared = shared_draws if queries is not None else 1
    gen = as_generator(rng)
    side = _draw_side(documents, queries, profile.dim, gen, shared, nodes, top_draws, profile)
    mu, var = _rank_moments(profile, k, side, gen, grid)
    return _Model(mu, var, profile.n_docs, k)


def predicted_recall(
    profile: ScoreProfile, depths: Sequence[int] | int, **model: Unpack[RankModel]
) -> NDArray[np.float64]:
    """Predicted recall of the true top ``k`` among the top ``depths`` by protected similarity.

    Parameters
    ----------
    profile : ScoreProfile
    depths : int or sequence of int
        Candidate depths k' (>= 1).
    **model
        :class:`RankModel`: ``k`` (default 10), ``documents``, ``queries``, ``rng``,
        ``shared_draws``, ``top_draws``.

    Returns
    -------
    ndarray of float, one per depth
    """
    check_keywords("predicted_recall", model, RankModel)
    rank = _build(profile, **model)
    ds = np.atleast_1d(np.asarray(depths))
    return np.array([rank.recall(check_int("depth", int(x), ge=1)) for x in ds])


def rerank_depth(profile: ScoreProfile, *, recall: float = 0.95, **model: Unpack[RankModel]) -> int:
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
    shared_draws, top_draws : int, default 32, 64
        As :class:`RankModel` says (``**model``: its keywords).

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
    check_keywords("rerank_depth", model, RankModel)
    recall = check_real("recall", recall, gt=0, lt=1)
    return _build(profile, **model).depth(recall)


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
        self.documents, self.queries = _checked(profile, documents, queries)
        self.profile = profile
        self._seed = as_generator(rng).integers(2**63)
        self._models: dict[int, _Model] = {}
        self._depths: dict[tuple[int, float], int] = {}

    def _model(self, k: int) -> _Model:
        if k not in self._models:
            self._models[k] = _build(
                self.profile, k=k, documents=self.documents, queries=self.queries,
                rng=int(self._seed),
            )  # fmt: skip
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
