"""The subspace family (``subspace``): noise in k dimensions on P(x - mean).

The white box reads the mechanism's own matrix (a contraction?) and fits the k-dimensional noise
with the fit of its law in :mod:`._whitebox`: Laplace, Gaussian or Purkayastha.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_real
from ..mechanisms.base import Mechanism
from ._family import Family, Pair, sphere_pair
from ._results import Estimate
from ._whitebox import (
    AngleFit,
    Draws,
    Evidence,
    GaussianFit,
    RadiusFit,
    angles_to,
    norms,
    raw_twin,
)

__all__ = ["SubspaceFamily"]


class SubspaceFamily(Family):
    """A private subspace (``subspace``): noise in k dimensions on P(x - mean).

    The claim is stated in the *input* metric, so the worst pair sits inside the basis' span:
    antipodal unit vectors along its first row, whose projections are exactly as far apart as
    the inputs (equality in the contraction). The white-box check reads the mechanism's own
    matrix (is it a contraction: largest singular value <= 1, rows orthonormal) and then the
    k-dimensional noise law around the noise-free projection: the radius Gamma(k, 1/eps) and a
    uniform direction (Laplace), sigma (Gaussian, sensitivity 2 ||P||_2), or the angle law in k
    dimensions around the centred projection's direction (Purkayastha).
    """

    name = "subspace"
    has_statistic = True
    #: ||P||_2 above 1 by more than this is a violation (the rows are checked to 1e-6)
    contraction_tolerance: ClassVar[float] = 1e-9

    @staticmethod
    def _noise(mech: Mechanism) -> str:
        return str(mech.noise)  # type: ignore[attr-defined]

    @staticmethod
    def _matrix(mech: Mechanism) -> NDArray[np.float64]:
        return np.asarray(mech.basis, dtype=np.float64)  # type: ignore[attr-defined]

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        P = self._matrix(mech)
        if d != P.shape[1]:
            raise DataError(f"the subspace basis is for dimension {P.shape[1]}, got dim={d}.")
        v = P[0] / np.linalg.norm(P[0])
        if self._noise(mech) == "purkayastha":
            if distance is not None:
                raise ValueError(
                    "the subspace Purkayastha pair is fixed (antipodal inputs along the first "
                    f"component); distance must be None, got distance={distance!r}."
                )
            u0, u1 = self._directions(mech, -v, v)
            phi = float(angles_to(u1[None, :], u0)[0])
            return Pair(
                -v,
                v,
                phi,
                f"antipodal unit vectors along the first basis component: centred projections "
                f"at angle {phi:.6g} rad",
                False,
            )
        top = 2.0
        l2 = top if distance is None else check_real("distance", distance, gt=0, le=top)
        w = rng.standard_normal(d)
        w -= (w @ v) * v
        u = w / np.linalg.norm(w)
        x0, x1 = sphere_pair(u, v, l2)
        return Pair(
            x0,
            x1,
            l2,
            f"unit vectors at l2 distance {l2:g} differing along the first basis component "
            "(|P(x1 - x0)| = |x1 - x0|: the contraction is tight)",
            l2 == 2.0,
        )

    def _directions(
        self, mech: Mechanism, x0: NDArray[Any], x1: NDArray[Any]
    ) -> tuple[NDArray[Any], NDArray[Any]]:
        M = np.asarray(mech.public_transform(np.stack([x0, x1])), dtype=np.float64)
        return M[0] / np.linalg.norm(M[0]), M[1] / np.linalg.norm(M[1])

    def centres(self, mech: Mechanism, pair: Pair) -> tuple[NDArray[Any], NDArray[Any]]:
        if self._noise(mech) == "purkayastha":
            return self._directions(mech, pair.x0, pair.x1)
        M = np.asarray(mech.public_transform(np.stack([pair.x0, pair.x1])), dtype=np.float64)
        return M[0], M[1]

    def statistic(self, mech: Mechanism, pair: Pair, Y: NDArray[Any]) -> NDArray[Any]:
        m0, m1 = self.centres(mech, pair)
        noise = self._noise(mech)
        if noise == "laplace":
            return norms(Y - m0) - norms(Y - m1)
        if noise == "gaussian":
            return np.asarray(Y @ (m1 - m0), dtype=np.float64)
        return angles_to(Y, m0) - angles_to(Y, m1)

    def evidence(self, mech: Mechanism, draws: Draws) -> Evidence:
        claim = self.claim(mech)
        P = self._matrix(mech)
        k = P.shape[0]
        s_max = float(np.linalg.norm(P, 2))
        ortho = float(np.max(np.abs(P @ P.T - np.eye(k))))
        a, rng = draws.a, draws.rng
        X, Y = draws.release(raw_twin(mech))
        V = np.asarray(mech.public_transform(X), dtype=np.float64)
        estimates = [
            Estimate("largest singular value of P (a contraction: <= 1)", s_max, claimed=1.0),
            Estimate("max |P P^T - I| (orthonormal rows)", ortho, claimed=0.0),
        ]
        findings = []
        if s_max > 1.0 + self.contraction_tolerance:
            findings.append(
                f"P is not a contraction: ||P||_2 = {s_max:.9g} > 1, so the noise's guarantee "
                f"holds only per unit of {s_max:.6g} x the input distance"
            )
        delta_at: float | None = None
        noise = self._noise(mech)
        if noise == "laplace":
            radius = RadiusFit.of(Y - V, a, rng)
            estimates += [
                Estimate("epsilon (radius scale, shape k)", radius.epsilon, radius.low,
                         radius.high, claim.epsilon),
                Estimate("radius Gamma shape", radius.shape, radius.shape_low, radius.shape_high,
                         float(k)),
            ]  # fmt: skip
            more, exceeded = radius.problems(claim.epsilon, "k")
            findings += more
            tests, unit = radius.tests, " per unit of input l2"
            eps_hat, eps_lo, eps_hi = radius.epsilon, radius.bound_low, radius.high
        elif noise == "gaussian":
            gauss = GaussianFit.of(Y - V, a)
            eps_hat, eps_lo, eps_hi, delta_at = gauss.privacy(claim, 2.0 * s_max)
            estimates += [
                Estimate("sigma", gauss.sigma, gauss.low, gauss.high),
                Estimate("sensitivity 2 ||P||_2", 2.0 * s_max, claimed=2.0),
                Estimate("delta at the claimed epsilon", delta_at, claimed=claim.delta),
            ]
            exceeded = None
            if delta_at > claim.delta * (1.0 + 1e-9):
                exceeded = (
                    f"estimated sigma {gauss.sigma:.5g} (<= {gauss.high:.5g}) gives "
                    f"delta={delta_at:.3g} at the claimed epsilon={claim.epsilon:g} (claimed "
                    f"delta={claim.delta:.3g})"
                )
            tests, unit = gauss.tests, f" at delta={claim.delta:.3g}"
        else:
            U = V / np.maximum(norms(V), 1e-300)[:, None]
            angle = AngleFit.of(Y, U, k, a, rng)
            estimates.append(
                Estimate("epsilon (angle law MLE)", angle.epsilon, angle.low, angle.high,
                         claim.epsilon)
            )  # fmt: skip
            exceeded = angle.exceeded(claim.epsilon)
            tests, unit = angle.tests, " per radian"
            eps_hat, eps_lo, eps_hi = angle.epsilon, angle.low, angle.high
        return Evidence(
            claim.epsilon,
            unit,
            (eps_hat, eps_lo, eps_hi),
            f"noise in k={k} dimensions",
            estimates,
            tests,
            findings=findings,
            exceeded=exceeded,
            delta_at_claim=delta_at,
        )
