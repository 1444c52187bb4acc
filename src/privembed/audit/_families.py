"""What the audit knows about each mechanism family.

One small class per family (selected by the mechanism's registry ``name``, so a subclass with a
planted bug is audited as the family it claims to be):

* the worst-case neighbouring pair of the claim (antipodal unit vectors for LDP on the sphere,
  the relation's sensitivity for Gaussian noise, the attribute relation of a projection, a
  chosen distance for metric privacy);
* the likelihood-ratio statistic of the *claimed* law (the most powerful test if the claim is
  exactly right);
* the white-box check: what the mechanism uses (sensitivity, sigma, Sigma, angle table, the
  claim) against the same recomputed from its constructor parameters (:mod:`._principles`),
  the law's parameters estimated from noise samples drawn through the audited path
  (:class:`~._paths.NoisePath`), goodness-of-fit tests, and the privacy those estimates imply;
* the exact law of the statistic for a correct mechanism (power: the N an audit needs).
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special, stats

from ..core import theory
from ..core._validation import DataError, check_real
from ..core.accounting import ApproxDP, MetricDP, Neighbouring, PureDP
from ..mechanisms.base import Mechanism
from ._bounds import ScoreLaw
from ._paths import NoisePath
from ._principles import (
    SIGMA_ATOL,
    UNIT_DIAMETER,
    Metric,
    calibrated_sigma,
    gaussian_sigma,
    mahalanobis_metric,
    projection_matrix,
)
from ._results import Estimate, LawTest, ParameterCheck, WhiteBoxResult

__all__ = [
    "AUDITORS",
    "Claim",
    "Family",
    "Pair",
    "auditor_for",
    "register_auditor",
]

#: goodness-of-fit tests use at most this many values (the KS statistic is exact at any n)
_KS_CAP = 1_000_000
#: grid resolution of the power calculations (nats below the mode that are represented)
_NATS = 80.0


# ---- small numerical helpers ----------------------------------------------------------------
def random_unit_rows(rng: np.random.Generator, n: int, d: int) -> NDArray[np.float64]:
    """``n`` independent uniform unit vectors in R^d."""
    X = rng.standard_normal((n, d))
    X /= np.sqrt(np.einsum("ij,ij->i", X, X))[:, None]
    return X


def _norms(A: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.sqrt(np.einsum("ij,ij->i", A, A))


def angles_to(Y: NDArray[np.float64], x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Angle between each row of ``Y`` and ``x`` (a unit vector, or unit rows aligned with Y).

    Uses atan2(|y - <y,x>x|, <y,x>), accurate also for tiny angles (arccos is not).
    """
    c = Y @ x if x.ndim == 1 else np.einsum("ij,ij->i", Y, x)
    xs = x[None, :] if x.ndim == 1 else x
    s = _norms(Y - c[:, None] * xs)
    return np.arctan2(s, c)


def _orthonormal(rng: np.random.Generator, d: int) -> tuple[NDArray[Any], NDArray[Any]]:
    q, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    return q[:, 0].copy(), q[:, 1].copy()


def _sphere_pair(u: NDArray[Any], v: NDArray[Any], l2: float) -> tuple[NDArray[Any], NDArray[Any]]:
    """Unit vectors ``a u -+ (l2/2) v`` at l2 distance ``l2`` (antipodal for 2)."""
    half = l2 / 2.0
    a = math.sqrt(max(0.0, 1.0 - half * half))
    return a * u - half * v, a * u + half * v


def raw_twin(mech: Mechanism) -> Mechanism:
    """A shallow copy that releases the noisy vector before renormalisation (same noise law).

    A copy rather than a rebuild from ``config``, so a subclass (or a planted bug) is kept.
    """
    twin = copy.copy(mech)
    twin.renormalize = False
    return twin


def _sphere_coordinate_test(name: str, c: NDArray[Any], m: int, threshold: float) -> LawTest:
    """A coordinate of a uniform unit vector in R^m: (c+1)/2 ~ Beta((m-1)/2, (m-1)/2)."""
    c = c[np.isfinite(c)][:_KS_CAP]
    if m == 1:  # the "sphere" is {-1, +1}
        k = int(np.sum(c > 0))
        res = stats.binomtest(k, c.size, 0.5)
        return LawTest(name, float(k / max(c.size, 1)), float(res.pvalue), threshold)
    a = (m - 1) / 2.0
    ks = stats.kstest((np.clip(c, -1.0, 1.0) + 1.0) / 2.0, stats.beta(a, a).cdf)
    return LawTest(name, float(ks.statistic), float(ks.pvalue), threshold)


def _log_grid(
    logdens: Any, mode: float, n: int, nats: float = _NATS
) -> tuple[NDArray[Any], NDArray[Any]]:
    """Uniform nodes on the interval where a concave log-density is within ``nats`` of its mode.

    Returns (nodes, log-weights) with the weights = density x spacing (unnormalised).
    """
    top = float(logdens(np.array([mode]))[0])

    def edge(step: float) -> float:
        a, b = mode, mode + step
        while float(logdens(np.array([b]))[0]) > top - nats:
            a, b = b, b + 2.0 * (b - a)
        for _ in range(100):
            m = 0.5 * (a + b)
            if float(logdens(np.array([m]))[0]) > top - nats:
                a = m
            else:
                b = m
        return b

    lo, hi = edge(-1e-3 - 1e-3 * abs(mode)), edge(1e-3 + 1e-3 * abs(mode))
    x = np.linspace(lo, hi, n)
    return x, logdens(x) + math.log((hi - lo) / (n - 1))


