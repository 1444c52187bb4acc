"""The Purkayastha family (``purkayastha``): the angle law e^(-eps theta) sin^(d-2) theta.

The sampler's angle table is held to the law integrated here (:class:`~._laws.AngleLaw`), its
range to the pure claim (a truncated table makes the claim approximate), and the angles drawn
through the audited path are fitted by :class:`~._whitebox.AngleFit`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from ..core._validation import check_real
from ..mechanisms.base import Mechanism
from ._bounds import ScoreLaw
from ._family import Family, Pair, angle_pair
from ._laws import AngleLaw
from ._results import Estimate, ParameterCheck
from ._whitebox import (
    AngleFit,
    Draws,
    Evidence,
    angles_to,
    check_claim_epsilon,
)

__all__ = ["ANGLE_TABLE_TOLERANCE", "PurkayasthaFamily"]


ANGLE_TABLE_TOLERANCE = 2e-5


class PurkayasthaFamily(Family):
    """Purkayastha mechanism (``purkayastha``): angle law e^(-eps theta) sin^(d-2) theta."""

    name = "purkayastha angle"
    has_statistic = True

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        phi = math.pi if distance is None else check_real("distance", distance, gt=0, le=math.pi)
        return angle_pair(d, phi, rng)

    def statistic(self, mech: Mechanism, pair: Pair, Y: NDArray[Any]) -> NDArray[Any]:
        return angles_to(Y, pair.x0) - angles_to(Y, pair.x1)

    def checks(self, mech: Mechanism, d: int) -> list[ParameterCheck]:
        """The sampler's angle table against the law integrated here, and the claim."""
        eps = float(mech.params["epsilon"])
        law = AngleLaw(eps, d)
        table = mech.angle_table(d)  # type: ignore[attr-defined]
        dev = float(np.max(np.abs(table.cdf_at(law.theta) - law.cdf_grid)))
        return [
            ParameterCheck(
                "angle table",
                None,
                None,
                dev,
                ANGLE_TABLE_TOLERANCE,
                f"angle table: the sampler's CDF differs from e^(-{eps:g} theta) sin^{d - 2} "
                f"theta integrated here by up to {dev:.3g}",
            ),
            check_claim_epsilon(self.claim(mech), eps, "angle law e^(-eps theta)"),
        ]

    def evidence(self, mech: Mechanism, draws: Draws) -> Evidence:
        claim_eps, d = self.claim(mech).epsilon, draws.d
        X, Y = draws.release(mech)
        fit = AngleFit.of(Y, X, d, draws.a, draws.rng)
        trunc = self.truncation_delta(mech, d)
        estimates = (
            Estimate("epsilon (angle law MLE)", fit.epsilon, fit.low, fit.high, claim_eps),
            Estimate("delta of the pure claim from the sampler's angle range", trunc, claimed=0.0),
        )
        findings = []
        if trunc > self.truncation_tolerance:
            lo, hi = self._range(mech, d)
            findings.append(
                f"the sampler's angle table covers [{lo:.4g}, {hi:.6g}] rad only: for antipodal "
                f"inputs, outputs that x0 can never produce have probability {trunc:.3g} under "
                f"x1, so the pure {math.pi * claim_eps:.4g}-LDP claim holds only with "
                f"delta={trunc:.3g}"
            )
        return Evidence(
            claim_eps,
            " per radian",
            (fit.epsilon, fit.low, fit.high),
            "the angle sample",
            estimates,
            fit.tests,
            checks=self.checks(mech, d),
            findings=findings,
            exceeded=fit.exceeded(claim_eps),
        )

    #: a truncated angle range is reported as a violation above this delta (the reference law's
    #: own rounding is ~1e-14)
    truncation_tolerance: ClassVar[float] = 1e-10

    @staticmethod
    def _range(mech: Mechanism, d: int) -> tuple[float, float]:
        edges = mech.angle_table(d).edges  # type: ignore[attr-defined]
        return float(edges[0]), float(edges[-1])

    def truncation_delta(self, mech: Mechanism, d: int) -> float:
        """Probability, under x1 = -x0, of outputs the sampler cannot produce from x0.

        The sampler draws angles from a table on [lo, hi] (mass outside it is dropped). An
        output at angle theta from x1 is at pi - theta from x0, so x1's outputs with theta in
        [lo, pi - hi) or (pi - lo, hi] have density 0 under x0: for the antipodal pair the
        release is (pi eps, delta) with at least this delta, not pure. Computed with the
        reference law (:class:`AngleLaw`), from the table's public range.
        """
        lo, hi = self._range(mech, d)
        law = AngleLaw(self.claim(mech).epsilon, d, m=2001)
        return law.mass(lo, math.pi - hi) + law.mass(math.pi - lo, hi)

    def score_law(self, mech: Mechanism, pair: Pair, d: int) -> ScoreLaw | None:
        if not pair.antipodal:
            return None
        law = AngleLaw(self.claim(mech).epsilon, d)
        t = law.theta
        return ScoreLaw(2 * t - math.pi, law.log_weights, math.pi - 2 * t, law.log_weights)
