"""Utility metrics: how much of the original geometry survives protection.

All similarity is cosine (rows are L2-normalised internally, in float64 blocks), and search is
exact (blocked matrix products), so the numbers do not depend on an approximate index.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int
from ..mechanisms.base import unit_rows
from ..search.geometry import mean_cosine, retrieval_ranks, unit_pairs

__all__ = [
    "TIES",
    "exact_search",
    "hits_at_k",
    "mean_cosine",
    "ndcg_at_k",
    "neighbourhood_overlap",
    "paired_cosines",
    "pearson",
    "qrels_recall_at_k",
    "rank_counts",
    "recall_at_k",
    "retrieval_metrics",
    "retrieval_ranks",
    "self_retrieval",
    "spearman",
    "sts_correlation",
]

_BLOCK = 2048


def self_retrieval(protected: Any, originals: Any, *, k: int = 1) -> float:
    """Share of protected vectors whose own original is among the ``k`` most similar originals.

    With ``k=1`` this is [K26]'s "top-1 retrieval accuracy" -- and, from the attacker's side, the
    top-1 re-identification rate of a linkage attack with the originals as candidate pool.

    Examples
    --------
    >>> X = np.eye(3); self_retrieval(X + 0.1, X)
    1.0
    """
    k = check_int("k", k, ge=1)
    return float((retrieval_ranks(protected, originals) < k).mean())


def neighbourhood_overlap(X: Any, Y: Any, *, k: int = 10) -> float:
    """Mean overlap |kNN_X(i) ∩ kNN_Y(i)| / k of each row's k nearest neighbours (self excluded)."""
    A, B = unit_pairs(X, Y)
    n = A.shape[0]
    k = check_int("k", k, ge=1, le=max(1, n - 1))
    total = 0.0
    for s in range(0, n, _BLOCK):
        idx = np.arange(s, min(s + _BLOCK, n))
        sets = []
        for M in (A, B):
            S = M[idx] @ M.T
            S[np.arange(idx.size), idx] = -np.inf
            sets.append(np.argpartition(-S, k, axis=1)[:, :k])
        for a, b in zip(sets[0], sets[1], strict=True):
            total += np.intersect1d(a, b, assume_unique=True).size / k
    return total / n


# ---------------------------------------------------------------------------------------------
# recall@k with an explicit tie policy
# ---------------------------------------------------------------------------------------------

TIES = ("pessimistic", "optimistic", "expected")


def rank_counts(queries: Any, database: Any) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """For query ``i``: how many database rows score strictly above row ``i``, and how many tie it.

    Scores are cosines computed in float64 blocks; row ``i`` itself is not counted as a tie.
    :func:`retrieval_ranks` is ``greater + ties`` (ties count against the query).

    Examples
    --------
    >>> g, t = rank_counts([[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]])
    >>> g.tolist(), t.tolist()
    ([0, 0], [1, 1])
    """
    Q, D = unit_pairs(queries, database)
    n = Q.shape[0]
    greater = np.empty(n, dtype=np.int64)
    ties = np.empty(n, dtype=np.int64)
    for s in range(0, n, _BLOCK):
        S = Q[s : s + _BLOCK] @ D.T
        rows = np.arange(S.shape[0])
        target = S[rows, rows + s][:, None]
        greater[s : s + S.shape[0]] = (S > target).sum(axis=1)
        ties[s : s + S.shape[0]] = (S == target).sum(axis=1) - 1
    return greater, ties


def hits_at_k(
    greater: Any, ties: Any, *, k: int = 1, policy: str = "pessimistic"
) -> NDArray[np.float64]:
    r"""Per-query hit indicator (or probability) at ``k`` from :func:`rank_counts` output.

    ``policy``: ``"pessimistic"`` -- a tie ranks the target behind every tied row (hit iff
    ``greater + ties < k``; the convention of :func:`retrieval_ranks`); ``"optimistic"`` -- ahead
    of them (hit iff ``greater < k``); ``"expected"`` -- ties broken uniformly at random, so the
    hit probability is :math:`\mathrm{clip}((k - g)/(t + 1), 0, 1)`.

    Examples
    --------
    >>> hits_at_k([0, 0, 3], [2, 0, 0], k=2, policy="expected").tolist()
    [0.6666666666666666, 1.0, 0.0]
    """
    k = check_int("k", k, ge=1)
    policy = _check_ties(policy)
    g = np.asarray(greater, dtype=np.float64)
    t = np.asarray(ties, dtype=np.float64)
    if policy == "pessimistic":
        return ((g + t) < k).astype(np.float64)
    if policy == "optimistic":
        return (g < k).astype(np.float64)
    return np.clip((k - g) / (t + 1.0), 0.0, 1.0)