def _sphere_cos_grid(d: int, n: int) -> tuple[NDArray[Any], NDArray[Any]]:
    """Nodes of c = <u, e> for u uniform on S^{d-1} (d >= 2), via u = log tan(theta/2)."""
    m = d - 1  # density of theta is sin^(d-2); per du (dtheta/du = sin theta) it is sin^(d-1)
    bound = math.acosh(math.exp(min(_NATS / m, 700.0)))
    u = np.linspace(-bound, bound, n)
    logw = -m * np.log(np.cosh(u)) + math.log(2 * bound / (n - 1))
    return np.tanh(-u), logw  # cos(2 atan(e^u)) = -tanh(u)


def _gamma_radius_grid(d: int, eps: float, n: int) -> tuple[NDArray[Any], NDArray[Any]]:
    """Nodes of r ~ Gamma(d, 1/eps) on a log scale (density of log r: d log r - eps r)."""

    def logdens(L: NDArray[Any]) -> NDArray[Any]:
        return d * L - eps * np.exp(L)

    L, lw = _log_grid(logdens, math.log(d / eps), n)
    return np.exp(L), lw


def _chi_grid(m: int, n: int) -> tuple[NDArray[Any], NDArray[Any]]:
    """Nodes of R ~ chi_m (m >= 1) on a log scale."""

    def logdens(L: NDArray[Any]) -> NDArray[Any]:
        return m * L - np.exp(2.0 * L) / 2.0

    L, lw = _log_grid(logdens, 0.5 * math.log(m), n)
    return np.exp(L), lw


class AngleLaw:
    r"""The law :math:`f(\theta) \propto e^{-\varepsilon\theta}\sin^{d-2}\theta` on [0, pi].

    Computed here independently of the mechanism's sampler (trapezoid rule on a uniform grid
    over the interval where the log-density is within 80 nats of its maximum).
    """

    def __init__(self, epsilon: float, d: int, m: int = 200_001) -> None:
        self.epsilon, self.d = float(epsilon), int(d)
        self._norm: float | None = None
        lo, hi = self._support()
        self.theta = np.linspace(lo, hi, m)
        logf = self.log_density(self.theta)
        f = np.exp(logf - logf.max())
        h = (hi - lo) / (m - 1)
        cum = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) * (h / 2.0))])
        self.cdf_grid = cum / cum[-1]
        w = f * h
        w[0] /= 2.0
        w[-1] /= 2.0
        self.weights = w / w.sum()
        self.log_weights = np.log(np.maximum(self.weights, 1e-320))

    def log_density(self, t: NDArray[Any]) -> NDArray[Any]:
        if self.d == 2:
            return -self.epsilon * t
        with np.errstate(divide="ignore"):
            return -self.epsilon * t + (self.d - 2) * np.log(np.sin(t))

    def _support(self) -> tuple[float, float]:
        eps, d = self.epsilon, self.d
        if d == 2:
            return 0.0, min(math.pi, _NATS / eps)
        mode = math.atan2(d - 2, eps)
        top = float(self.log_density(np.array([mode]))[0])

        def solve(a: float, b: float) -> float:  # g(a) below the floor, g(b) above
            for _ in range(200):
                m = 0.5 * (a + b)
                if float(self.log_density(np.array([m]))[0]) > top - _NATS:
                    b = m
                else:
                    a = m
            return b

        lo = solve(0.0, mode)
        end = math.pi
        hi = end if float(self.log_density(np.array([end - 1e-12]))[0]) > top - _NATS else None
        if hi is None:
            a, b = end, mode  # search from pi towards the mode
            for _ in range(200):
                m = 0.5 * (a + b)
                if float(self.log_density(np.array([m]))[0]) > top - _NATS:
                    b = m
                else:
                    a = m
            hi = b
        return lo, hi

    def cdf(self, t: NDArray[Any]) -> NDArray[Any]:
        return np.interp(t, self.theta, self.cdf_grid, left=0.0, right=1.0)

    def mass(self, a: float, b: float) -> float:
        """P(a <= theta <= b) by adaptive quadrature (accurate also for tiny intervals)."""
        a, b = max(a, 0.0), min(b, math.pi)
        if not b > a:
            return 0.0
        top = float(np.max(self.log_density(self.theta)))

        def f(t: float) -> float:
            return math.exp(float(self.log_density(np.array([t]))[0]) - top)

        if self._norm is None:
            self._norm = self._quad(f, float(self.theta[0]), float(self.theta[-1]))
        return min(1.0, self._quad(f, a, b) / self._norm)

    @staticmethod
    def _quad(f: Any, a: float, b: float) -> float:
        from scipy import integrate

        pts = np.linspace(a, b, 9)
        return float(
            sum(
                integrate.quad(f, x, y, limit=200, epsabs=0.0)[0]
                for x, y in itertools.pairwise(pts)
            )
        )

    def moments(self) -> tuple[float, float]:
        mean = float(self.weights @ self.theta)
        var = float(self.weights @ (self.theta - mean) ** 2)
        return mean, var


