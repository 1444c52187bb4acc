r"""Central-DP sketches: the JL-only sketch of Blocki et al. and its graph-cut release.

**These are not local mechanisms.** Everything else in :mod:`privembed.mechanisms` protects one
record at a time (local DP: each vector is released on its own). A sketch here is a *central*
release: a trusted curator holding the whole data matrix ``A`` (one record per row) publishes
:math:`MA` for a **secret** Gaussian matrix ``M``, and the (epsilon, delta) guarantee covers the
whole released matrix for neighbouring data matrices that differ in one row. There is no added
noise -- the secret projection *is* the noise -- and the guarantee holds only when every
singular value of ``A`` is large, which :class:`JLSketch` checks (and refuses otherwise) or
enforces with public smoothing ([BBDS12], [MC25] §3.2/§5.1).

References
----------
.. [MC25] Mishra & Chandra (2025). Differential privacy in data reduction. §3.2, §5.1.
.. [BBDS12] Blocki, Blum, Datta & Sheffet (2012). The Johnson-Lindenstrauss transform itself
   preserves differential privacy. FOCS (arXiv:1204.2136).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int, check_real
from ..core.accounting import ApproxDP, Guarantee
from ..core.rng import as_generator

__all__ = ["GraphSketch", "JLSketch", "blocki_threshold"]


def blocki_threshold(epsilon: float, delta: float, r: int) -> float:
    r"""Minimum singular value ``w`` that makes an ``r``-row Gaussian JL sketch (epsilon, delta)-DP.

    .. math:: w = \frac{16\sqrt{r\ln(2/\delta)}}{\varepsilon}\,\ln\frac{16r}{\delta}

    ([BBDS12] Thm 3.1), for neighbouring data matrices that differ in one row by a vector of
    l2 norm at most 1. The bound is loose by design of the proof; it grows like
    :math:`\sqrt r\,\log r`.

    Examples
    --------
    >>> round(blocki_threshold(1.0, 1e-5, 10), 1)
    2932.3
    """
    epsilon = check_real("epsilon", epsilon, gt=0)
    delta = check_real("delta", delta, gt=0, lt=1)
    r = check_int("r", r, ge=1)
    return 16.0 * math.sqrt(r * math.log(2.0 / delta)) * math.log(16.0 * r / delta) / epsilon


@dataclass(frozen=True)
class GraphSketch:
    r"""A released JL sketch of a graph's (overlaid) edge-incidence matrix ([BBDS12] Alg. 1).

    Attributes
    ----------
    sketch : ndarray, shape (r, n_vertices)
        :math:`M E_G` with :math:`M` a secret r-row Gaussian matrix.
    n_vertices : int
    overlay_weight : float
        Weight :math:`\omega` of the complete graph laid over every non-edge.
    """

    sketch: NDArray[np.float64]
    n_vertices: int
    overlay_weight: float

    def cut(self, S: Iterable[int]) -> float:
        r"""Unbiased estimate of the number of edges crossing :math:`(S, \bar S)`.

        .. math:: \widehat{\Phi}(S) = \frac{\|M E_G 1_S\|^2/r - \omega|S|(n-|S|)}{1-\omega}
        """
        n = self.n_vertices
        idx = np.unique(np.fromiter((int(v) for v in S), dtype=np.int64))
        if idx.size and (idx[0] < 0 or idx[-1] >= n):
            raise ValueError(f"S must hold vertex indices in [0, {n}), got {idx.tolist()!r}.")
        r = self.sketch.shape[0]
        v = self.sketch[:, idx].sum(axis=1)
        s = idx.size
        w = self.overlay_weight
        return float((v @ v / r - w * s * (n - s)) / (1.0 - w))


@dataclass(eq=False, kw_only=True)
class JLSketch:
    r"""The JL-only sketch of Blocki et al. ([BBDS12], [MC25] §3.2/§5.1): no added noise.

    Releases :math:`R = MA` for a data matrix :math:`A \in \mathbb R^{n\times d}` (one record
    per row) and a **secret** :math:`M \in \mathbb R^{r\times n}` of i.i.d. N(0, 1) entries
    drawn from the noise ``rng`` (never from a public seed: here the projection *is* the noise).
    In the issue's notation, with :math:`X = A^\top` holding one record per column and
    :math:`P = M`, this is :math:`Y = XP^\top = R^\top`.

    If every singular value of :math:`A` and of its neighbours is at least
    ``w = row_bound * blocki_threshold(epsilon, delta, r)``, the release is (epsilon, delta)-DP
    for matrices that differ in one row by a vector of norm at most ``row_bound``. The class
    checks this and **refuses** (``ValueError``) rather than release without a guarantee:

    * ``smoothing=False``: requires :math:`n \ge d` and :math:`\sigma_{\min}(A) \ge w +`
      ``row_bound`` (Weyl's inequality then gives every neighbour :math:`\sigma_{\min} \ge w`).
      The refusal itself depends on the data; the guarantee is meant for settings where the
      condition holds for every admissible data set.
    * ``smoothing=True``: releases :math:`M[A; wI_d]`, the public, deterministic alteration of
      [BBDS12]: singular values become :math:`\sqrt{\sigma_i^2 + w^2} \ge w` for every data
      set, so the guarantee is unconditional; :meth:`covariance_estimate` removes the
      :math:`w^2 I` it adds.

    Parameters
    ----------
    r : int, >= 1
        Sketch rows.
    epsilon : float, > 0
    delta : float, in (0, 1)
    smoothing : bool, default False
    row_bound : float, > 0, default 1
        l2 bound on the change of one row between neighbours (rescales ``w``).

    Examples
    --------
    >>> s = JLSketch(r=5, epsilon=10.0, delta=1e-3)
    >>> round(s.threshold, 1)
    111.4
    >>> s.release(np.eye(3), rng=0)
    Traceback (most recent call last):
    ...
    ValueError: JL-only sketch refused: the smallest singular value of the data matrix is 1 but the guarantee needs >= 112.4 (w=111.4 for r=5, epsilon=10, delta=0.001, plus the row-change bound 1 so every neighbour also qualifies); use smoothing=True or a larger epsilon.
    >>> JLSketch(r=5, epsilon=10.0, delta=1e-3, smoothing=True).release(np.eye(3), rng=0).shape
    (5, 3)
    """

    # the dataclass writes __init__ (keyword-only) and the repr of these fields; compared by
    # identity (eq=False), as a sketch's release is random
    r: int
    epsilon: float
    delta: float
    smoothing: bool = False
    row_bound: float = 1.0

    def __post_init__(self) -> None:
        self.r = check_int("r", self.r, ge=1)
        self.epsilon = check_real("epsilon", self.epsilon, gt=0)
        self.delta = check_real("delta", self.delta, gt=0, lt=1)
        if not isinstance(self.smoothing, bool):
            raise TypeError(f"smoothing must be a bool, got smoothing={self.smoothing!r}.")
        self.row_bound = check_real("row_bound", self.row_bound, gt=0)

    @property
    def threshold(self) -> float:
        """``w``: the singular-value floor the guarantee needs (scaled by ``row_bound``)."""
        return self.row_bound * blocki_threshold(self.epsilon, self.delta, self.r)

    @property
    def required_singular_value(self) -> float:
        """What :meth:`check` demands of the data: ``w + row_bound`` (0 with smoothing)."""
        return 0.0 if self.smoothing else self.threshold + self.row_bound

    @property
    def guarantee(self) -> Guarantee:
        """Central (epsilon, delta)-DP of the whole released matrix (not per-vector LDP)."""
        how = (
            f"public smoothing [A; {self.threshold:.4g} I]"
            if self.smoothing
            else f"checked smallest singular value >= {self.required_singular_value:.4g}"
        )
        return ApproxDP(
            self.epsilon,
            self.delta,
            neighbouring=(
                f"data matrices differing in one row by a vector of l2 norm <= {self.row_bound:g}"
            ),
            note=f"JL-only sketch (Blocki et al. 2012), r={self.r}; {how}",
        )

    @staticmethod
    def singular_values(A: Any) -> NDArray[np.float64]:
        """All ``d`` singular values of ``A`` (n, d), descending; zeros when ``n < d``."""
        arr, _ = check_embeddings(A, name="A", allow_zero=True)
        s = np.linalg.svd(np.asarray(arr, dtype=np.float64), compute_uv=False)
        d = arr.shape[1]
        return np.concatenate([s, np.zeros(d - s.size)]) if s.size < d else s

    def check(self, A: Any) -> float:
        """Return the smallest singular value of ``A``; raise ValueError if it is too small.

        With ``smoothing=True`` any ``A`` passes (the smoothing supplies the floor).
        """
        smin = float(self.singular_values(A)[-1])
        if not self.smoothing and smin < self.required_singular_value:
            raise ValueError(
                "JL-only sketch refused: the smallest singular value of the data matrix is "
                f"{smin:.4g} but the guarantee needs >= {self.required_singular_value:.4g} "
                f"(w={self.threshold:.4g} for r={self.r}, epsilon={self.epsilon:g}, "
                f"delta={self.delta:g}, plus the row-change bound {self.row_bound:g} so every "
                "neighbour also qualifies); use smoothing=True or a larger epsilon."
            )
        return smin

    def release(self, A: Any, *, rng: Any = None) -> NDArray[np.float64]:
        """Check the precondition and return the sketch ``M A`` (or ``M [A; w I]``), shape (r, d).

        Raises
        ------
        ValueError
            The singular-value precondition fails (see :meth:`check`).
        """
        self.check(A)
        arr, _ = check_embeddings(A, name="A", allow_zero=True)
        A2 = np.asarray(arr, dtype=np.float64)
        if self.smoothing:
            A2 = np.vstack([A2, self.threshold * np.eye(A2.shape[1])])
        M = as_generator(rng).standard_normal((self.r, A2.shape[0]))
        return M @ A2

    def covariance_estimate(self, R: Any) -> NDArray[np.float64]:
        r"""Unbiased estimate of :math:`A^\top A` from a release: :math:`R^\top R/r` (minus
        :math:`w^2 I` with smoothing)."""
        R = np.asarray(R, dtype=np.float64)
        if R.ndim != 2 or R.shape[0] != self.r:
            raise DataError(f"R must have shape (r={self.r}, d), got shape {R.shape}.")
        C = R.T @ R / self.r
        if self.smoothing:
            C -= self.threshold**2 * np.eye(C.shape[0])
        return C

    def graph_overlay_weight(self, n_vertices: int) -> float:
        r"""Weight :math:`\omega = 2w^2/n` of the complete graph laid over the non-edges.

        One edge changes one row of :math:`E_G` by at most :math:`\sqrt2(1-\sqrt\omega)`, so the
        graph sketch uses ``row_bound`` :math:`\sqrt2`; the overlay gives the Laplacian
        eigenvalues :math:`\ge \omega n = 2w^2` on :math:`1^\perp` for *every* graph.
        """
        n = check_int("n_vertices", n_vertices, ge=2)
        w = blocki_threshold(self.epsilon, self.delta, self.r)
        return 2.0 * w * w / n

    def release_graph(
        self, edges: Iterable[tuple[int, int]], n_vertices: int, *, rng: Any = None
    ) -> GraphSketch:
        r"""Sketch of a graph that answers every cut query ([BBDS12] Alg. 1), edge-level DP.

        Every pair :math:`u<v` gets weight 1 if it is an edge and :math:`\omega` otherwise
        (:meth:`graph_overlay_weight`); the release is :math:`M E_G` for the weighted
        :math:`\binom n2 \times n` incidence matrix (cost :math:`O(r n^2)`).

        Raises
        ------
        ValueError
            :math:`\omega > 1`: the graph has too few vertices (:math:`n < 2w^2`) for the
            overlay to give the guarantee; or an edge is invalid.
        """
        n = check_int("n_vertices", n_vertices, ge=2)
        omega = self.graph_overlay_weight(n)
        if omega > 1.0:
            w = blocki_threshold(self.epsilon, self.delta, self.r)
            raise ValueError(
                f"JL-only graph sketch refused: n_vertices={n} is below 2*w^2={2 * w * w:.4g} "
                f"(w={w:.4g} for r={self.r}, epsilon={self.epsilon:g}, delta={self.delta:g}), "
                "so the overlay cannot raise every singular value to the required floor."
            )
        iu, ju = np.triu_indices(n, k=1)
        weight = np.full(iu.size, omega)
        e = np.asarray(list(edges), dtype=np.int64).reshape(-1, 2)
        if e.size:
            if e.min() < 0 or e.max() >= n or np.any(e[:, 0] == e[:, 1]):
                raise ValueError(f"edges must join two distinct vertices in [0, {n}).")
            lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
            # position of pair (lo, hi) in the triu_indices order
            pos = lo * n - lo * (lo + 1) // 2 + (hi - lo - 1)
            weight[pos] = 1.0
        root = np.sqrt(weight)
        npairs = iu.size
        inc = sp.csr_matrix(
            (
                np.concatenate([root, -root]),
                (np.concatenate([np.arange(npairs)] * 2), np.concatenate([iu, ju])),
            ),
            shape=(npairs, n),
        )
        M = as_generator(rng).standard_normal((self.r, npairs))
        sketch = np.asarray((inc.T @ M.T).T)
        return GraphSketch(sketch=sketch, n_vertices=n, overlay_weight=omega)