def _check_ties(policy: str) -> str:
    if policy not in TIES:
        opts = ", ".join(repr(p) for p in TIES)
        raise ValueError(f"ties must be one of {opts}, got ties={policy!r}.")
    return policy


def recall_at_k(queries: Any, database: Any, *, k: int = 1, ties: str = "pessimistic") -> float:
    """Share of queries ``i`` whose target, database row ``i``, is among the ``k`` most similar rows.

    With protected vectors as queries and the originals as database this is [K26]'s top-1 /
    recall@k retrieval (:func:`self_retrieval` is the pessimistic case); with original queries
    and the protected vectors as database it is the search utility of a protected index.

    Parameters
    ----------
    queries, database : array_like, shape (n, d)
    k : int, >= 1
    ties : {"pessimistic", "optimistic", "expected"}
        How a tie between the target and another row is counted (see :func:`hits_at_k`).

    Examples
    --------
    >>> D = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    >>> [recall_at_k(D, D, k=1, ties=t) for t in ("pessimistic", "optimistic", "expected")]
    [0.3333333333333333, 1.0, 0.6666666666666666]
    """
    k = check_int("k", k, ge=1)
    _check_ties(ties)
    g, t = rank_counts(queries, database)
    return float(hits_at_k(g, t, k=k, policy=ties).mean())


# ---------------------------------------------------------------------------------------------
# correlations (STS)
# ---------------------------------------------------------------------------------------------