def _purkayastha_mle(theta: NDArray[Any], d: int) -> tuple[float, float]:
    """MLE of epsilon from angles (solves E_eps[theta] = mean) and the variance of theta there."""
    target = float(np.mean(theta))

    def f(log_eps: float) -> float:
        return AngleLaw(math.exp(log_eps), d, m=20_001).moments()[0] - target

    lo, hi = math.log(1e-6), math.log(1e7)
    if f(lo) <= 0:
        eps = math.exp(lo)
    elif f(hi) >= 0:
        eps = math.exp(hi)
    else:
        eps = math.exp(optimize.brentq(f, lo, hi, xtol=1e-12, rtol=1e-12))
    return eps, AngleLaw(eps, d, m=20_001).moments()[1]


def _gamma_shape_mle(r: NDArray[Any]) -> tuple[float, float]:
    """MLE of a Gamma shape (scale free) and its standard error."""
    s = float(math.log(r.mean()) - np.mean(np.log(r)))
    if not s > 0:
        return math.inf, 0.0

    def f(log_k: float) -> float:
        k = math.exp(log_k)
        return math.log(k) - float(special.digamma(k)) - s

    k = math.exp(optimize.brentq(f, math.log(1e-6), math.log(1e9), xtol=1e-14))
    info = k * float(special.polygamma(1, k)) - 1.0
    se = math.sqrt(k / (r.size * info)) if info > 0 else math.inf
    return k, se


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


# ---- the white box's verdict, shared by every family ------------------------------------------
def _relative(a: float, b: float) -> float:
    """|a - b| / |b| (0 when both are 0)."""
    if a == b:
        return 0.0
    return abs(a - b) / abs(b) if b != 0 else math.inf


def _check_value(
    name: str, recomputed: float, used: float, tolerance: float, how: str
) -> ParameterCheck:
    """``used`` (the mechanism's) against ``recomputed`` (here), relative deviation."""
    dev = _relative(float(used), float(recomputed))
    return ParameterCheck(
        name,
        float(recomputed),
        float(used),
        dev,
        tolerance,
        f"{name}: the mechanism uses {used:.10g}, recomputed {recomputed:.10g} ({how})",
    )


def _check_claim_epsilon(claim: Claim, param_epsilon: float, what: str) -> ParameterCheck:
    """A metric claim must not be stronger than the epsilon the sampler is built with."""
    short = max(0.0, (param_epsilon - claim.epsilon) / param_epsilon)
    return ParameterCheck(
        "claim",
        float(param_epsilon),
        float(claim.epsilon),
        short,
        1e-12,
        f"claim: epsilon {claim.epsilon:.10g} per unit, the parameters give {param_epsilon:.10g} "
        f"({what})",
    )


def _conclude(
    family: str,
    *,
    n: int,
    level: float,
    resolution: float,
    claim: float,
    unit: str,
    estimates: Sequence[Estimate],
    tests: Sequence[LawTest],
    checks: Sequence[ParameterCheck],
    eps_hat: float,
    eps_lo: float,
    eps_hi: float,
    what: str,
    findings: Sequence[str] = (),
    exceeded: str | None = None,
    delta_at_claim: float | None = None,
) -> WhiteBoxResult:
    """The white-box verdict from its parts (see :class:`WhiteBoxResult`).

    ``findings``: violations a family found on its own (an unbounded privacy loss, a truncated
    table); ``exceeded``: the family's sentence when the favourable end of its interval is
    beyond the claim (``None``: it is not).
    """
    interval = f"{what} implies epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}]{unit}"
    problems = list(findings)
    wrong = [c.detail for c in checks if not c.passed]
    if wrong:
        problems.append("the mechanism is not what its parameters say: " + "; ".join(wrong))
    failed = [t for t in tests if not t.passed]
    if failed:
        problems.append(
            "noise is not the claimed law: "
            + "; ".join(f"{t.name} p={t.pvalue:.3g}" for t in failed)
        )
    if exceeded is not None:
        problems.append(exceeded)
    needed: float | None = None
    if problems:
        verdict, reason = "violation", "; ".join(problems)
    elif eps_hi > resolution * claim:
        verdict = "inconclusive"
        # the half-width shrinks as 1/sqrt(n); aim at half-width + 2 standard errors <= room,
        # so that a mechanism at its claim resolves with about 98% probability
        half = eps_hi - eps_hat
        room = (resolution - 1.0) * claim
        z = float(stats.norm.isf((1.0 - level) / 2.0))
        if math.isfinite(half) and half > 0:
            needed = float(math.ceil(n * (half * (1.0 + 2.0 / z) / room) ** 2))
        reason = (
            f"{interval} (claimed {claim:g}): the interval reaches {eps_hi / claim:.3g} x the "
            f"claim, beyond the resolution {resolution:g}"
            + (f"; about {needed:.3g} noise draws would resolve it" if needed else "")
        )
    else:
        verdict = "consistent"
        reason = f"{interval} (claimed {claim:g}): within {resolution:g} x the claim"
    return WhiteBoxResult(
        family=family,
        samples=n,
        level=level,
        estimates=tuple(estimates),
        tests=tuple(tests),
        epsilon_estimate=eps_hat,
        epsilon_low=eps_lo,
        delta_at_claim=delta_at_claim,
        verdict=verdict,
        reason=reason,
        epsilon_high=eps_hi,
        resolution=resolution,
        samples_needed=needed,
        checks=tuple(checks),
    )


