r"""Searching over protected releases.

:func:`projection_search` is the k-nearest-neighbour search over releases of
:class:`~privembed.mechanisms.PrivateProjection`, with the bias-corrected scores of [MC25] §5.2
and FAISS's conventions (``(D, I)``, float32 scores, int64 indices, ``-1`` padding). Exact
search with encrypted payloads and re-ranking inside the trust boundary is
:mod:`privembed.integrations.stores`; how many candidates to fetch for a target recall is
:mod:`privembed.search.rerank`.

References
----------
.. [MC25] Mishra & Chandra (2025). Differential privacy in data reduction. §5.2.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_choice, check_embeddings, check_int
from ..mechanisms.projection import PrivateProjection, require_projection

__all__ = ["projection_search"]

METRICS: tuple[str, ...] = ("cosine", "cosine_corrected", "ip", "l2")


def _projected_queries(
    m: PrivateProjection, queries: Any, released: bool, d: int | None
) -> tuple[NDArray[np.float64], int, float]:
    """The queries in the projected space, the input dimension and the queries' noise variance
    per coordinate (0 for plain queries, projected here without noise)."""
    if released:
        dd = m.known_dim(d)
        Q, _ = check_embeddings(queries, name="queries", dim=m.k, allow_zero=True)
        return np.asarray(Q, dtype=np.float64), dd, m.sigma_for(dd) ** 2
    Q, _ = check_embeddings(queries, name="queries", allow_zero=m.input_norm == "none")
    dd = Q.shape[1] if d is None else check_int("d", d, ge=1)
    if Q.shape[1] != dd:
        raise DataError(f"queries have dimension {Q.shape[1]} but d={dd} was given.")
    return np.asarray(m.project(Q)), dd, 0.0


def _database_variances(
    m: PrivateProjection, database_sigma: Any, n: int, d: int
) -> NDArray[np.float64]:
    """The noise variance per coordinate of each of the ``n`` database rows."""
    if database_sigma is None:
        return np.full(n, m.sigma_for(d) ** 2)
    s = np.asarray(database_sigma, dtype=np.float64)
    if s.ndim > 1 or (s.ndim == 1 and s.shape[0] != n) or not np.all(s >= 0):
        raise ValueError(
            "database_sigma must be a non-negative scalar or one value per database "
            f"row ({n}), got shape {s.shape}."
        )
    return np.broadcast_to(s**2, (n,)).astype(np.float64)


def _scores(
    metric: str,
    k: int,
    q: NDArray[np.float64],
    Y: NDArray[Any],
    y_sq: NDArray[np.float64],
    y_norm: NDArray[np.float64] | None,
    q_var: float,
    y_var: NDArray[np.float64],
) -> NDArray[np.float64]:
    """The ``metric`` scores of a block of queries ``q`` against every row of ``Y`` (``k``:
    the projected dimension)."""
    S = q @ Y.T
    if metric == "l2":
        q_sq = np.sum(q**2, axis=1)
        S = q_sq[:, None] + y_sq[None, :] - 2.0 * S - k * (q_var + y_var[None, :])
    elif metric == "cosine":
        assert y_norm is not None
        den = np.sqrt(np.sum(q**2, axis=1))[:, None] * y_norm[None, :]
        S = np.divide(S, den, out=np.zeros_like(S), where=den > 0)
    elif metric == "cosine_corrected":
        assert y_norm is not None
        q_norm = np.sqrt(np.maximum(np.sum(q**2, axis=1) - k * q_var, 1e-12))
        S = np.clip(S / (q_norm[:, None] * y_norm[None, :]), -1.0, 1.0)
    return S


def _smallest(key: NDArray[np.float64], take: int) -> NDArray[np.intp]:
    """The column indices of each row's ``take`` smallest ``key`` values, in ascending order
    (ties in index order)."""
    n = key.shape[1]
    if take < n:
        part = np.argpartition(key, take - 1, axis=1)[:, :take]
    else:
        part = np.broadcast_to(np.arange(n), key.shape).copy()
    order = np.argsort(np.take_along_axis(key, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def _search(
    m: PrivateProjection,
    Q: NDArray[np.float64],
    Y: NDArray[Any],
    k: int,
    *,
    metric: str,
    q_var: float,
    y_var: NDArray[np.float64],
    batch_size: int,
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Score the queries against the database block by block and keep each query's ``k``
    best, padded like FAISS."""
    n = Y.shape[0]
    ascending = metric == "l2"
    y_sq = np.sum(Y**2, axis=1)
    y_norm = None
    if metric == "cosine":
        y_norm = np.sqrt(y_sq)
    elif metric == "cosine_corrected":
        y_norm = np.sqrt(np.maximum(y_sq - m.k * y_var, 1e-12))
    nq = Q.shape[0]
    take = min(k, n)
    D = np.full((nq, k), np.inf if ascending else -np.inf, dtype=np.float32)
    I = np.full((nq, k), -1, dtype=np.int64)  # noqa: E741 - FAISS's name
    for start in range(0, nq, batch_size):
        q = Q[start : start + batch_size]
        S = _scores(metric, m.k, q, Y, y_sq, y_norm, q_var, y_var)
        idx = _smallest(S if ascending else -S, take)
        D[start : start + q.shape[0], :take] = np.take_along_axis(S, idx, axis=1)
        I[start : start + q.shape[0], :take] = idx
    return D, I