def _vectors(x: Any, y: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise DataError(f"x and y must have the same length, got {a.size} and {b.size}.")
    if a.size < 2:
        raise DataError(f"a correlation needs at least 2 pairs, got {a.size}.")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise DataError("x and y must be finite (NaN or inf found).")
    return a, b


def _correlation(test: Any, x: Any, y: Any) -> float:
    """``test(a, b).statistic`` (a scipy correlation) on the checked vectors; ``nan`` when
    either is constant (scipy warns and returns nan; the warning is not news here)."""
    a, b = _vectors(x, y)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(test(a, b).statistic)


def pearson(x: Any, y: Any) -> float:
    """Pearson correlation (:func:`scipy.stats.pearsonr`); ``nan`` when either input is constant.

    Examples
    --------
    >>> round(pearson([1, 2, 3, 4], [2, 4, 5, 9]), 6)
    0.964764
    """
    from scipy.stats import pearsonr

    return float(np.clip(_correlation(pearsonr, x, y), -1.0, 1.0))


def spearman(x: Any, y: Any) -> float:
    """Spearman rank correlation (:func:`scipy.stats.spearmanr`: Pearson of the average ranks,
    ties sharing their mean rank); ``nan`` when either input is constant.

    Examples
    --------
    >>> round(spearman([1, 2, 2, 3], [10, 20, 30, 40]), 12)
    0.948683298051
    """
    from scipy.stats import spearmanr

    return _correlation(spearmanr, x, y)


def paired_cosines(A: Any, B: Any) -> NDArray[np.float64]:
    """Cosine similarity of each row of ``A`` with the same row of ``B`` (float64)."""
    U, V = unit_pairs(A, B)
    return np.einsum("ij,ij->i", U, V)


def sts_correlation(A: Any, B: Any, scores: Any) -> dict[str, float]:
    """STS evaluation ([T26] App. D): correlation of cos(A_i, B_i) with human scores.

    Parameters
    ----------
    A, B : array_like, shape (n, d)
        Embeddings of the first and second sentence of each pair.
    scores : array_like, shape (n,)
        Human similarity judgments.

    Returns
    -------
    dict
        ``{"pearson": ..., "spearman": ...}``.

    Examples
    --------
    >>> A = [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]; B = [[1.0, 0.1], [1.0, 1.0], [0.0, 1.0]]
    >>> r = sts_correlation(A, B, [5.0, 3.0, 0.0]); round(r["pearson"], 4), r["spearman"]
    (0.9924, 1.0)
    """
    cos = paired_cosines(A, B)
    s = np.asarray(scores, dtype=np.float64).ravel()
    if s.size != cos.size:
        raise DataError(f"scores has {s.size} entries but there are {cos.size} pairs.")
    return {"pearson": pearson(cos, s), "spearman": spearman(cos, s)}


# ---------------------------------------------------------------------------------------------
# retrieval with relevance judgments (qrels)
# ---------------------------------------------------------------------------------------------


def _judged(qrels: Any) -> dict[str, dict[str, float]]:
    if not isinstance(qrels, dict):
        raise TypeError(f"qrels must be a dict {{query_id: {{doc_id: relevance}}}}, got {qrels!r}.")
    return {str(q): {str(d): float(r) for d, r in docs.items()} for q, docs in qrels.items()}


def ndcg_at_k(ranking: Any, qrels: Any, *, k: int = 10) -> float:
    r"""Mean NDCG@k over the queries that have at least one relevant document in ``qrels``.

    Gains are the graded relevance values, linear as in ``trec_eval`` / ``pytrec_eval`` (what
    BEIR and MTEB report, e.g. [T26] Table 6):

    .. math::
        \mathrm{DCG@k} = \sum_{i=1}^{k} \frac{rel_i}{\log_2(i + 1)}, \qquad
        \mathrm{NDCG@k} = \mathrm{DCG@k} / \mathrm{IDCG@k}

    with IDCG from the judged relevances sorted in decreasing order. A query missing from
    ``ranking`` scores 0; documents without a judgment have relevance 0.

    Computed by scikit-learn's :func:`~sklearn.metrics.ndcg_score` (the same formula) on one
    row per query: the retrieved documents scored in rank order, then ``k`` unjudged fillers,
    then the judged documents that were not retrieved (so that IDCG sees them but the top k
    never does).

    Parameters
    ----------
    ranking : dict of str -> sequence of str
        Retrieved document ids per query, best first.
    qrels : dict of str -> dict of str -> float
        Relevance judgments (``> 0`` means relevant).
    k : int, default 10

    Examples
    --------
    >>> qrels = {"q1": {"a": 2, "b": 1}, "q2": {"c": 1}}
    >>> # q1: (1 + 2/log2 4) / (2 + 1/log2 3) = 0.760188; q2: 1
    >>> round(ndcg_at_k({"q1": ["b", "x", "a"], "q2": ["c"]}, qrels, k=3), 6)
    0.880094
    """
    from ..core._optional import require

    ndcg_score = require("sklearn.metrics", "report", purpose="NDCG").ndcg_score
    k = check_int("k", k, ge=1)
    judged = _judged(qrels)
    rows: list[tuple[list[float], list[float]]] = []
    for q, docs in judged.items():
        if not any(r > 0 for r in docs.values()):
            continue
        got = list(dict.fromkeys(str(d) for d in list(ranking.get(q, ()))[:k]))
        gains = [max(docs.get(d, 0.0), 0.0) for d in got] + [0.0] * k
        seen = set(got)
        gains += [max(r, 0.0) for d, r in docs.items() if d not in seen]
        rows.append((gains, list(range(len(gains), 0, -1))))  # strictly decreasing scores
    if not rows:
        raise DataError("qrels has no query with a relevant document (relevance > 0).")
    width = max(len(g) for g, _ in rows)
    true = np.zeros((len(rows), width))
    score = np.full((len(rows), width), -1.0)  # padding ranks last and has no gain
    for i, (g, sc) in enumerate(rows):
        true[i, : len(g)] = g
        score[i, : len(sc)] = sc
    return float(ndcg_score(true, score, k=k, ignore_ties=True))


def qrels_recall_at_k(ranking: Any, qrels: Any, *, k: int = 10) -> float:
    """Mean over judged queries of |relevant ∩ top-k retrieved| / |relevant| (relevance > 0).

    Examples
    --------
    >>> qrels = {"q1": {"a": 2, "b": 1}, "q2": {"c": 1}}
    >>> qrels_recall_at_k({"q1": ["b", "x", "a"], "q2": ["d"]}, qrels, k=2)
    0.25
    """
    k = check_int("k", k, ge=1)
    judged = _judged(qrels)
    vals = []
    for q, docs in judged.items():
        rel = {d for d, r in docs.items() if r > 0}
        if not rel:
            continue
        got = {str(d) for d in list(ranking.get(q, ()))[:k]}
        vals.append(len(rel & got) / len(rel))
    if not vals:
        raise DataError("qrels has no query with a relevant document (relevance > 0).")
    return float(np.mean(vals))


def exact_search(
    queries: Any, database: Any, k: int
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Exact top-``k`` cosine search: FAISS ``IndexFlatIP`` over L2-normalised float32 rows.

    Falls back to blocked NumPy products (same scores, ties broken by row index) when
    ``faiss`` is not installed. ``k`` larger than the database is clipped.

    Returns
    -------
    scores : ndarray of float32, shape (nq, k)
        Cosines, descending.
    indices : ndarray of int64, shape (nq, k)

    Examples
    --------
    >>> s, i = exact_search([[1.0, 0.1]], [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], 2)
    >>> i.tolist()
    [[1, 2]]
    """
    Q, _ = check_embeddings(queries, name="queries")
    D, _ = check_embeddings(database, name="database", dim=Q.shape[1])
    k = min(check_int("k", k, ge=1), D.shape[0])
    Qn = np.ascontiguousarray(unit_rows(Q.astype(np.float64)), dtype=np.float32)
    Dn = np.ascontiguousarray(unit_rows(D.astype(np.float64)), dtype=np.float32)
    try:
        import faiss
    except ImportError:
        return _numpy_search(Qn, Dn, k)
    index = faiss.IndexFlatIP(Dn.shape[1])
    index.add(Dn)
    scores, idx = index.search(Qn, k)
    return scores, idx.astype(np.int64)


def _numpy_search(
    Q: NDArray[np.float32], D: NDArray[np.float32], k: int
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    scores = np.empty((Q.shape[0], k), dtype=np.float32)
    idx = np.empty((Q.shape[0], k), dtype=np.int64)
    for s in range(0, Q.shape[0], _BLOCK):
        S = Q[s : s + _BLOCK] @ D.T
        order = np.lexsort((np.broadcast_to(np.arange(D.shape[0]), S.shape), -S), axis=1)[:, :k]
        idx[s : s + S.shape[0]] = order
        scores[s : s + S.shape[0]] = np.take_along_axis(S, order, axis=1)
    return scores, idx


def retrieval_metrics(
    queries: Any,
    corpus: Any,
    qrels: Any,
    *,
    query_ids: Any,
    doc_ids: Any,
    ks: tuple[int, ...] = (10,),
    ndcg_k: int = 10,
) -> dict[str, float]:
    """NDCG@``ndcg_k`` and recall@k of exact cosine search for queries with relevance judgments.

    Parameters
    ----------
    queries : array_like, shape (nq, d)
        Query embeddings (for a protected corpus: plain queries, or for the projection
        mechanism its noiseless :meth:`~privembed.mechanisms.PrivateProjection.project`).
    corpus : array_like, shape (n, d)
        Document embeddings (original or protected).
    qrels : dict
        ``{query_id: {doc_id: relevance}}``.
    query_ids, doc_ids : sequences of str, lengths nq and n

    Returns
    -------
    dict
        ``{"ndcg@10": ..., "recall@10": ...}``.
    """
    qids = [str(q) for q in query_ids]
    dids = [str(d) for d in doc_ids]
    Q, _ = check_embeddings(queries, name="queries")
    if len(qids) != Q.shape[0]:
        raise DataError(f"query_ids has {len(qids)} entries but queries has {Q.shape[0]} rows.")
    C, _ = check_embeddings(corpus, name="corpus")
    if len(dids) != C.shape[0]:
        raise DataError(f"doc_ids has {len(dids)} entries but corpus has {C.shape[0]} rows.")
    depth = max(max(ks), ndcg_k)
    _, idx = exact_search(Q, C, depth)
    ranking = {q: [dids[j] for j in row if j >= 0] for q, row in zip(qids, idx, strict=True)}
    judged = {q: r for q, r in _judged(qrels).items() if q in ranking}
    out = {f"ndcg@{ndcg_k}": ndcg_at_k(ranking, judged, k=ndcg_k)}
    for k in ks:
        out[f"recall@{k}"] = qrels_recall_at_k(ranking, judged, k=k)
    return out
