"""The audit's view of a mechanism family: the claim under audit, the neighbouring pair, and the
base class every family auditor extends (:class:`Family`, also the generic black-box auditor).

A family auditor is selected by the mechanism's registry ``name`` (:mod:`._families`), so a
subclass with a planted bug is audited as the family it claims to be. It supplies:

* the worst-case neighbouring pair of the claim (antipodal unit vectors for LDP on the sphere,
  the relation's sensitivity for Gaussian noise, the attribute relation of a projection, a
  chosen distance for metric privacy);
* the likelihood-ratio statistic of the *claimed* law (the most powerful test if the claim is
  exactly right);
* the white-box check: what the mechanism uses (sensitivity, sigma, Sigma, angle table, the
  claim) against the same recomputed from its constructor parameters (:mod:`._principles`),
  the law's parameters estimated from noise samples drawn through the audited path
  (:class:`~._paths.NoisePath`; the fits are in :mod:`._whitebox`), goodness-of-fit tests, and
  the privacy those estimates imply;
* the exact law of the statistic for a correct mechanism (power: the N an audit needs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_real
from ..core.accounting import ApproxDP, MetricDP, PureDP
from ..mechanisms.base import Mechanism
from ._bounds import ScoreLaw
from ._paths import NoisePath
from ._principles import Metric
from ._results import WhiteBoxResult
from ._whitebox import Draws, Evidence, conclude

__all__ = ["Claim", "Family", "Pair", "angle_pair", "l2_pair", "sphere_pair"]


# ---- records ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    """The claim under audit, read from the mechanism's guarantee record."""

    kind: str
    epsilon: float
    delta: float
    metric: str | None
    text: str
    relation: str | None = None
    noise_multiplier: float | None = None

    @classmethod
    def of(cls, mech: Mechanism) -> Claim:
        g = mech.guarantee
        if isinstance(g, ApproxDP):
            return cls(
                g.kind,
                float(g.epsilon),
                float(g.delta),
                None,
                g.describe(),
                str(g.relation.value),
                None if g.noise_multiplier is None else float(g.noise_multiplier),
            )
        if isinstance(g, PureDP):
            return cls(g.kind, float(g.epsilon), 0.0, None, g.describe(), str(g.relation.value))
        if isinstance(g, MetricDP):
            return cls(g.kind, float(g.epsilon), 0.0, str(g.metric), g.describe())
        raise ValueError(
            f"{mech!r} makes no formal guarantee ({g.describe()}); there is nothing to audit."
        )


@dataclass(frozen=True)
class Pair:
    """Neighbouring inputs (before the mechanism's ``input_norm``) and their distance.

    ``metric``: for Mahalanobis claims, Sigma as rebuilt from the parameters (the statistic and
    the score law whiten with it).
    """

    x0: NDArray[np.float64]
    x1: NDArray[np.float64]
    distance: float
    description: str
    antipodal: bool
    metric: Metric | None = None


# ---- the base family ------------------------------------------------------------------------
class Family:
    """Generic family: a pair from the claim, a black-box classifier only, no white-box check."""

    name: ClassVar[str] = "generic"
    has_statistic: ClassVar[bool] = False

    def claim(self, mech: Mechanism) -> Claim:
        return Claim.of(mech)

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        claim = self.claim(mech)
        angular = claim.metric is not None and claim.metric.startswith("angular")
        if claim.metric is not None and not (angular or claim.metric.startswith("l2")):
            if distance is None:
                raise ValueError(
                    f"no default pair for the metric {claim.metric!r}; pass distance=... "
                    "(l2 distance between two unit vectors)."
                )
        if angular:
            phi = (
                math.pi if distance is None else check_real("distance", distance, gt=0, le=math.pi)
            )
            return angle_pair(d, phi, rng)
        l2 = 2.0 if distance is None else check_real("distance", distance, gt=0, le=2)
        return l2_pair(d, l2, rng)

    def centres(self, mech: Mechanism, pair: Pair) -> tuple[NDArray[Any], NDArray[Any]]:
        """Noise-free images of the pair in the output space (for classifier features)."""
        P = mech.prepare_inputs(np.stack([pair.x0, pair.x1]))
        return P[0], P[1]

    def statistic(self, mech: Mechanism, pair: Pair, Y: NDArray[Any]) -> NDArray[Any]:
        raise ValueError(
            f"no likelihood-ratio statistic is known for mechanism {mech.name!r}; use a classifier "
            "score (score='logistic' or 'mlp')."
        )

    def whitebox(
        self,
        mech: Mechanism,
        d: int,
        n: int,
        rng: np.random.Generator,
        level: float,
        *,
        path: NoisePath,
        resolution: float,
    ) -> WhiteBoxResult | None:
        """The white-box check (None: the family has none): :meth:`evidence` from ``n`` noise
        draws in dimension ``d`` through ``path``, concluded at ``resolution``."""
        draws = Draws(d, n, rng, level, path)
        ev = self.evidence(mech, draws)
        return None if ev is None else conclude(self.name, ev, draws, resolution)

    def evidence(self, mech: Mechanism, draws: Draws) -> Evidence | None:
        """What the white box finds: parameter checks, the noise law fitted, its epsilon."""
        return None

    def score_law(self, mech: Mechanism, pair: Pair, d: int) -> ScoreLaw | None:
        return None


def l2_pair(d: int, l2: float, rng: np.random.Generator) -> Pair:
    if d == 1:
        if l2 != 2.0:
            raise ValueError(
                f"in dimension 1 unit vectors are +-1 (distance 2), got distance={l2!r}."
            )
        return Pair(np.array([-1.0]), np.array([1.0]), 2.0, "x0 = -1, x1 = +1", True)
    u, v = _orthonormal(rng, d)
    x0, x1 = sphere_pair(u, v, l2)
    what = "antipodal unit vectors" if l2 == 2.0 else "unit vectors"
    return Pair(x0, x1, l2, f"{what} at l2 distance {l2:g} (random directions)", l2 == 2.0)


def angle_pair(d: int, phi: float, rng: np.random.Generator) -> Pair:
    if d < 2:
        raise DataError(f"an angular pair needs dimension >= 2, got {d}.")
    u, v = _orthonormal(rng, d)
    x0 = math.cos(phi / 2) * u - math.sin(phi / 2) * v
    x1 = math.cos(phi / 2) * u + math.sin(phi / 2) * v
    what = "antipodal unit vectors" if phi == math.pi else "unit vectors"
    return Pair(x0, x1, phi, f"{what} at angle {phi:.6g} rad (random directions)", phi == math.pi)


def _orthonormal(rng: np.random.Generator, d: int) -> tuple[NDArray[Any], NDArray[Any]]:
    q, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    return q[:, 0].copy(), q[:, 1].copy()


def sphere_pair(u: NDArray[Any], v: NDArray[Any], l2: float) -> tuple[NDArray[Any], NDArray[Any]]:
    """Unit vectors ``a u -+ (l2/2) v`` at l2 distance ``l2`` (antipodal for 2)."""
    half = l2 / 2.0
    a = math.sqrt(max(0.0, 1.0 - half * half))
    return a * u - half * v, a * u + half * v
