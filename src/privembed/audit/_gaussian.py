"""Gaussian noise families: isotropic Gaussian noise on unit vectors (``gaussian``,
``empirical``) and a JL projection followed by Gaussian noise (``projection``).

The sensitivity comes from the relation and sigma from the calibration rule applied to the
constructor's parameters (``dp_accounting`` for the analytic one), never from the attributes
under check; the noise is fitted by :class:`~._whitebox.GaussianFit`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core import theory
from ..core._validation import DataError, check_real
from ..core.accounting import Neighbouring
from ..mechanisms.base import Mechanism
from ._bounds import ScoreLaw
from ._family import Claim, Family, Pair, l2_pair
from ._laws import gaussian_normalised_law
from ._principles import (
    SIGMA_ATOL,
    UNIT_DIAMETER,
    calibrated_sigma,
    gaussian_sigma,
    projection_matrix,
)
from ._results import Estimate, ParameterCheck
from ._whitebox import (
    Draws,
    Evidence,
    GaussianFit,
    check_value,
    raw_twin,
)

__all__ = ["GaussianFamily", "ProjectionFamily"]


class GaussianFamily(Family):
    """Isotropic Gaussian noise on unit vectors (``gaussian``, ``empirical``).

    The sensitivity comes from the relation (record level: 2, the unit ball's diameter; a
    bounded relation: the ``sensitivity`` parameter) and sigma from the calibration rule applied
    to the parameters (``dp_accounting`` for the analytic one), never from the attributes.
    """

    name = "gaussian"
    has_statistic = True

    def _param_sensitivity(self, mech: Mechanism) -> float:
        """The constructor's ``sensitivity`` (``empirical`` has none: unit vectors, 2)."""
        return float(mech.params.get("sensitivity", UNIT_DIAMETER))

    def sensitivity(self, mech: Mechanism, d: int) -> float:
        """The l2 distance the claimed relation allows: at most the unit ball's diameter."""
        return min(self._param_sensitivity(mech), UNIT_DIAMETER)

    def used_sensitivity(self, mech: Mechanism, d: int) -> float:
        """What the mechanism calibrates with (its ``sensitivity`` attribute)."""
        return float(mech.sensitivity)  # type: ignore[attr-defined]

    def relation(self, mech: Mechanism) -> str:
        return (
            Neighbouring.RECORD.value
            if self._param_sensitivity(mech) >= UNIT_DIAMETER
            else Neighbouring.BOUNDED.value
        )

    def sigma(self, mech: Mechanism, d: int) -> float:
        """The sigma the parameters give (the calibration rule recomputed here)."""
        p = mech.params
        if "sigma" in p:  # empirical noise: sigma is the parameter
            return float(p["sigma"])
        return calibrated_sigma(
            str(p.get("calibration", "analytic")),
            float(p["epsilon"]),
            float(p["delta"]),
            self._param_sensitivity(mech),
        )

    def used_sigma(self, mech: Mechanism, d: int) -> float:
        return float(mech.sigma)  # type: ignore[attr-defined]

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        sens = self.sensitivity(mech, d)
        l2 = sens if distance is None else check_real("distance", distance, gt=0, le=sens)
        p = l2_pair(d, l2, rng)
        return Pair(
            p.x0, p.x1, l2, p.description + f"; relation: l2 sensitivity {sens:g}", p.antipodal
        )

    def centres(self, mech: Mechanism, pair: Pair) -> tuple[NDArray[Any], NDArray[Any]]:
        return super().centres(mech, pair)

    def statistic(self, mech: Mechanism, pair: Pair, Y: NDArray[Any]) -> NDArray[Any]:
        m0, m1 = self.centres(mech, pair)
        return np.asarray(Y @ (m1 - m0), dtype=np.float64)

    def noise_free(self, mech: Mechanism, X: NDArray[Any], d: int) -> NDArray[Any]:
        return mech.prepare_inputs(X)

    def checks(self, mech: Mechanism, d: int, claim: Claim) -> list[ParameterCheck]:
        """Sensitivity, sigma, relation, the claim and its noise multiplier, recomputed."""
        sens, used_sens = self.sensitivity(mech, d), self.used_sensitivity(mech, d)
        sigma, used_sigma = self.sigma(mech, d), self.used_sigma(mech, d)
        out = [
            self._check_sensitivity(mech, d, sens, used_sens),
            ParameterCheck(
                "sigma",
                sigma,
                used_sigma,
                abs(used_sigma - sigma),
                SIGMA_ATOL + 1e-9 * sigma,
                f"sigma: the mechanism uses {used_sigma:.10g}, its parameters give {sigma:.10g} "
                "(calibration recomputed with dp_accounting / the classic formula)",
            ),
        ]
        rel = self.relation(mech)
        out.append(
            ParameterCheck(
                "relation",
                rel,
                claim.relation,
                float(rel != claim.relation),
                0.0,
                f"relation: the claim says {claim.relation}, the sensitivity gives {rel}",
            )
        )
        # the claim must not need more noise than the parameters give (dp_accounting)
        need = gaussian_sigma(claim.epsilon, claim.delta, sens)
        out.append(
            ParameterCheck(
                "claim",
                need,
                sigma,
                max(0.0, need - sigma),
                SIGMA_ATOL + 1e-9 * need,
                f"claim: ({claim.epsilon:.6g}, {claim.delta:.3g}) at sensitivity {sens:.6g} needs "
                f"sigma >= {need:.8g}; the parameters give {sigma:.8g}",
            )
        )
        if claim.noise_multiplier is not None:
            nm_true = used_sigma / sens
            out.append(
                ParameterCheck(
                    "noise multiplier of the guarantee",
                    nm_true,
                    claim.noise_multiplier,
                    max(0.0, (claim.noise_multiplier - nm_true) / nm_true),
                    1e-6,
                    f"noise multiplier of the guarantee: {claim.noise_multiplier:.8g} "
                    f"(what the ledger composes), but sigma / sensitivity is {nm_true:.8g}",
                )
            )
        return out

    def _check_sensitivity(
        self, mech: Mechanism, d: int, sens: float, used: float
    ) -> ParameterCheck:
        param = self._param_sensitivity(mech)
        return check_value(
            "sensitivity", param, used, 1e-12, f"the relation's l2 distance is {sens:g}"
        )

    def evidence(self, mech: Mechanism, draws: Draws) -> Evidence:
        claim, d = self.claim(mech), draws.d
        raw = raw_twin(mech)
        X, Y = draws.release(raw)
        fit = GaussianFit.of(Y - self.noise_free(raw, X, d), draws.a)
        sens = self.sensitivity(mech, d)
        need = gaussian_sigma(claim.epsilon, claim.delta, sens)
        eps_hat, eps_low, eps_high, delta_at = fit.privacy(claim, sens)
        estimates = [
            Estimate("sigma", fit.sigma, fit.low, fit.high, self.sigma(mech, d)),
            Estimate("sensitivity (relation)", sens),
            Estimate("sigma the claim needs (dp_accounting)", need),
            Estimate(
                "delta at the claimed epsilon",
                theory.analytic_gaussian_delta(fit.sigma, claim.epsilon, sens),
                delta_at,
                theory.analytic_gaussian_delta(fit.low, claim.epsilon, sens),
                claim.delta,
            ),
        ]
        exceeded = None
        if fit.high < need - SIGMA_ATOL:
            exceeded = (
                f"estimated sigma {fit.sigma:.5g} (<= {fit.high:.5g} at level {draws.level:g}) is "
                f"below the {need:.5g} that ({claim.epsilon:g}, {claim.delta:.3g}) needs at "
                f"sensitivity {sens:g}: it gives delta={delta_at:.3g} at the claimed epsilon="
                f"{claim.epsilon:g}; at delta={claim.delta:.3g} epsilon >= {eps_low:.4g}"
            )
        what = f"estimated sigma {fit.sigma:.5g} [{fit.low:.5g}, {fit.high:.5g}]"
        return Evidence(
            claim.epsilon,
            f" at delta={claim.delta:.3g}",
            (eps_hat, eps_low, eps_high),
            what,
            estimates,
            fit.tests,
            checks=self.checks(mech, d, claim),
            exceeded=exceeded,
            delta_at_claim=delta_at,
        )

    def score_law(self, mech: Mechanism, pair: Pair, d: int) -> ScoreLaw | None:
        m0, m1 = self.centres(mech, pair)
        sigma = self.sigma(mech, d)
        dist = float(np.linalg.norm(m1 - m0))
        antipodal = bool(np.allclose(m0, -m1, rtol=0, atol=1e-12))
        if mech.renormalize and antipodal:
            return gaussian_normalised_law(sigma, float(np.linalg.norm(m1)), m1.size)
        g = np.linspace(-45.0, 45.0, 40_001)
        lw = -(g**2) / 2.0
        h = dist / 2.0
        return ScoreLaw(-h + sigma * g, lw, h + sigma * g, lw, exact=not mech.renormalize)


