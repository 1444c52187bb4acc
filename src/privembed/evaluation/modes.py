r"""Advice per deployment mode: the smallest epsilon at which *search* stays useful, what it
costs per query, and which threats that setting defends against.

Judging plain protected vectors only (issue 26) misses the deployment that works: fetch k'
candidates by protected similarity, open their sealed payloads inside the trust boundary and
re-rank them exactly -- or, when the corpus is small enough for the budget, keep no vector in
the store at all. This module measures five modes on the user's own embeddings, in memory (no
store is built):

* ``sealed`` -- the store holds AES-GCM payloads only; the client fetches all of them and
  ranks exactly (no epsilon: encryption, not noise; recommended whenever the cost of fetching
  every payload fits the budget);
* ``plain`` -- protected vectors searched directly (k' = k = 10, no payloads);
* ``rerank`` -- top-k' by protected similarity, then exact re-rank with the clean vectors of
  the sealed payloads;
* ``subspace+rerank`` -- :class:`~privembed.mechanisms.SubspaceMechanism` (noise in k
  dimensions; basis from public embeddings, or DP-PCA of the data charged to every record),
  then exact re-rank;
* ``query`` -- clean documents, protected queries (RemoteRAG pattern): protects *queries only*;
  the store holds the documents in the clear.

**Utility** is the recall of each query's clean top 10 within the k' fetched (after exact
re-ranking, the share of the clean top 10 in the final top 10); a mode meets the floor at
depth k' when, on each of ``draws`` (default 3) independent noise draws, the lower end of the
95% interval of the mean over queries is at or above it (so that a fresh draw -- the one a
real index makes -- is likely to meet it too: the queries share the documents' noise, so one
draw's interval over queries understates the spread between draws). For ``plain`` with ``min_cosine`` the
floor is on the mean cosine to the original instead.

**The search** per (mode, mechanism): a log grid of epsilon (8 points a decade), the same
``draws`` seeds at every probe (utility is then as monotone in epsilon as the law allows), the
top of the grid first (none meets: stop, report the nearest point), then bisection on the grid
indices -- about 6 probes; the clean similarities and clean top-10 sets are computed once and
shared by every probe.

**Attacks** at the chosen epsilon: linkage (re-identification among candidate originals, with
the blind baseline 1/candidates and the Wilson interval) and, for the subspace mode, the same
attack by a holder of the basis. Their verdicts come from :mod:`privembed.evaluation.threats`.

This module checks the input and runs the search; the rest lives beside it (and is re-exported
here): :mod:`~privembed.evaluation.modes_result` -- the modes, :class:`ModeSetting`,
:class:`DepthPrediction`, :class:`ModesAdvice` (ranking, printed lines, ``advice.json``) and
:func:`load_advice`; :mod:`~privembed.evaluation.modes_search` -- the measurement (probes,
bisection on the grid, the sealed mode's cost, the k' law, attacks and verdicts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int, check_real
from ..core.rng import spawn
from .cost import DEFAULT_MAX_BYTES, DEFAULT_MAX_SYNC_BYTES, Budget, Rates

# `x as x`: names other modules, tests and benchmarks import from here (private ones too)
from .modes_result import ADVICE_FORMAT as ADVICE_FORMAT
from .modes_result import DEPTH_SHARE as DEPTH_SHARE
from .modes_result import DOCUMENT_MODES as DOCUMENT_MODES
from .modes_result import GRID, LAWS, MODES, TOP_K, ModesAdvice, ModeSetting, QueryData
from .modes_result import DepthPrediction as DepthPrediction
from .modes_result import load_advice as load_advice
from .modes_search import _attack_recommended, _Search, _unit
from .modes_search import _Clean as _Clean
from .modes_search import _ModeRunner as _ModeRunner

__all__ = [
    "MODES",
    "ModeSetting",
    "ModesAdvice",
    "QueryData",
    "advise_modes",
]


def advise_modes(
    X: Any,
    *,
    queries: Any = None,
    modes: Sequence[str] = MODES,
    mechanisms: Sequence[str] = ("gaussian", "laplace", "purkayastha"),
    params: Mapping[str, Mapping[str, Any]] | None = None,
    min_recall: float = 0.9,
    min_cosine: float | None = None,
    max_depth: int | None = None,
    max_ldp_epsilon: float | None = None,
    basis: Any = None,
    basis_epsilon: float = 1.0,
    basis_delta: float = 1e-5,
    n_queries: int = 200,
    max_bytes_per_query: float | None = DEFAULT_MAX_BYTES,
    max_latency_ms: float | None = None,
    max_sync_bytes: float | None = DEFAULT_MAX_SYNC_BYTES,
    client_cache: bool = True,
    rates: Rates | None = None,
    production_size: int | None = None,
    draws: int = 3,
    attacks: Sequence[Any] = (),
    linkage_records: int = 2000,
    seed: int = 0,
    grid: Sequence[float] = GRID,
    model: str | None = None,
    on_step: Callable[[str], None] | None = None,
) -> ModesAdvice:
    """The smallest useful epsilon per deployment mode and mechanism, its cost and threats.

    Parameters
    ----------
    X : array_like, shape (n, d)
        The documents' clean embeddings.
    queries : array_like (nq, d), optional
        Real query embeddings; without them up to ``n_queries`` documents, diluted by
        :func:`privembed.search.rerank.pseudo_queries`, stand in (the result says so).
    modes : sequence of str
        Any of :data:`MODES`.
    mechanisms : sequence of str
        Noise laws tried in every mode (``laplace``, ``gaussian``, ``purkayastha``; the
        subspace mode uses the same law in k dimensions).
    params : dict, optional
        Extra parameters per mechanism (e.g. ``{"gaussian": {"delta": 1e-5}}``).
    min_recall : float in (0, 1]
        Utility floor: recall of the clean top 10 within the k' fetched (lower end of the 95%
        interval over queries).
    min_cosine : float, optional
        For ``plain`` only: the floor is the mean cosine to the original instead.
    max_depth : int, optional
        Largest k' (candidates fetched, payloads opened per query) a mode may use outright.
        Whatever the budget, never more than a quarter of the corpus (:data:`DEPTH_SHARE`):
        fetching more is close to fetching all of it, and then any epsilon "works".
    max_bytes_per_query, max_latency_ms : float, optional
        The cost budget per query, in the user's units (default 4 MB, no latency limit): each
        mode's largest k' is what the budget pays for at this corpus size
        (:mod:`privembed.evaluation.cost`), and every setting shows its cost.
    max_sync_bytes, client_cache : optional
        The sealed mode: with ``client_cache`` (default) the client fetches every payload once
        per session (at most ``max_sync_bytes``, default 64 MB) and answers queries from the
        opened vectors; without it every query fetches them all (the per-query budget).
    rates : privembed.evaluation.cost.Rates, optional
        Per-payload and per-scan times for the latency estimate (default: measured here).
    production_size : int, optional
        The corpus size the user will index: k' and bytes per query are predicted there for
        the best noise setting (:class:`DepthPrediction`, from k' measured at n/4, n/2, n).
    max_ldp_epsilon : float, optional
        Only settings whose per-record LDP epsilon is at most this are recommended.
    basis : SubspaceBasis, array (m, d) of public embeddings, or None
        For ``subspace+rerank``: a basis from public embeddings (exact PCA, no privacy cost);
        None computes one from ``X`` by DP-PCA at (``basis_epsilon``, ``basis_delta``),
        charged to every record (the guarantee shown is the composition).
    draws : int
        Independent noise draws per probe; the floor must hold on each (the lower end of each
        draw's 95% interval over queries). The queries share the documents' noise, so the
        spread between draws is wider than one draw's interval over queries suggests.
    attacks : sequence of privacy metrics
        More attacks run at the recommended setting only, each with its strength check on the
        clean vectors (a metric with ``check``, e.g. the adaptive token attack,
        :class:`~privembed.evaluation.TokenLeakage`): their evidence joins the linkage attack's
        in the threat verdicts.
    seed : int
        Seeds the pseudo-queries, DP-PCA and every noise draw.
    model : str, optional
        The embedding model's name or identity: the project's stored evidence
        (:mod:`privembed.evaluation.evidence`) lowers a verdict on any model of its dimension,
        and supports "defends" only on its own model.

    Returns
    -------
    ModesAdvice

    Raises
    ------
    ValueError
        An unknown mode or a floor out of range.
    """
    say = on_step or (lambda _msg: None)
    D = _documents(X)
    seed, draws, floor = _check_options(
        D, seed, draws, max_depth, min_recall, modes, min_cosine, mechanisms
    )
    budget = Budget(max_bytes_per_query, max_latency_ms, max_depth, max_sync_bytes, client_cache)
    g_pq, g_basis = spawn(seed, 2)
    qd = _query_data(queries, D, n_queries, g_pq)
    search = _Search(
        clean=_Clean(D, qd.Q),
        qd=qd,
        floor=floor,
        min_cosine=min_cosine,
        budget=budget,
        rates=rates or Rates.measure(D.shape[1]),
        seed=seed,
        draws=draws,
        grid=grid,
        linkage_records=linkage_records,
        params=_law_params(params, mechanisms),
        basis=_subspace_basis(modes, basis, D, basis_epsilon, basis_delta, g_basis, say),
        model=model,
    )
    settings, releases = search.run(modes, mechanisms, say)
    result = search.advice(settings, max_ldp_epsilon)
    if production_size is not None:
        target = check_int("production_size", production_size, ge=D.shape[0])
        best = result.recommended_noise
        if best is not None and best.mode in ("rerank", "subspace+rerank", "query"):
            say(f"predicting k' at n = {target:,} for {best.label}")
            result.prediction = search.predict(best, target)
    _attack_recommended(result, releases, attacks, D, seed, say)
    return result


def _documents(X: Any) -> NDArray[np.float64]:
    """The documents as unit rows; at least 12 of them (a clean top 10 and a query)."""
    A, _ = check_embeddings(X, name="X")
    D = _unit(A)
    n = D.shape[0]
    if n < 12:
        raise DataError(f"advise needs at least 12 documents (a clean top 10), got {n}.")
    return D


def _check_options(
    D: NDArray[np.float64],
    seed: int,
    draws: int,
    max_depth: int | None,
    min_recall: float,
    modes: Sequence[str],
    min_cosine: float | None,
    mechanisms: Sequence[str],
) -> tuple[int, int, float]:
    """The checked seed, draws and recall floor; the depth limit, the modes, the cosine floor
    and the noise laws are checked too."""
    seed = check_int("seed", seed, ge=0)
    draws = check_int("draws", draws, ge=1)
    if max_depth is not None:
        check_int("max_depth", max_depth, ge=TOP_K)
    floor = check_real("min_recall", min_recall, gt=0, le=1)
    for m in modes:
        if m not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got mode={m!r}.")
    if min_cosine is not None:
        check_real("min_cosine", min_cosine, gt=-1, le=1)
    for name in mechanisms:
        if name not in LAWS:
            raise ValueError(
                f"the mode advice tries the noise laws {', '.join(LAWS)} (also in a subspace), "
                f"got mechanism {name!r}; use --plain-only for other mechanisms."
            )
    return seed, draws, floor


def advice_queries(X: Any, *, seed: int = 0, n_queries: int = 200) -> NDArray[np.float64]:
    """The pseudo-queries :func:`advise_modes` measures with when it is given none (the same
    seed, the same draw): for a caller that checks a recommendation on the queries it was made
    on (the demo)."""
    D = _documents(X)
    g_pq, _ = spawn(check_int("seed", seed, ge=0), 2)
    return _query_data(None, D, n_queries, g_pq).Q


def _query_data(
    queries: Any, D: NDArray[np.float64], n_queries: int, rng: np.random.Generator
) -> QueryData:
    """The real queries as unit rows, else up to ``n_queries`` pseudo-queries from ``D``."""
    if queries is None:
        from ..search.rerank import pseudo_queries

        n = D.shape[0]
        nq = min(check_int("n_queries", n_queries, ge=2), n)
        pick = np.sort(rng.choice(n, nq, replace=False))
        return QueryData(_unit(pseudo_queries(D[pick], rng=rng)), "pseudo-queries")
    Qa, _ = check_embeddings(queries, name="queries", dim=D.shape[1])
    return QueryData(_unit(Qa), "queries")


def _law_params(
    params: Mapping[str, Mapping[str, Any]] | None, mechanisms: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Extra parameters per noise law (the Gaussian law's delta defaults to 1e-5)."""
    extra = {k: dict(v) for k, v in (params or {}).items()}
    if "gaussian" in mechanisms:
        extra.setdefault("gaussian", {}).setdefault("delta", 1e-5)
    return extra


def _subspace_basis(
    modes: Sequence[str],
    basis: Any,
    D: NDArray[np.float64],
    basis_epsilon: float,
    basis_delta: float,
    rng: np.random.Generator,
    say: Callable[[str], None],
) -> Any:
    """The subspace mode's basis: the one given, exact PCA of public embeddings, or DP-PCA of
    ``D`` (None when the subspace mode is not tried)."""
    if "subspace+rerank" not in modes:
        return None
    from ..mechanisms.subspace import SubspaceBasis, dp_pca

    if basis is None:
        say(f"subspace: DP-PCA basis at epsilon_p = {basis_epsilon:g}")
        return dp_pca(D, epsilon=basis_epsilon, delta=basis_delta, rng=rng)
    if isinstance(basis, SubspaceBasis):
        return basis
    Bp, _ = check_embeddings(basis, name="basis embeddings", dim=D.shape[1])
    return SubspaceBasis.from_embeddings(Bp)