def _isotropy_test(name: str, U: NDArray[Any], threshold: float) -> LawTest | None:
    r"""Every coordinate of a uniform unit vector in R^d has mean square 1/d.

    :math:`U_j^2 \sim \mathrm{Beta}(1/2, (d-1)/2)` with variance :math:`2(d-1)/(d^2(d+2))`; the
    largest |z| over coordinates, Bonferroni. It sees noise drawn with another covariance than
    the one it is whitened with (a uniform direction after whitening needs the right Sigma).
    """
    n, d = U.shape
    if d < 2 or n < 2:
        return None
    ms = np.einsum("ij,ij->j", U, U) / n
    sd = math.sqrt(2.0 * (d - 1) / (d * d * (d + 2) * n))
    z = float(np.max(np.abs(ms - 1.0 / d)) / sd)
    return LawTest(name, z, float(min(1.0, d * 2.0 * stats.norm.sf(z))), threshold)


# ---- families ---------------------------------------------------------------------------------
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
            return _angle_pair(d, phi, rng)
        l2 = 2.0 if distance is None else check_real("distance", distance, gt=0, le=2)
        return _l2_pair(d, l2, rng)

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
        return None

    def score_law(self, mech: Mechanism, pair: Pair, d: int) -> ScoreLaw | None:
        return None


def _l2_pair(d: int, l2: float, rng: np.random.Generator) -> Pair:
    if d == 1:
        if l2 != 2.0:
            raise ValueError(
                f"in dimension 1 unit vectors are +-1 (distance 2), got distance={l2!r}."
            )
        return Pair(np.array([-1.0]), np.array([1.0]), 2.0, "x0 = -1, x1 = +1", True)
    u, v = _orthonormal(rng, d)
    x0, x1 = _sphere_pair(u, v, l2)
    what = "antipodal unit vectors" if l2 == 2.0 else "unit vectors"
    return Pair(x0, x1, l2, f"{what} at l2 distance {l2:g} (random directions)", l2 == 2.0)


def _angle_pair(d: int, phi: float, rng: np.random.Generator) -> Pair:
    if d < 2:
        raise DataError(f"an angular pair needs dimension >= 2, got {d}.")
    u, v = _orthonormal(rng, d)
    x0 = math.cos(phi / 2) * u - math.sin(phi / 2) * v
    x1 = math.cos(phi / 2) * u + math.sin(phi / 2) * v
    what = "antipodal unit vectors" if phi == math.pi else "unit vectors"
    return Pair(x0, x1, phi, f"{what} at angle {phi:.6g} rad (random directions)", phi == math.pi)


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
        p = _l2_pair(d, l2, rng)
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
        return _check_value(
            "sensitivity", param, used, 1e-12, f"the relation's l2 distance is {sens:g}"
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
    ) -> WhiteBoxResult:
        claim = self.claim(mech)
        raw = raw_twin(mech)
        X = random_unit_rows(rng, n, d)
        Z = path.release(raw, X, rng, "whitebox") - self.noise_free(raw, X, d)
        m = Z.size
        k = Z.shape[1]
        ss = float(np.einsum("ij,ij->", Z, Z))
        sigma_hat = math.sqrt(ss / m)
        a = 1.0 - level
        sigma_lo = math.sqrt(ss / stats.chi2.ppf(1.0 - a / 2.0, m))
        sigma_hi = math.sqrt(ss / stats.chi2.ppf(a / 2.0, m))
        ks = stats.kstest(Z.ravel()[:_KS_CAP] / sigma_hat, "norm")
        var_j = np.einsum("ij,ij->j", Z, Z) / n
        z_var = np.abs(var_j / sigma_hat**2 - 1.0) / math.sqrt(2.0 / n)
        mean_j = Z.mean(axis=0)
        z_mean = np.abs(mean_j) / (sigma_hat / math.sqrt(n))
        tests = (
            LawTest(
                "KS of noise coordinates / sigma_hat vs N(0, 1)",
                float(ks.statistic),
                float(ks.pvalue),
                a,
            ),
            LawTest(
                "equal variance in every coordinate (max |z|, Bonferroni)",
                float(z_var.max()),
                float(min(1.0, k * 2.0 * stats.norm.sf(z_var.max()))),
                a,
            ),
            LawTest(
                "zero mean in every coordinate (max |z|, Bonferroni)",
                float(z_mean.max()),
                float(min(1.0, k * 2.0 * stats.norm.sf(z_mean.max()))),
                a,
            ),
        )
        checks = self.checks(mech, d, claim)
        sens = self.sensitivity(mech, d)
        need = gaussian_sigma(claim.epsilon, claim.delta, sens)
        estimates = [
            Estimate("sigma", sigma_hat, sigma_lo, sigma_hi, self.sigma(mech, d)),
            Estimate("sensitivity (relation)", sens),
            Estimate("sigma the claim needs (dp_accounting)", need),
        ]
        delta_at = theory.analytic_gaussian_delta(sigma_hi, claim.epsilon, sens)
        estimates.append(
            Estimate(
                "delta at the claimed epsilon",
                theory.analytic_gaussian_delta(sigma_hat, claim.epsilon, sens),
                delta_at,
                theory.analytic_gaussian_delta(sigma_lo, claim.epsilon, sens),
                claim.delta,
            )
        )
        eps_hat = theory.analytic_gaussian_epsilon(sigma_hat, claim.delta, sens)
        eps_low = theory.analytic_gaussian_epsilon(sigma_hi, claim.delta, sens)
        eps_high = theory.analytic_gaussian_epsilon(sigma_lo, claim.delta, sens)
        exceeded = None
        if sigma_hi < need - SIGMA_ATOL:
            exceeded = (
                f"estimated sigma {sigma_hat:.5g} (<= {sigma_hi:.5g} at level {level:g}) is below "
                f"the {need:.5g} that ({claim.epsilon:g}, {claim.delta:.3g}) needs at sensitivity "
                f"{sens:g}: it gives delta={delta_at:.3g} at the claimed epsilon={claim.epsilon:g}"
                f"; at delta={claim.delta:.3g} epsilon >= {eps_low:.4g}"
            )
        return _conclude(
            self.name,
            n=n,
            level=level,
            resolution=resolution,
            claim=claim.epsilon,
            unit=f" at delta={claim.delta:.3g}",
            estimates=estimates,
            tests=tests,
            checks=checks,
            eps_hat=eps_hat,
            eps_lo=eps_low,
            eps_hi=eps_high,
            what=f"estimated sigma {sigma_hat:.5g} [{sigma_lo:.5g}, {sigma_hi:.5g}]",
            exceeded=exceeded,
            delta_at_claim=delta_at,
        )

    def score_law(self, mech: Mechanism, pair: Pair, d: int) -> ScoreLaw | None:
        m0, m1 = self.centres(mech, pair)
        sigma = self.sigma(mech, d)
        dist = float(np.linalg.norm(m1 - m0))
        antipodal = bool(np.allclose(m0, -m1, rtol=0, atol=1e-12))
        if mech.renormalize and antipodal:
            return _gaussian_normalised_law(sigma, float(np.linalg.norm(m1)), m1.size)
        g = np.linspace(-45.0, 45.0, 40_001)
        lw = -(g**2) / 2.0
        h = dist / 2.0
        return ScoreLaw(-h + sigma * g, lw, h + sigma * g, lw, exact=not mech.renormalize)


