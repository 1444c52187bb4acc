"""Laplace noise families: multivariate l2 Laplace noise (``laplace``) and Mahalanobis noise
(``mahalanobis``), which whitened by the *claimed* Sigma is l2 Laplace.

Both are metric (d_X) claims; the noise (whitened) is fitted by :class:`~._whitebox.RadiusFit`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_real
from ..mechanisms.base import Mechanism
from ._bounds import ScoreLaw
from ._family import Family, Pair, l2_pair, sphere_pair
from ._laws import gamma_radius_grid, sphere_cos_grid
from ._principles import Metric, mahalanobis_metric
from ._results import Estimate, ParameterCheck
from ._whitebox import (
    Draws,
    Evidence,
    RadiusFit,
    check_claim_epsilon,
    norms,
    random_unit_rows,
    raw_twin,
    relative,
)

__all__ = ["LaplaceFamily", "MahalanobisFamily"]


class LaplaceFamily(Family):
    """Multivariate l2 Laplace noise (``laplace``): radius Gamma(d, 1/epsilon), uniform direction."""

    name = "l2 laplace"
    has_statistic = True

    def metric(self, mech: Mechanism, d: int) -> Metric:
        """The claim's metric (l2: the identity)."""
        return Metric(np.ones(d))

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        bounded = mech.input_norm in ("normalize", "clip")
        l2 = 2.0 if distance is None else check_real("distance", distance, gt=0)
        if l2 <= 2.0:
            return l2_pair(d, l2, rng)
        if bounded:
            raise ValueError(
                f"unit-vector inputs (input_norm={mech.input_norm!r}) are at most 2 apart; "
                f"distance must be <= 2, got distance={distance!r}."
            )
        v = random_unit_rows(rng, 1, d)[0]
        return Pair(-l2 / 2 * v, l2 / 2 * v, l2, f"+-{l2 / 2:g} v (input_norm='none')", True)

    def statistic(self, mech: Mechanism, pair: Pair, Y: NDArray[Any]) -> NDArray[Any]:
        M = pair.metric if pair.metric is not None else self.metric(mech, Y.shape[1])
        return norms(M.whiten(Y - pair.x0)) - norms(M.whiten(Y - pair.x1))

    def claimed_epsilon(self, mech: Mechanism) -> float:
        return self.claim(mech).epsilon

    def checks(self, mech: Mechanism, d: int, metric: Metric) -> list[ParameterCheck]:
        return [
            check_claim_epsilon(
                self.claim(mech), float(mech.params["epsilon"]), "radius Gamma(d, 1/epsilon)"
            )
        ]

    def evidence(self, mech: Mechanism, draws: Draws) -> Evidence:
        claim_eps, d = self.claimed_epsilon(mech), draws.d
        metric = self.metric(mech, d)
        raw = raw_twin(mech)
        X, Y = draws.release(raw)
        Z = Y - raw.prepare_inputs(X)
        fit = RadiusFit.of(metric.whiten(Z), draws.a, draws.rng)
        estimates = (
            Estimate("epsilon (radius scale, shape d)", fit.epsilon, fit.low, fit.high, claim_eps),
            Estimate("radius Gamma shape", fit.shape, fit.shape_low, fit.shape_high, float(d)),
            *self._extra_estimates(mech, Z, d),
        )
        findings, exceeded = fit.problems(claim_eps)
        return Evidence(
            claim_eps,
            " per unit",
            (fit.epsilon, fit.bound_low, fit.high),
            f"noise radius (Gamma shape {fit.shape:.4g}, consistent with d={d})",
            estimates,
            fit.tests,
            checks=self.checks(mech, d, metric),
            findings=findings,
            exceeded=exceeded,
        )

    def _extra_estimates(self, mech: Mechanism, Z: NDArray[Any], d: int) -> tuple[Estimate, ...]:
        return ()

    def score_law(self, mech: Mechanism, pair: Pair, d: int) -> ScoreLaw | None:
        if d < 2:
            return None
        eps = self.claimed_epsilon(mech)
        r, lr = gamma_radius_grid(d, eps, 1500)
        c, lc = sphere_cos_grid(d, 1500)
        lw = (lr[:, None] + lc[None, :]).ravel()
        R, C = r[:, None], c[None, :]
        identity = pair.metric is None or pair.metric.identity
        if mech.renormalize and pair.antipodal and identity and pair.distance == 2.0:
            # x0 = -e, x1 = +e unit; the release is y/|y|; score = f(<y/|y|, e>), f increasing
            with np.errstate(invalid="ignore", divide="ignore"):
                s0 = (R * C - 1.0) / np.sqrt(1.0 - 2.0 * R * C + R * R)
                s1 = (R * C + 1.0) / np.sqrt(1.0 + 2.0 * R * C + R * R)
            return ScoreLaw(s0.ravel(), lw, s1.ravel(), lw, exact=True)
        D = pair.distance  # whitened distance (metric units)
        s0 = R - np.sqrt(np.maximum(R * R - 2.0 * R * D * C + D * D, 0.0))
        s1 = np.sqrt(np.maximum(R * R + 2.0 * R * D * C + D * D, 0.0)) - R
        return ScoreLaw(s0.ravel(), lw, s1.ravel(), lw, exact=not mech.renormalize)


