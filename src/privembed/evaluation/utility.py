"""All utility metrics of one release in one pass: the evaluator a sweep calls per cell.

:class:`UtilityEvaluator` holds the original embeddings and everything about them that does not
change between releases (unit rows, a fixed query sample, the original k-nearest neighbours,
the optional STS and retrieval tasks), so each release costs three blocked float32 matrix
products over the query sample and nothing else:

==========================  ===================================================================
column                      meaning
==========================  ===================================================================
``mean_cosine``             mean cos(y_i, x_i) over all rows ([K26])
``top1_originals``,         protected vector y_i as query, the originals as database: is x_i
``recall@k_originals``      first / among the k best? ([K26] "top-1 retrieval accuracy"; from
                            the attacker's side, the linkage re-identification rate)
``top1_protected``,         plain query x_i against the protected vectors: is y_i first / in
``recall@k_protected``      the top k? (search utility of a protected index)
``knn_overlap@k``           overlap of the k nearest neighbours of y_i among the protected
                            vectors with those of x_i among the originals
``sts_pearson``,            correlation of cos(y_a, y_b) with human scores over judged pairs
``sts_spearman``            ([T26] App. D)
``ndcg@10``,                exact cosine search of plain queries over the protected corpus,
``recall@k_qrels``          scored with relevance judgments ([T26] Table 6)
==========================  ===================================================================

The projection mechanism (:class:`~privembed.mechanisms.PrivateProjection`) releases
k-dimensional vectors; for it the originals are compared in the released space -- the
reference of x_i is its noiseless projection ``P x_i`` (:meth:`~PrivateProjection.project`),
which is also what a querying party sends -- and ranking is by plain cosine to the raw
releases, the default of :meth:`PrivateProjection.search` (measured to rank better than the
bias-corrected estimator, ``docs/projection.md``). The neighbourhood reference is always the
original space.

Ties: ranks count a tie against the query (``ties="pessimistic"``, as
:func:`~privembed.evaluation.metrics.retrieval_ranks`); ``"optimistic"`` and ``"expected"``
are available.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int
from ..core.rng import as_generator
from ..mechanisms.base import Mechanism, unit_rows
from .metrics import _check_ties, hits_at_k, pearson, retrieval_metrics, spearman

__all__ = ["RetrievalTask", "STSTask", "UtilityEvaluator", "utility_columns"]

_BLOCK = 1024


@dataclass(frozen=True)
class STSTask:
    """Pairs of rows of the evaluated embeddings with human similarity scores.

    Attributes
    ----------
    pairs : ndarray of int, shape (m, 2)
        Row indices ``(a, b)`` into the embeddings ``X`` given to :class:`UtilityEvaluator`.
    scores : ndarray of float, shape (m,)
        Human similarity of each pair.
    name : str
    """

    pairs: NDArray[np.int64]
    scores: NDArray[np.float64]
    name: str = "sts"

    def __post_init__(self) -> None:
        p = np.asarray(self.pairs, dtype=np.int64)
        s = np.asarray(self.scores, dtype=np.float64).ravel()
        if p.ndim != 2 or p.shape[1] != 2:
            raise DataError(f"pairs must have shape (m, 2), got {p.shape}.")
        if p.shape[0] != s.size or s.size < 2:
            raise DataError(
                f"pairs and scores must have the same length >= 2, got {p.shape[0]} and {s.size}."
            )
        object.__setattr__(self, "pairs", p)
        object.__setattr__(self, "scores", s)


@dataclass(frozen=True)
class RetrievalTask:
    """Plain queries with relevance judgments over a corpus whose rows are the evaluated ``X``.

    Attributes
    ----------
    queries : ndarray, shape (nq, d)
        Query embeddings (never protected: the querying party holds them).
    query_ids : list of str
    doc_ids : list of str
        Id of each row of ``X``.
    qrels : dict
        ``{query_id: {doc_id: relevance}}``.
    ks : tuple of int
        Recall cut-offs (NDCG is always at 10).
    """

    queries: NDArray[np.float32]
    query_ids: list[str]
    doc_ids: list[str]
    qrels: dict[str, dict[str, float]]
    ks: tuple[int, ...] = (10, 100)
    name: str = "retrieval"

    def __post_init__(self) -> None:
        Q, _ = check_embeddings(self.queries, name="queries")
        if len(self.query_ids) != Q.shape[0]:
            raise DataError(
                f"query_ids has {len(self.query_ids)} entries but queries has {Q.shape[0]} rows."
            )
        object.__setattr__(self, "queries", np.asarray(Q, dtype=np.float32))


def utility_columns(
    ks: tuple[int, ...] = (1, 10),
    neighbours: int = 10,
    *,
    sts: bool = False,
    retrieval: RetrievalTask | None = None,
) -> dict[str, str]:
    """Column name -> one-line description, for the metrics :class:`UtilityEvaluator` computes."""
    cols = {"mean_cosine": "mean cosine between each protected vector and its original"}
    for where, what in (
        ("originals", "protected vector as query, originals as database"),
        ("protected", "original as query, protected vectors as database"),
    ):
        for k in ks:
            name = f"top1_{where}" if k == 1 else f"recall@{k}_{where}"
            cols[name] = f"{'top-1' if k == 1 else f'recall@{k}'} self-retrieval: {what}"
    if neighbours:
        cols[f"knn_overlap@{neighbours}"] = (
            f"overlap of the {neighbours} nearest neighbours before and after protection"
        )
    if sts:
        cols["sts_pearson"] = "Pearson correlation of cosine with human similarity"
        cols["sts_spearman"] = "Spearman correlation of cosine with human similarity"
    if retrieval is not None:
        cols["ndcg@10"] = "NDCG@10 of plain queries over the protected corpus (qrels)"
        for k in retrieval.ks:
            cols[f"recall@{k}_qrels"] = f"recall@{k} of plain queries (qrels)"
    return cols


class UtilityEvaluator:
    """Compute every utility metric of a release of ``X`` (see the module notes for the columns).

    Parameters
    ----------
    X : array_like, shape (n, d)
        The original embeddings (rows are compared by cosine).
    ks : tuple of int, default (1, 10)
        Cut-offs of the self-retrieval recall (1 gives the ``top1_*`` columns).
    neighbours : int, default 10
        k of the neighbourhood overlap (0 disables it).
    n_queries : int or None, default 2000
        Rows used as queries for the ranking metrics, a fixed uniform sample drawn once with
        ``query_seed`` (every release is scored on the same queries, so comparisons between
        configurations are paired); each query is ranked against *all* ``n`` rows. ``None`` uses
        every row. ``mean_cosine`` always uses every row. With q queries a rate has a sampling
        standard error of at most ``0.5 / sqrt(q)`` (0.011 at q = 2000).
    query_seed : int, default 0
    sts : STSTask, optional
    retrieval : RetrievalTask, optional
    ties : {"pessimistic", "optimistic", "expected"}, default "pessimistic"

    Examples
    --------
    >>> from privembed.mechanisms import GaussianMechanism
    >>> X = np.random.default_rng(0).standard_normal((200, 16))
    >>> ev = UtilityEvaluator(X, n_queries=None)
    >>> ev.evaluate(X)["top1_originals"]
    1.0
    >>> m = GaussianMechanism(epsilon=50.0, delta=1e-5)
    >>> r = ev.evaluate(m.privatize(X, rng=1), m)
    >>> round(r["mean_cosine"], 3), r["top1_originals"], r["recall@10_originals"]
    (0.626, 0.505, 0.93)
    """

    def __init__(
        self,
        X: Any,
        *,
        ks: tuple[int, ...] = (1, 10),
        neighbours: int = 10,
        n_queries: int | None = 2000,
        query_seed: int = 0,
        sts: STSTask | None = None,
        retrieval: RetrievalTask | None = None,
        ties: str = "pessimistic",
    ) -> None:
        A, _ = check_embeddings(X, name="X")
        if A.shape[0] < 2:
            raise DataError(f"X needs at least 2 rows to rank, got {A.shape[0]}.")
        self.X = np.asarray(A)
        self.n, self.d = A.shape
        if isinstance(ks, int) or not ks:
            raise ValueError(f"ks must be a non-empty tuple of ints, got ks={ks!r}.")
        self.ks = tuple(sorted({check_int("k", k, ge=1) for k in ks}))
        self.neighbours = check_int("neighbours", neighbours, ge=0, le=self.n - 1)
        self.ties = _check_ties(ties)
        if n_queries is None or n_queries >= self.n:
            self.query_index = np.arange(self.n)
        else:
            q = check_int("n_queries", n_queries, ge=1)
            self.query_index = np.sort(as_generator(query_seed).choice(self.n, q, replace=False))
        self.n_queries_requested = n_queries
        self.query_seed = query_seed
        if sts is not None and (sts.pairs.min() < 0 or sts.pairs.max() >= self.n):
            raise DataError(f"sts pairs must index rows of X in [0, {self.n}).")
        self.sts = sts
        if retrieval is not None:
            if len(retrieval.doc_ids) != self.n:
                raise DataError(
                    f"retrieval doc_ids has {len(retrieval.doc_ids)} entries but X has "
                    f"{self.n} rows."
                )
            if retrieval.queries.shape[1] != self.d:
                raise DataError(
                    f"retrieval queries have dimension {retrieval.queries.shape[1]} but X has "
                    f"{self.d}."
                )
        self.retrieval = retrieval
        self._unit = _unit32(self.X)
        self._refs: dict[str, NDArray[np.float32]] = {}
        self._knn: NDArray[np.int64] | None = None

    # ---- description ------------------------------------------------------------------------
    @property
    def columns(self) -> dict[str, str]:
        """The metric columns :meth:`evaluate` returns, with descriptions."""
        return utility_columns(
            self.ks, self.neighbours, sts=self.sts is not None, retrieval=self.retrieval
        )

    def settings(self) -> dict[str, Any]:
        """JSON-safe description of what is measured (part of a sweep's signature)."""
        return {
            "ks": list(self.ks),
            "neighbours": self.neighbours,
            "n_queries": int(self.query_index.size),
            "query_seed": self.query_seed,
            "ties": self.ties,
            "sts": None
            if self.sts is None
            else {"name": self.sts.name, "pairs": len(self.sts.scores)},
            "retrieval": None
            if self.retrieval is None
            else {"name": self.retrieval.name, "queries": len(self.retrieval.query_ids)},
        }

    # ---- reference side ---------------------------------------------------------------------
    def reference(self, mechanism: Mechanism | None, out_dim: int) -> NDArray[np.float32]:
        """Unit reference rows in the released space: ``x`` (or ``P x`` for a projection)."""
        if out_dim == self.d and not _projects(mechanism):
            return self._unit
        if not _projects(mechanism):
            raise DataError(
                f"the release has dimension {out_dim} but X has {self.d}, and the mechanism "
                f"{mechanism!r} has no project() to map the originals into the released space."
            )
        assert mechanism is not None
        key = hashlib.sha256(repr(_projection_key(mechanism)).encode()).hexdigest()
        if key not in self._refs:
            self._refs[key] = _unit32(np.asarray(mechanism.project(self.X)))  # type: ignore[attr-defined]
        return self._refs[key]

    def _reference_knn(self) -> NDArray[np.int64]:
        if self._knn is None:
            self._knn = _knn_rows(self._unit, self.query_index, self.neighbours)
        return self._knn

    # ---- the evaluation ---------------------------------------------------------------------
    def evaluate(self, Y: Any, mechanism: Mechanism | None = None) -> dict[str, float]:
        """Every utility metric of the release ``Y`` of ``X`` by ``mechanism`` (None: no mechanism).

        Parameters
        ----------
        Y : array_like, shape (n, d) or (n, k)
            The protected vectors, row i from x_i.
        mechanism : Mechanism, optional
            Needed when the release changes the dimension (projection).

        Returns
        -------
        dict of str -> float
        """
        B, _ = check_embeddings(Y, name="Y", allow_zero=False)
        if B.shape[0] != self.n:
            raise DataError(f"Y has {B.shape[0]} rows but X has {self.n}.")
        Yn = _unit32(np.asarray(B))
        R = self.reference(mechanism, Yn.shape[1])
        out: dict[str, float] = {
            "mean_cosine": float(np.einsum("ij,ij->i", Yn, R, dtype=np.float64).mean())
        }
        q = self.query_index
        g_o, t_o = _target_counts(Yn, R, q)  # protected query -> originals
        g_p, t_p = _target_counts(R, Yn, q)  # original query -> protected
        for where, (g, t) in (("originals", (g_o, t_o)), ("protected", (g_p, t_p))):
            for k in self.ks:
                name = f"top1_{where}" if k == 1 else f"recall@{k}_{where}"
                out[name] = float(hits_at_k(g, t, k=k, policy=self.ties).mean())
        if self.neighbours:
            ref = self._reference_knn()
            got = _knn_rows(Yn, q, self.neighbours)
            out[f"knn_overlap@{self.neighbours}"] = _overlap(ref, got)
        if self.sts is not None:
            a, b = self.sts.pairs[:, 0], self.sts.pairs[:, 1]
            cos = np.einsum("ij,ij->i", Yn[a], Yn[b], dtype=np.float64)
            out["sts_pearson"] = pearson(cos, self.sts.scores)
            out["sts_spearman"] = spearman(cos, self.sts.scores)
        if self.retrieval is not None:
            task = self.retrieval
            queries = (
                np.asarray(mechanism.project(task.queries))  # type: ignore[union-attr]
                if _projects(mechanism) and Yn.shape[1] != self.d
                else task.queries
            )
            res = retrieval_metrics(
                queries,
                Yn,
                task.qrels,
                query_ids=task.query_ids,
                doc_ids=task.doc_ids,
                ks=task.ks,
                ndcg_k=10,
            )
            out["ndcg@10"] = res["ndcg@10"]
            for k in task.ks:
                out[f"recall@{k}_qrels"] = res[f"recall@{k}"]
        return out

    def baseline(self) -> dict[str, float]:
        """The metrics of the unprotected embeddings (``Y = X``): the ceiling of every column."""
        return self.evaluate(self.X)


# ---- helpers ------------------------------------------------------------------------------------


def _unit32(X: NDArray[Any]) -> NDArray[np.float32]:
    return np.ascontiguousarray(unit_rows(np.asarray(X, dtype=np.float64)), dtype=np.float32)


def _projects(mechanism: Any) -> bool:
    return mechanism is not None and callable(getattr(mechanism, "project", None))


def _projection_key(mechanism: Any) -> Any:
    proj = getattr(mechanism, "projection", None)
    return (type(mechanism).__name__, repr(proj), getattr(mechanism, "input_norm", None))


def _target_counts(
    Qall: NDArray[np.float32], D: NDArray[np.float32], q: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """For each query row q_i of ``Qall``: rows of ``D`` scoring above / tied with row q_i."""
    greater = np.empty(q.size, dtype=np.int64)
    ties = np.empty(q.size, dtype=np.int64)
    for s in range(0, q.size, _BLOCK):
        rows = q[s : s + _BLOCK]
        S = Qall[rows] @ D.T
        target = S[np.arange(rows.size), rows][:, None]
        greater[s : s + rows.size] = np.count_nonzero(S > target, axis=1)
        ties[s : s + rows.size] = np.count_nonzero(S == target, axis=1) - 1
    return greater, ties


def _knn_rows(U: NDArray[np.float32], q: NDArray[np.int64], k: int) -> NDArray[np.int64]:
    """Indices of the k most similar rows of ``U`` to each row ``q_i`` (itself excluded).

    Exact: FAISS brute-force inner product (``faiss.knn``, blocked GEMM + heap selection) when
    installed, else NumPy products and ``argpartition``.
    """
    faiss: Any
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss is in the text extra
        faiss = None
    if faiss is not None:
        _, idx = faiss.knn(np.ascontiguousarray(U[q]), U, k + 1, faiss.METRIC_INNER_PRODUCT)
        idx = idx.astype(np.int64)
        # drop the query itself (it need not come first when another row ties with it); where
        # it is absent, drop the (k+1)-th neighbour
        is_self = idx == q[:, None]
        is_self[~is_self.any(axis=1), -1] = True
        keep = np.argsort(is_self, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(idx, keep, axis=1)
    out = np.empty((q.size, k), dtype=np.int64)
    for s in range(0, q.size, _BLOCK):
        rows = q[s : s + _BLOCK]
        S = U[rows] @ U.T
        S[np.arange(rows.size), rows] = -np.inf
        out[s : s + rows.size] = np.argpartition(-S, k - 1, axis=1)[:, :k]
    return out


def _overlap(A: NDArray[np.int64], B: NDArray[np.int64]) -> float:
    k = A.shape[1]
    A2 = np.sort(A, axis=1)
    B2 = np.sort(B, axis=1)
    # |A ∩ B| per row via a merged sort: duplicates of a value appear once in each set
    both = np.sort(np.concatenate([A2, B2], axis=1), axis=1)
    common = np.count_nonzero(both[:, 1:] == both[:, :-1], axis=1)
    return float(common.mean() / k)
