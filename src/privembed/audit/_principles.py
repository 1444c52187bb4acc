r"""What the white box holds a mechanism to: values recomputed from its constructor parameters
and first principles -- never the attribute under check.

* **Gaussian sigma**: the smallest sigma that gives (epsilon, delta) at sensitivity Delta,
  found by Google's ``dp_accounting`` (its own search over Balle & Wang's exact delta), or the
  classic closed form :math:`\Delta\sqrt{2\ln(1.25/\delta)}/\varepsilon`. Not
  :mod:`privembed.core.theory`, which is what the mechanisms calibrate with.
* **Sensitivity**: from the neighbouring relation: any two vectors of the unit ball are at most
  2 apart (record level); a bounded relation states its distance (the ``sensitivity``
  parameter); a projection's is :math:`2\|P\|_2` (record) or :math:`\max_j\|Pe_j\|_2`
  (attribute), with ``P`` rebuilt from its public parameters (``k``, ``kind``,
  ``projection_seed``) and its norm taken by an SVD here.
* **Mahalanobis Sigma**: :math:`\mathrm{diag}(m + \delta)` from a mask, or the covariance as
  given, normalised to trace d, then smoothed :math:`\lambda I + (1-\lambda)\Sigma` and
  renormalised to trace d (the design notes; [T26] Alg. 1, [F26] eq. 6) -- written here again,
  not imported from the mechanism.

References
----------
.. [BW18] Balle & Wang (2018). Improving the Gaussian mechanism for differential privacy. ICML.
.. [T26] Tsai et al. (2026). Concept-aware privacy mechanisms (SPARSE). Alg. 1.
.. [F26] Anisotropic noise fingerprints reveal concept choice. Eq. 6.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..mechanisms.jl import JLProjection

__all__ = [
    "SIGMA_ATOL",
    "UNIT_DIAMETER",
    "Metric",
    "calibrated_sigma",
    "classic_sigma",
    "gaussian_sigma",
    "mahalanobis_metric",
    "projection_matrix",
]

#: the l2 diameter of the unit ball (and sphere): the sensitivity of record-level LDP
UNIT_DIAMETER = 2.0
#: dp_accounting bisects sigma to 1e-7 (absolute) and returns a feasible value, at most that
#: much above the smallest; comparisons with it allow twice that
SIGMA_ATOL = 2e-7


@functools.lru_cache(maxsize=256)
def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest sigma with (epsilon, delta)-DP at l2 ``sensitivity``, by ``dp_accounting``.

    Examples
    --------
    >>> round(gaussian_sigma(1.0, 1e-5, 2.0), 4)
    7.4613
    """
    if delta >= 1.0:
        return 0.0  # a vacuous claim needs no noise
    require("dp_accounting", "accounting", purpose="the white-box check of Gaussian noise")
    from dp_accounting.pld import accountant, common

    params = common.DifferentialPrivacyParameters(float(epsilon), float(delta))
    return float(
        accountant.get_smallest_gaussian_noise(params, num_queries=1, sensitivity=sensitivity)
    )


def classic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    r"""The classic calibration :math:`\Delta\sqrt{2\ln(1.25/\delta)}/\varepsilon`."""
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def calibrated_sigma(calibration: str, epsilon: float, delta: float, sensitivity: float) -> float:
    """The sigma a calibration rule gives (``"analytic"`` or ``"classic"``)."""
    if calibration == "classic":
        return classic_sigma(epsilon, delta, sensitivity)
    return gaussian_sigma(epsilon, delta, sensitivity)


def projection_matrix(params: dict[str, Any], d: int) -> NDArray[np.float64]:
    """The public matrix rebuilt from a projection's parameters (not the mechanism's object)."""
    proj = JLProjection(
        k=int(params["k"]),
        kind=str(params.get("kind", "gaussian")),
        seed=int(params.get("projection_seed", 0)),
    )
    return np.array(proj.matrix(d), dtype=np.float64)


@dataclass(frozen=True)
class Metric:
    r"""A Mahalanobis metric :math:`\|\Sigma^{-1/2}v\|` by Sigma's eigen-decomposition.

    ``vectors`` is ``None`` when Sigma is diagonal (its eigenvectors are the axes and
    ``values`` is the diagonal). :meth:`whiten` returns coordinates in the eigenbasis, scaled to
    unit variance: norms are the Mahalanobis norms.
    """

    values: NDArray[np.float64]
    vectors: NDArray[np.float64] | None = None

    @property
    def identity(self) -> bool:
        return self.vectors is None and bool(np.all(self.values == 1.0))

    @property
    def diagonal(self) -> NDArray[np.float64]:
        """Sigma's diagonal."""
        if self.vectors is None:
            return self.values
        return np.asarray(np.einsum("ij,j,ij->i", self.vectors, self.values, self.vectors))

    def axis(self, j: int) -> NDArray[np.float64]:
        """The unit eigenvector of ``values[j]``."""
        if self.vectors is None:
            e = np.zeros(self.values.size)
            e[j] = 1.0
            return e
        return np.array(self.vectors[:, j])

    def whiten(self, Z: NDArray[Any]) -> NDArray[np.float64]:
        W = Z if self.vectors is None else Z @ self.vectors
        return np.asarray(W / np.sqrt(self.values), dtype=np.float64)


def _to_trace(S: NDArray[np.float64], d: int) -> NDArray[np.float64]:
    tr = float(np.trace(S)) if S.ndim == 2 else float(np.sum(S))
    return S * (d / tr)


def mahalanobis_metric(params: dict[str, Any], d: int) -> Metric:
    """Sigma of a Mahalanobis mechanism, rebuilt from its constructor parameters.

    Raises
    ------
    ValueError
        The parameters' Sigma has another dimension than ``d``, or is singular.
    """
    mask, cov = params.get("mask"), params.get("covariance")
    if mask is not None:
        m = np.asarray(mask, dtype=np.float64).ravel()
        S: NDArray[np.float64] | None = _to_trace(m + float(params.get("mask_delta", 0.0)), d)
    elif cov is not None:
        C = np.asarray(cov, dtype=np.float64)
        if C.ndim == 2 and np.count_nonzero(C - np.diag(np.diag(C))) == 0:
            C = np.diag(C).copy()
        S = _to_trace(C, d)
    else:
        S = None
    if S is None:
        return Metric(np.ones(d))
    if S.shape[0] != d:
        raise ValueError(
            f"the mechanism's mask/covariance has dimension {S.shape[0]}, but dim={d}."
        )
    lam = float(params.get("smoothing", 0.0))
    if lam > 0:
        eye = np.ones(d) if S.ndim == 1 else np.eye(d)
        S = _to_trace(lam * eye + (1.0 - lam) * S, d)
    if S.ndim == 1:
        out = Metric(S)
    else:
        w, V = np.linalg.eigh((S + S.T) / 2.0)
        out = Metric(w, V)
    if not float(out.values.min()) > 0:
        raise ValueError(
            f"Sigma is singular (smallest eigenvalue {float(out.values.min()):.3g}, e.g. a mask "
            "with zeros and mask_delta=0): the Mahalanobis metric is infinite along its null "
            "directions, where the noise is zero, and the audit cannot whiten by it."
        )
    return out