def _gaussian_normalised_law(sigma: float, rho: float, k: int, n: int = 1500) -> ScoreLaw:
    """Law of <y/|y|, e> for y = -+rho e + sigma g, g ~ N(0, I_k)."""
    g = np.linspace(-40.0, 40.0, n)
    lg = -(g**2) / 2.0
    if k == 1:
        R, lr = np.zeros(1), np.zeros(1)
    else:
        R, lr = _chi_grid(k - 1, n)
    lw = (lg[:, None] + lr[None, :]).ravel()
    b2 = (sigma * R[None, :]) ** 2
    out = []
    for c in (-rho, rho):
        a = c + sigma * g[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append((a / np.sqrt(a * a + b2)).ravel())
    return ScoreLaw(out[0], lw, out[1], lw, exact=True)


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
        return _check_value("sensitivity", sens, used, 1e-9, how + " of P rebuilt from its seed")

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
            return _l2_pair(d, l2, rng)
        if bounded:
            raise ValueError(
                f"unit-vector inputs (input_norm={mech.input_norm!r}) are at most 2 apart; "
                f"distance must be <= 2, got distance={distance!r}."
            )
        v = random_unit_rows(rng, 1, d)[0]
        return Pair(-l2 / 2 * v, l2 / 2 * v, l2, f"+-{l2 / 2:g} v (input_norm='none')", True)

    def statistic(self, mech: Mechanism, pair: Pair, Y: NDArray[Any]) -> NDArray[Any]:
        M = pair.metric if pair.metric is not None else self.metric(mech, Y.shape[1])
        return _norms(M.whiten(Y - pair.x0)) - _norms(M.whiten(Y - pair.x1))

    def claimed_epsilon(self, mech: Mechanism) -> float:
        return self.claim(mech).epsilon

    def checks(self, mech: Mechanism, d: int, metric: Metric) -> list[ParameterCheck]:
        return [
            _check_claim_epsilon(
                self.claim(mech), float(mech.params["epsilon"]), "radius Gamma(d, 1/epsilon)"
            )
        ]

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
    ) -> WhiteBoxResult:
        claim_eps = self.claimed_epsilon(mech)
        metric = self.metric(mech, d)
        checks = self.checks(mech, d, metric)
        raw = raw_twin(mech)
        X = random_unit_rows(rng, n, d)
        Z = path.release(raw, X, rng, "whitebox") - raw.prepare_inputs(X)
        extra = self._extra_estimates(mech, Z, d)
        W = metric.whiten(Z)
        rho = _norms(W)
        a = 1.0 - level
        z = float(stats.norm.isf(a / 2.0))
        S = float(rho.sum())
        nd = float(n) * d
        eps_hat = nd / S
        eps_lo = float(stats.gamma.ppf(a / 2.0, nd)) / S
        eps_hi = float(stats.gamma.ppf(1.0 - a / 2.0, nd)) / S
        k_hat, k_se = _gamma_shape_mle(rho)
        k_lo, k_hi = k_hat - z * k_se, k_hat + z * k_se
        ks = stats.kstest(rho[:_KS_CAP], stats.gamma(d, scale=1.0 / eps_hat).cdf)
        U = W / rho[:, None]
        axis = random_unit_rows(rng, 1, d)[0]
        tests = [
            LawTest(
                f"KS of noise radius vs Gamma({d}, 1/eps_hat)",
                float(ks.statistic),
                float(ks.pvalue),
                a,
            ),
            _sphere_coordinate_test("direction uniform: coordinate 0", U[:, 0], d, a),
            _sphere_coordinate_test("direction uniform: a random axis", U @ axis, d, a),
        ]
        iso = _isotropy_test("direction uniform: mean square of every coordinate", U, a)
        if iso is not None:
            tests.append(iso)
        estimates = (
            Estimate("epsilon (radius scale, shape d)", eps_hat, eps_lo, eps_hi, claim_eps),
            Estimate("radius Gamma shape", k_hat, k_lo, k_hi, float(d)),
            *extra,
        )
        findings = []
        if not (k_lo <= d <= k_hi):
            eps_lo = math.inf
            findings.append(
                f"noise radius has Gamma shape {k_hat:.4g} [{k_lo:.4g}, {k_hi:.4g}], not d={d}: the "
                f"noise density is proportional to r^({k_hat:.3g} - {d}) exp(-eps r), so the "
                "privacy loss is unbounded near the input"
            )
        exceeded = None
        if math.isfinite(eps_lo) and eps_lo > claim_eps:
            exceeded = (
                f"noise radius implies epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}] per "
                f"unit, above the claimed {claim_eps:g}"
            )
        return _conclude(
            self.name,
            n=n,
            level=level,
            resolution=resolution,
            claim=claim_eps,
            unit=" per unit",
            estimates=estimates,
            tests=tests,
            checks=checks,
            eps_hat=eps_hat,
            eps_lo=eps_lo,
            eps_hi=eps_hi,
            what=f"noise radius (Gamma shape {k_hat:.4g}, consistent with d={d})",
            findings=findings,
            exceeded=exceeded,
        )

    def _extra_estimates(self, mech: Mechanism, Z: NDArray[Any], d: int) -> tuple[Estimate, ...]:
        return ()

    def score_law(self, mech: Mechanism, pair: Pair, d: int) -> ScoreLaw | None:
        if d < 2:
            return None
        eps = self.claimed_epsilon(mech)
        r, lr = _gamma_radius_grid(d, eps, 1500)
        c, lc = _sphere_cos_grid(d, 1500)
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
        dev = max(_relative(float(lmin), float(vals.min())), _relative(float(lmax), vals.max()))
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
        x0, x1 = _sphere_pair(u, v, min(l2, 2.0))
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
#: own (below 1e-6, ``tests/test_audit.py::test_angle_law_cdf_matches_quadrature``)
ANGLE_TABLE_TOLERANCE = 2e-5


