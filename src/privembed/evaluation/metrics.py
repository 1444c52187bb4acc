"""Utility metrics: how much of the original geometry survives protection.

All similarity is cosine (rows are L2-normalised internally, in float64 blocks), and search is
exact (blocked matrix products), so the numbers do not depend on an approximate index.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._validation import DataError, check_embeddings, check_int
from ..mechanisms.base import unit_rows

__all__ = ["mean_cosine", "neighbourhood_overlap", "retrieval_ranks", "self_retrieval"]

_BLOCK = 2048


def _pair(X: Any, Y: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    A, _ = check_embeddings(X, name="X")
    B, _ = check_embeddings(Y, name="Y")
    if A.shape != B.shape:
        raise DataError(f"X and Y must have the same shape, got {A.shape} and {B.shape}.")
    return unit_rows(A.astype(np.float64)), unit_rows(B.astype(np.float64))


def mean_cosine(X: Any, Y: Any) -> float:
    """Mean cosine similarity between matching rows of ``X`` and ``Y`` ([K26]).

    Examples
    --------
    >>> mean_cosine([[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 2.0]])
    0.8535533905932737
    """
    A, B = _pair(X, Y)
    return float(np.einsum("ij,ij->i", A, B).mean())


def retrieval_ranks(queries: Any, database: Any) -> NDArray[np.int64]:
    """Rank (0 = best) of row ``i`` of ``database`` among all rows for query ``i``, by cosine.

    Ties count against the query (a tie with the target ranks the target behind it), so a
    degenerate output never scores as a success.
    """
    Q, D = _pair(queries, database)
    n = Q.shape[0]
    ranks = np.empty(n, dtype=np.int64)
    for s in range(0, n, _BLOCK):
        S = Q[s : s + _BLOCK] @ D.T
        target = S[np.arange(S.shape[0]), np.arange(s, s + S.shape[0])]
        greater_eq = (S >= target[:, None]).sum(axis=1) - 1
        ranks[s : s + S.shape[0]] = greater_eq
    return ranks


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
    A, B = _pair(X, Y)
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
