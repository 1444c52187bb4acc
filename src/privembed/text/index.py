"""Nearest-neighbour search over a vocabulary (FAISS): exact flat search and optional HNSW.

Privacy note
------------
Mapping a noisy vector to a vocabulary word is *post-processing* of the d_X-private noisy
vector: any function of the noisy vector alone -- exact or approximate -- keeps the guarantee.
An approximate (HNSW) search therefore changes utility and speed, never the privacy, as long as
the index is built from public data (the vocabulary) and not from the text being protected.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_choice, check_int

__all__ = ["INDEX_METHODS", "DistanceRows", "NearestNeighbourIndex"]

INDEX_METHODS = ("exact", "hnsw")


def _faiss() -> Any:
    return require("faiss", "text", purpose="nearest-neighbour search")


#: flat searches of at least this many queries use FAISS's BLAS (matrix product) path
_BLAS_THRESHOLD = 20


@contextlib.contextmanager
def _blas_search(faiss: Any) -> Iterator[None]:
    """Route flat searches through BLAS for the duration of one call.

    Recent faiss-cpu wheels only use the matrix-product kernel from 128,000 queries on and
    compare vectors pair by pair below that, which for 50-dimensional vectors is several times
    slower (measured: 7x for 1,000 queries against GloVe's 400,000 words). The setting is
    process-wide in FAISS, so it is restored after the call.
    """
    previous = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = min(previous, _BLAS_THRESHOLD)
    try:
        yield
    finally:
        faiss.cvar.distance_compute_blas_threshold = previous


class DistanceRows:
    """Exact squared l2 distances from query rows to a fixed set of vectors, in float64.

    Keeps a float64 copy of the vectors and their squared norms, so that repeated calls (one
    block of rows at a time) do not convert the whole vocabulary again.

    Examples
    --------
    >>> DistanceRows(np.array([[3.0, 4.0], [0.0, 1.0]])).squared(np.zeros((1, 2))).tolist()
    [[25.0, 1.0]]
    """

    def __init__(self, vectors: Any) -> None:
        self.X = np.array(vectors, dtype=np.float64)
        self.norms = np.einsum("ij,ij->i", self.X, self.X)

    def squared(self, Q: Any) -> NDArray[np.float64]:
        """Squared distances, shape (m, V), clipped at 0."""
        Q64 = np.atleast_2d(np.asarray(Q, dtype=np.float64))
        D = Q64 @ self.X.T
        D *= -2.0
        D += np.einsum("ij,ij->i", Q64, Q64)[:, None]
        D += self.norms[None, :]
        np.maximum(D, 0.0, out=D)
        return D


class NearestNeighbourIndex:
    """k-nearest-neighbour search (squared l2) over fixed vectors, batched.

    Parameters
    ----------
    vectors : array_like, shape (V, d)
        The vocabulary vectors (stored by FAISS as float32).
    method : {"exact", "hnsw"}
        ``"exact"``: brute-force flat index (``faiss.IndexFlatL2``), exact up to float32
        rounding. ``"hnsw"``: a graph index (``faiss.IndexHNSWFlat``); faster, approximate.
        Either is post-processing of a private vector (see the module notes).
    hnsw_m : int
        HNSW graph degree.
    ef_construction, ef_search : int
        HNSW build and search breadth (higher: slower and closer to exact).
    cache : path, optional
        HNSW only: a file to read the built graph from, or to write it to after building
        (building takes minutes for 400,000 words). A digest of the vectors and the build
        parameters is stored next to it (``<cache>.sha256``); on a mismatch the index is
        rebuilt and the file replaced.

    Examples
    --------
    >>> idx = NearestNeighbourIndex(np.eye(3, dtype=np.float32))
    >>> dist, ids = idx.search(np.array([[0.9, 0.1, 0.0], [0.0, 0.0, 2.0]]), k=1)
    >>> ids[:, 0].tolist()
    [0, 2]
    """

    def __init__(
        self,
        vectors: Any,
        *,
        method: str = "exact",
        hnsw_m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 64,
        cache: str | os.PathLike[str] | None = None,
    ) -> None:
        self.method = check_choice("method", method, INDEX_METHODS)
        self.hnsw_m = check_int("hnsw_m", hnsw_m, ge=2)
        self.ef_construction = check_int("ef_construction", ef_construction, ge=1)
        self.ef_search = check_int("ef_search", ef_search, ge=1)
        X = np.ascontiguousarray(np.asarray(vectors), dtype=np.float32)
        if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
            raise DataError(f"vectors must have shape (V, d) with V, d >= 1, got shape {X.shape}.")
        faiss = self._faiss = _faiss()
        self.vectors: NDArray[np.float32] = X
        self.size, self.dim = int(X.shape[0]), int(X.shape[1])
        self._rows: DistanceRows | None = None
        if self.method == "exact":
            if cache is not None:
                raise ValueError("cache only applies to method='hnsw' (a flat index has no build).")
            self._index = faiss.IndexFlatL2(self.dim)
            self._index.add(X)
            return
        self._index = self._hnsw(X, None if cache is None else Path(cache))

    def _hnsw(self, X: NDArray[np.float32], cache: Path | None) -> Any:
        """Build an HNSW graph, or read it from ``cache`` when its digest matches."""
        faiss = self._faiss
        h = hashlib.sha256(f"hnsw:{self.hnsw_m}:{self.ef_construction}:{X.shape}".encode())
        h.update(X.tobytes())
        digest = h.hexdigest()
        sidecar = None if cache is None else cache.with_name(cache.name + ".sha256")
        if (
            cache is not None
            and sidecar is not None
            and cache.is_file()
            and sidecar.is_file()
            and sidecar.read_text(encoding="utf-8").strip() == digest
        ):
            index = faiss.read_index(os.fspath(cache))
        else:
            index = faiss.IndexHNSWFlat(self.dim, self.hnsw_m)
            index.hnsw.efConstruction = self.ef_construction
            index.add(X)
            if cache is not None and sidecar is not None:
                faiss.write_index(index, os.fspath(cache))
                sidecar.write_text(digest + "\n", encoding="utf-8")
        index.hnsw.efSearch = self.ef_search
        return index

    def __repr__(self) -> str:
        return f"NearestNeighbourIndex(method={self.method!r}, size={self.size}, dim={self.dim})"

    def search(self, queries: Any, k: int = 1) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """The ``k`` nearest vectors of each query, in one batched call.

        Parameters
        ----------
        queries : array_like, shape (m, d)
        k : int, 1 <= k <= V

        Returns
        -------
        distances : ndarray of float32, shape (m, k)
            Squared l2 distances, ascending.
        indices : ndarray of int64, shape (m, k)
            Rows of the vocabulary (HNSW may return ``-1`` when it finds fewer than ``k``).
        """
        k = check_int("k", k, ge=1, le=self.size)
        Q = np.ascontiguousarray(np.asarray(queries), dtype=np.float32)
        if Q.ndim != 2 or Q.shape[1] != self.dim:
            raise DataError(
                f"queries must have shape (m, {self.dim}), got shape {Q.shape} (dimension mismatch)."
            )
        if Q.shape[0] == 0:
            return np.empty((0, k), np.float32), np.empty((0, k), np.int64)
        if self.method == "hnsw":
            self._index.hnsw.efSearch = max(self.ef_search, k)
            dist, ids = self._index.search(Q, k)
        else:
            with _blas_search(self._faiss):
                dist, ids = self._index.search(Q, k)
        return dist, ids.astype(np.int64, copy=False)

    def nearest(self, queries: Any) -> NDArray[np.int64]:
        """Row of the nearest vector of each query, shape (m,)."""
        return self.search(queries, 1)[1][:, 0]

    def distance_rows(self, queries: Any) -> NDArray[np.float64]:
        """Exact squared distances from each query to every indexed vector, shape (m, V).

        O(V) per query: for the rare cases a ranked list longer than a search returns is
        needed. The float64 copy of the vectors is made on first use.
        """
        if self._rows is None:
            self._rows = DistanceRows(self.vectors)
        return self._rows.squared(queries)