def projection_search(
    mechanism: PrivateProjection,
    queries: Any,
    database: Any,
    k: int,
    *,
    metric: str = "cosine",
    queries_released: bool = False,
    d: int | None = None,
    database_sigma: Any = None,
    batch_size: int = 1024,
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    r"""k-nearest-neighbour search over projection releases with calibrated scores (FAISS style).

    Parameters
    ----------
    mechanism : PrivateProjection
        The mechanism that made the releases (its public ``P``, ``k`` and sigma).
    queries : array_like, shape (nq, d) or (nq, mechanism.k)
        Plain embeddings (projected here without noise, after ``input_norm``:
        :meth:`PrivateProjection.project`), or -- with ``queries_released=True`` -- releases
        of the mechanism (independent noise).
    database : array_like, shape (n, mechanism.k)
        Releases of the mechanism (not renormalised).
    k : int
        Neighbours per query (``min(k, n)`` are real; the rest are padded like FAISS:
        index -1, distance ``inf`` for l2 and ``-inf`` otherwise).
    metric : {"cosine", "cosine_corrected", "ip", "l2"}
        ``"cosine"`` (default, the best *ranking* we measured): plain cosine between the
        query and each raw release, :math:`\langle q, y_j\rangle/(\|q\|\|y_j\|)` -- what FAISS
        ``IndexFlatIP`` over L2-normalised vectors returns; its values are shrunk towards 0 by
        the noise. ``"cosine_corrected"``: :meth:`PrivateProjection.cosine_estimate`
        (bias-corrected norms), calibrated values for thresholds but a noisier ranking when
        :math:`k\sigma^2` is comparable with :math:`\|Px\|^2`. ``"ip"``: unbiased
        :math:`\langle Pq, Px_j\rangle`. ``"l2"``: unbiased squared distances
        :math:`\|q - y_j\|^2 - k(\sigma_q^2 + \sigma_j^2)` (ascending).
    queries_released : bool, default False
    d : int, optional
        Input dimension; fixes sigma. Default: the dimension of plain queries, or the
        mechanism's ``input_dim`` for released ones.
    database_sigma : float or array_like of shape (n,), optional
        Noise sigma of each database row (default: the mechanism's sigma for ``d``), e.g. for
        a database that holds releases made at different epsilon.
    batch_size : int, default 1024
        Queries scored per block (bounds memory at ``batch_size * n`` floats).

    Returns
    -------
    D : ndarray of float32, shape (nq, k)
        Similarities (descending) or squared distances (ascending).
    I : ndarray of int64, shape (nq, k)
        Database row indices.

    Raises
    ------
    TypeError
        ``mechanism`` is not a :class:`~privembed.mechanisms.PrivateProjection`.
    ValueError
        Unknown ``metric``, bad ``k`` / ``batch_size`` / ``database_sigma``, or released
        queries with no known input dimension.
    privembed.DataError
        Queries or database of the wrong shape, NaN or inf.

    Notes
    -----
    Where the bias correction matters for ranking: for ``"ip"`` nowhere (the inner product of
    independent releases is already unbiased); for ``"l2"`` the correction is a constant per
    query with one common sigma -- the ranking is FAISS ``IndexFlatL2``'s and only the values
    (range search, thresholds) change -- but with per-row ``database_sigma`` it reorders rows
    released at different noise levels. For cosine, on real embeddings (``docs/projection.md``)
    dividing by the *observed* norm ranks better than both the raw inner product (JL leaves the
    projected norms :math:`\|Px_j\|` uneven at small ``k``) and the bias-corrected norms (their
    noise inflates the scores of rows with small corrected norm).

    Examples
    --------
    >>> from privembed.mechanisms import PrivateProjection
    >>> from privembed.core.rng import as_generator
    >>> m = PrivateProjection(k=16, epsilon=1e4, delta=1e-5)
    >>> X = as_generator(0).standard_normal((5, 64))
    >>> D, I = projection_search(m, X, m.privatize(X, rng=1), 2)
    >>> D.shape, I[:, 0].tolist()
    ((5, 2), [0, 1, 2, 3, 4])
    """
    m = require_projection(mechanism)
    metric = check_choice("metric", metric, METRICS)
    kk = check_int("k", k, ge=1)
    bs = check_int("batch_size", batch_size, ge=1)
    Y, _ = check_embeddings(database, name="database", dim=m.k, allow_zero=True)
    Y = np.asarray(Y, dtype=np.float64)
    Q, dd, q_var = _projected_queries(m, queries, queries_released, d)
    y_var = _database_variances(m, database_sigma, Y.shape[0], dd)
    return _search(m, Q, Y, kk, metric=metric, q_var=q_var, y_var=y_var, batch_size=bs)