class ProjectionFamily(GaussianFamily):
    """JL projection then Gaussian noise (``projection``); the relation is record or attribute.

    ``P`` is rebuilt from the public parameters and its sensitivity computed here (an SVD for
    ``||P||_2``), not read from the mechanism's projection object.
    """

    name = "projection"

    def _matrix(self, mech: Mechanism, d: int) -> NDArray[Any]:
        return projection_matrix(mech.params, d)

    def _record(self, mech: Mechanism) -> bool:
        return str(mech.params.get("neighbouring", "record")) == "record"

    def sensitivity(self, mech: Mechanism, d: int) -> float:
        """From the public matrix rebuilt here: 2 ||P||_2 (record) or the longest column."""
        P = self._matrix(mech, d)
        if self._record(mech):
            return UNIT_DIAMETER * float(np.linalg.svd(P, compute_uv=False)[0])
        return float(np.sqrt(np.max(np.einsum("ij,ij->j", P, P))))

    def used_sensitivity(self, mech: Mechanism, d: int) -> float:
        return float(mech.sensitivity(d))  # type: ignore[attr-defined]

    def relation(self, mech: Mechanism) -> str:
        return (Neighbouring.RECORD if self._record(mech) else Neighbouring.ATTRIBUTE).value

    def sigma(self, mech: Mechanism, d: int) -> float:
        p = mech.params
        return calibrated_sigma(
            str(p.get("calibration", "analytic")),
            float(p["epsilon"]),
            float(p["delta"]),
            self.sensitivity(mech, d),
        )

    def used_sigma(self, mech: Mechanism, d: int) -> float:
        return float(mech.sigma_for(d))  # type: ignore[attr-defined]

    def _check_sensitivity(
        self, mech: Mechanism, d: int, sens: float, used: float
    ) -> ParameterCheck:
        how = "2 ||P||_2 by SVD" if self._record(mech) else "max_j ||P e_j||_2"
        return check_value("sensitivity", sens, used, 1e-9, how + " of P rebuilt from its seed")

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        if distance is not None:
            raise ValueError(
                "the projection's pair is fixed by its relation (record or attribute); "
                f"distance must be None, got distance={distance!r}."
            )
        P = self._matrix(mech, d)
        if self._record(mech):
            v = np.linalg.svd(P, full_matrices=False)[2][0]
            return Pair(
                -v,
                v,
                2.0,
                "antipodal unit vectors along P's top right singular vector "
                "(record level: |P(x1 - x0)| = 2 ||P||_2)",
                True,
            )
        if d < 2:
            raise DataError(f"the attribute-level pair needs dimension >= 2, got {d}.")
        j = int(np.argmax(np.einsum("ij,ij->j", P, P)))
        i = (j + 1) % d
        x0 = np.zeros(d)
        x0[i], x0[j] = math.sqrt(3.0) / 2.0, 0.5
        x1 = x0.copy()
        x1[j] = -0.5
        return Pair(
            x0,
            x1,
            1.0,
            f"unit vectors differing by 1 in coordinate {j}, P's longest column (attribute level)",
            False,
        )

    def centres(self, mech: Mechanism, pair: Pair) -> tuple[NDArray[Any], NDArray[Any]]:
        X = np.stack([pair.x0, pair.x1])
        M = self.noise_free(mech, X, X.shape[1])
        return M[0], M[1]

    def noise_free(self, mech: Mechanism, X: NDArray[Any], d: int) -> NDArray[Any]:
        return np.asarray(mech.prepare_inputs(X) @ self._matrix(mech, d).T, dtype=np.float64)