class MahalanobisFamily(LaplaceFamily):
    """Mahalanobis noise (``mahalanobis``): whitened by the *claimed* Sigma it is l2 Laplace.

    Sigma is rebuilt from the constructor's mask or covariance, ``mask_delta`` and
    ``smoothing`` (:func:`mahalanobis_metric`), diagonal or full, and compared with the
    mechanism's ``covariance_diagonal`` and ``eigenvalue_range``.
    """

    name = "mahalanobis"

    def metric(self, mech: Mechanism, d: int) -> Metric:
        try:
            return mahalanobis_metric(mech.params, d)
        except ValueError as exc:
            raise DataError(str(exc)) from None

    def checks(self, mech: Mechanism, d: int, metric: Metric) -> list[ParameterCheck]:
        out = super().checks(mech, d, metric)
        used = mech.covariance_diagonal  # type: ignore[attr-defined]
        diag = metric.diagonal
        if used is None:
            dev = float(np.max(np.abs(diag - 1.0)))
            shown = "none (Sigma = I)"
        else:
            u = np.asarray(used, dtype=np.float64).ravel()
            dev = float(np.max(np.abs(u - diag) / diag)) if u.shape == diag.shape else math.inf
            shown = f"max relative deviation {dev:.3g}"
        out.append(
            ParameterCheck(
                "covariance diagonal",
                None,
                None,
                dev,
                1e-9,
                f"covariance diagonal: the mechanism's covariance_diagonal against Sigma rebuilt "
                f"from its mask/covariance, mask_delta and smoothing: {shown}",
            )
        )
        lmin, lmax = mech.eigenvalue_range  # type: ignore[attr-defined]
        vals = metric.values
        dev = max(relative(float(lmin), float(vals.min())), relative(float(lmax), vals.max()))
        out.append(
            ParameterCheck(
                "eigenvalue range",
                None,
                None,
                dev,
                1e-9,
                f"eigenvalue range: the mechanism's ({lmin:.8g}, {lmax:.8g}), Sigma's "
                f"({vals.min():.8g}, {vals.max():.8g})",
            )
        )
        return out

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        metric = self.metric(mech, d)
        j = int(np.argmax(metric.values))
        lam = float(metric.values[j])
        l2 = 2.0 if distance is None else check_real("distance", distance, gt=0) * math.sqrt(lam)
        if l2 > 2.0 + 1e-12 and mech.input_norm in ("normalize", "clip"):
            raise ValueError(
                f"unit vectors along the largest-variance axis are at most {2 / math.sqrt(lam):.6g} "
                f"apart in the Mahalanobis metric; got distance={distance!r}."
            )
        if d == 1:
            return Pair(
                np.array([-1.0]),
                np.array([1.0]),
                2.0 / math.sqrt(lam),
                "x0 = -1, x1 = +1",
                True,
                metric,
            )
        v = metric.axis(j)
        i = int(np.argmin(metric.values))
        u = metric.axis(i if i != j else (j + 1) % d)
        x0, x1 = sphere_pair(u, v, min(l2, 2.0))
        dist = min(l2, 2.0) / math.sqrt(lam)
        where = f"axis {j}" if metric.vectors is None else "eigenvector"
        return Pair(
            x0,
            x1,
            dist,
            f"unit vectors at l2 distance {min(l2, 2.0):g} along the largest-variance "
            f"{where} (Sigma = {lam:.4g} there): Mahalanobis distance {dist:.6g}",
            l2 >= 2.0,
            metric,
        )

    def _extra_estimates(self, mech: Mechanism, Z: NDArray[Any], d: int) -> tuple[Estimate, ...]:
        eps = self.claimed_epsilon(mech)
        # E|Z|^2 = E[r^2] tr(Sigma)/d = (d + 1) tr(Sigma) / eps^2: the trace Sigma was scaled to
        trace = float(np.einsum("ij,ij->", Z, Z)) / Z.shape[0] * eps**2 / (d + 1)
        return (Estimate("trace of Sigma implied by the noise", trace, claimed=float(d)),)

    def score_law(self, mech: Mechanism, pair: Pair, d: int) -> ScoreLaw | None:
        law = super().score_law(mech, pair, d)
        if law is not None and mech.renormalize:
            law.exact = False
        return law


#: the angle table may differ from the reference law by this much in CDF: its documented
#: density error (below 1e-5 nats, so a CDF error below expm1(1e-5)), plus the reference's
