"""Geometry shared by attacks and evaluation: cosines between matching rows, retrieval ranks.

A low-level module (below ``attacks`` and ``evaluation``), so that importing an attack does not
load the evaluation package (sweeps, reports, plots). Cosine similarity throughout, rows
L2-normalised in float64, exact blocked search.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings
from ..mechanisms.base import unit_rows

__all__ = ["mean_cosine", "retrieval_ranks", "unit_pairs"]

_BLOCK = 2048


def unit_pairs(X: Any, Y: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``X`` and ``Y`` (same shape, validated) with rows scaled to unit length, float64."""
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
    A, B = unit_pairs(X, Y)
    return float(np.einsum("ij,ij->i", A, B).mean())


def retrieval_ranks(queries: Any, database: Any) -> NDArray[np.int64]:
    """Rank (0 = best) of row ``i`` of ``database`` among all rows for query ``i``, by cosine.

    Ties count against the query (a tie with the target ranks the target behind it), so a
    degenerate output never scores as a success.
    """
    Q, D = unit_pairs(queries, database)
    n = Q.shape[0]
    ranks = np.empty(n, dtype=np.int64)
    for s in range(0, n, _BLOCK):
        S = Q[s : s + _BLOCK] @ D.T
        target = S[np.arange(S.shape[0]), np.arange(s, s + S.shape[0])]
        greater_eq = (S >= target[:, None]).sum(axis=1) - 1
        ranks[s : s + S.shape[0]] = greater_eq
    return ranks