class PurkayasthaFamily(Family):
    """Purkayastha mechanism (``purkayastha``): angle law e^(-eps theta) sin^(d-2) theta."""

    name = "purkayastha angle"
    has_statistic = True

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        phi = math.pi if distance is None else check_real("distance", distance, gt=0, le=math.pi)
        return _angle_pair(d, phi, rng)

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
            _check_claim_epsilon(self.claim(mech), eps, "angle law e^(-eps theta)"),
        ]

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
    ) -> WhiteBoxResult:
        claim_eps = self.claim(mech).epsilon
        checks = self.checks(mech, d)
        X = random_unit_rows(rng, n, d)
        Y = path.release(mech, X, rng, "whitebox")
        theta = angles_to(Y, X)
        a = 1.0 - level
        z = float(stats.norm.isf(a / 2.0))
        eps_hat, var = _purkayastha_mle(theta, d)
        se = 1.0 / math.sqrt(n * var)
        eps_lo, eps_hi = max(0.0, eps_hat - z * se), eps_hat + z * se
        law = AngleLaw(eps_hat, d)
        ks = stats.kstest(theta[:_KS_CAP], law.cdf)
        # tangent direction: uniform on the unit sphere of x's orthogonal complement (R^(d-1))
        T = Y - np.einsum("ij,ij->i", Y, X)[:, None] * X
        axis = random_unit_rows(rng, 1, d)[0]
        A = axis[None, :] - (X @ axis)[:, None] * X
        tn, an = _norms(T), _norms(A)
        ok = (tn > 1e-9) & (an > 1e-9)
        cos_t = np.einsum("ij,ij->i", T[ok], A[ok]) / (tn[ok] * an[ok])
        tests = (
            LawTest(
                "KS of angles vs the angle law at eps_hat", float(ks.statistic), float(ks.pvalue), a
            ),
            _sphere_coordinate_test("tangent direction uniform", cos_t, d - 1, a),
        )
        trunc = self.truncation_delta(mech, d)
        estimates = (
            Estimate("epsilon (angle law MLE)", eps_hat, eps_lo, eps_hi, claim_eps),
            Estimate("delta of the pure claim from the sampler's angle range", trunc, claimed=0.0),
        )
        findings = []
        if trunc > self.truncation_tolerance:
            findings.append(
                f"the sampler's angle table covers [{self._range(mech, d)[0]:.4g}, "
                f"{self._range(mech, d)[1]:.6g}] rad only: for antipodal inputs, outputs that x0 "
                f"can never produce have probability {trunc:.3g} under x1, so the pure "
                f"{math.pi * claim_eps:.4g}-LDP claim holds only with delta={trunc:.3g}"
            )
        exceeded = None
        if eps_lo > claim_eps:
            exceeded = (
                f"angles imply epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}] per radian, above "
                f"the claimed {claim_eps:g}"
            )
        return _conclude(
            self.name,
            n=n,
            level=level,
            resolution=resolution,
            claim=claim_eps,
            unit=" per radian",
            estimates=estimates,
            tests=tests,
            checks=checks,
            eps_hat=eps_hat,
            eps_lo=eps_lo,
            eps_hi=eps_hi,
            what="the angle sample",
            findings=findings,
            exceeded=exceeded,
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
        x0, x1 = _sphere_pair(u, v, l2)
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
            return _norms(Y - m0) - _norms(Y - m1)
        if noise == "gaussian":
            return np.asarray(Y @ (m1 - m0), dtype=np.float64)
        return angles_to(Y, m0) - angles_to(Y, m1)

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
    ) -> WhiteBoxResult:
        claim = self.claim(mech)
        P = self._matrix(mech)
        k = P.shape[0]
        s_max = float(np.linalg.norm(P, 2))
        ortho = float(np.max(np.abs(P @ P.T - np.eye(k))))
        a = 1.0 - level
        raw = raw_twin(mech)
        X = random_unit_rows(rng, n, d)
        Y = path.release(raw, X, rng, "whitebox")
        V = np.asarray(mech.public_transform(X), dtype=np.float64)
        noise = self._noise(mech)
        contraction = [
            Estimate("largest singular value of P (a contraction: <= 1)", s_max, claimed=1.0),
            Estimate("max |P P^T - I| (orthonormal rows)", ortho, claimed=0.0),
        ]
        delta_at: float | None = None
        unit = " per unit of input l2"
        if noise == "laplace":
            tests, est, eps_hat, eps_lo, eps_hi, why = self._laplace(
                Y - V, k, claim.epsilon, a, rng
            )
        elif noise == "gaussian":
            tests, est, eps_hat, eps_lo, eps_hi, why, delta_at = self._gaussian(
                Y - V, 2.0 * s_max, claim, a
            )
            unit = f" at delta={claim.delta:.3g}"
        else:
            U = V / np.maximum(_norms(V), 1e-300)[:, None]
            tests, est, eps_hat, eps_lo, eps_hi, why = self._angles(Y, U, k, claim.epsilon, a, rng)
            unit = " per radian"
        findings = []
        if s_max > 1.0 + self.contraction_tolerance:
            findings.append(
                f"P is not a contraction: ||P||_2 = {s_max:.9g} > 1, so the noise's guarantee "
                f"holds only per unit of {s_max:.6g} x the input distance"
            )
        return _conclude(
            self.name,
            n=n,
            level=level,
            resolution=resolution,
            claim=claim.epsilon,
            unit=unit,
            estimates=(*contraction, *est),
            tests=tests,
            checks=(),
            eps_hat=eps_hat,
            eps_lo=eps_lo,
            eps_hi=eps_hi,
            what=f"noise in k={k} dimensions",
            findings=findings,
            exceeded=why,
            delta_at_claim=delta_at,
        )

    @staticmethod
    def _laplace(
        Z: NDArray[Any], k: int, claim_eps: float, a: float, rng: np.random.Generator
    ) -> tuple[list[LawTest], list[Estimate], float, float, float, str | None]:
        rho = _norms(Z)
        z = float(stats.norm.isf(a / 2.0))
        S, nk = float(rho.sum()), float(rho.size) * k
        eps_hat = nk / S
        eps_lo = float(stats.gamma.ppf(a / 2.0, nk)) / S
        eps_hi = float(stats.gamma.ppf(1.0 - a / 2.0, nk)) / S
        k_hat, k_se = _gamma_shape_mle(rho)
        k_lo, k_hi = k_hat - z * k_se, k_hat + z * k_se
        ks = stats.kstest(rho[:_KS_CAP], stats.gamma(k, scale=1.0 / eps_hat).cdf)
        U = Z / rho[:, None]
        axis = random_unit_rows(rng, 1, k)[0]
        tests = [
            LawTest(f"KS of noise radius vs Gamma({k}, 1/eps_hat)", float(ks.statistic),
                    float(ks.pvalue), a),
            _sphere_coordinate_test("direction uniform: coordinate 0", U[:, 0], k, a),
            _sphere_coordinate_test("direction uniform: a random axis", U @ axis, k, a),
        ]  # fmt: skip
        est = [
            Estimate("epsilon (radius scale, shape k)", eps_hat, eps_lo, eps_hi, claim_eps),
            Estimate("radius Gamma shape", k_hat, k_lo, k_hi, float(k)),
        ]
        why = None
        if not (k_lo <= k <= k_hi):
            why = f"noise radius has Gamma shape {k_hat:.4g} [{k_lo:.4g}, {k_hi:.4g}], not k={k}"
            eps_lo = math.inf
        elif eps_lo > claim_eps:
            why = (
                f"noise radius implies epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}] per "
                f"unit, above the claimed {claim_eps:g}"
            )
        return tests, est, eps_hat, eps_lo, eps_hi, why

    @staticmethod
    def _gaussian(
        Z: NDArray[Any], sens: float, claim: Claim, a: float
    ) -> tuple[list[LawTest], list[Estimate], float, float, float, str | None, float]:
        m = Z.size
        ss = float(np.einsum("ij,ij->", Z, Z))
        sigma_hat = math.sqrt(ss / m)
        sigma_lo = math.sqrt(ss / stats.chi2.ppf(1.0 - a / 2.0, m))
        sigma_hi = math.sqrt(ss / stats.chi2.ppf(a / 2.0, m))
        ks = stats.kstest(Z.ravel()[:_KS_CAP] / sigma_hat, "norm")
        n, k = Z.shape
        var_j = np.einsum("ij,ij->j", Z, Z) / n
        z_var = np.abs(var_j / sigma_hat**2 - 1.0) / math.sqrt(2.0 / n)
        tests = [
            LawTest("KS of noise coordinates / sigma_hat vs N(0, 1)", float(ks.statistic),
                    float(ks.pvalue), a),
            LawTest("equal variance in every coordinate (max |z|, Bonferroni)",
                    float(z_var.max()), float(min(1.0, k * 2.0 * stats.norm.sf(z_var.max()))), a),
        ]  # fmt: skip
        delta_at = theory.analytic_gaussian_delta(sigma_hi, claim.epsilon, sens)
        eps_hat = theory.analytic_gaussian_epsilon(sigma_hat, claim.delta, sens)
        eps_low = theory.analytic_gaussian_epsilon(sigma_hi, claim.delta, sens)
        eps_high = theory.analytic_gaussian_epsilon(sigma_lo, claim.delta, sens)
        est = [
            Estimate("sigma", sigma_hat, sigma_lo, sigma_hi),
            Estimate("sensitivity 2 ||P||_2", sens, claimed=2.0),
            Estimate("delta at the claimed epsilon", delta_at, claimed=claim.delta),
        ]
        why = None
        if delta_at > claim.delta * (1.0 + 1e-9):
            why = (
                f"estimated sigma {sigma_hat:.5g} (<= {sigma_hi:.5g}) gives delta={delta_at:.3g} "
                f"at the claimed epsilon={claim.epsilon:g} (claimed delta={claim.delta:.3g})"
            )
        return tests, est, eps_hat, eps_low, eps_high, why, delta_at

    @staticmethod
    def _angles(
        Y: NDArray[Any],
        U: NDArray[Any],
        k: int,
        claim_eps: float,
        a: float,
        rng: np.random.Generator,
    ) -> tuple[list[LawTest], list[Estimate], float, float, float, str | None]:
        theta = angles_to(Y, U)
        n = theta.size
        z = float(stats.norm.isf(a / 2.0))
        eps_hat, var = _purkayastha_mle(theta, k)
        se = 1.0 / math.sqrt(n * var)
        eps_lo, eps_hi = max(0.0, eps_hat - z * se), eps_hat + z * se
        ks = stats.kstest(theta[:_KS_CAP], AngleLaw(eps_hat, k).cdf)
        T = Y - np.einsum("ij,ij->i", Y, U)[:, None] * U
        axis = random_unit_rows(rng, 1, k)[0]
        A = axis[None, :] - (U @ axis)[:, None] * U
        tn, an = _norms(T), _norms(A)
        ok = (tn > 1e-9) & (an > 1e-9)
        cos_t = np.einsum("ij,ij->i", T[ok], A[ok]) / (tn[ok] * an[ok])
        tests = [
            LawTest(f"KS of angles vs the angle law in k={k} at eps_hat", float(ks.statistic),
                    float(ks.pvalue), a),
            _sphere_coordinate_test("tangent direction uniform", cos_t, k - 1, a),
        ]  # fmt: skip
        est = [Estimate("epsilon (angle law MLE)", eps_hat, eps_lo, eps_hi, claim_eps)]
        why = None
        if eps_lo > claim_eps:
            why = (
                f"angles imply epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}] per radian, "
                f"above the claimed {claim_eps:g}"
            )
        return tests, est, eps_hat, eps_lo, eps_hi, why


#: family auditors by mechanism registry name
AUDITORS: dict[str, Family] = {
    "gaussian": GaussianFamily(),
    "empirical": GaussianFamily(),
    "projection": ProjectionFamily(),
    "laplace": LaplaceFamily(),
    "mahalanobis": MahalanobisFamily(),
    "purkayastha": PurkayasthaFamily(),
    "subspace": SubspaceFamily(),
}


def register_auditor(name: str, family: Family) -> None:
    """Use ``family`` to audit mechanisms whose registry ``name`` is ``name``."""
    if not isinstance(family, Family):
        raise TypeError(f"family must be a Family instance, got family={family!r}.")
    AUDITORS[name] = family


def auditor_for(mech: Mechanism) -> Family:
    """The family auditor of a mechanism (the generic black-box one when none is registered)."""
    if not isinstance(mech, Mechanism):
        raise TypeError(f"mechanism must be a privembed Mechanism, got mechanism={mech!r}.")
    return AUDITORS.get(mech.name, Family())
