"""What the audit knows about each mechanism family.

One small class per family (selected by the mechanism's registry ``name``, so a subclass with a
planted bug is audited as the family it claims to be):

* the worst-case neighbouring pair of the claim (antipodal unit vectors for LDP on the sphere,
  the relation's sensitivity for Gaussian noise, the attribute relation of a projection, a
  chosen distance for metric privacy);
* the likelihood-ratio statistic of the *claimed* law (the most powerful test if the claim is
  exactly right);
* the white-box check: the law's parameters estimated from noise samples, goodness-of-fit
  tests, and the privacy those estimates imply;
* the exact law of the statistic for a correct mechanism (power: the N an audit needs).
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special, stats

from .. import theory
from .._validation import DataError, check_real
from ..mechanisms.base import Mechanism
from ._bounds import ScoreLaw
from ._results import Estimate, LawTest, WhiteBoxResult

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


def _noise(rng: np.random.Generator, fresh: bool) -> np.random.Generator | None:
    """The ``rng`` handed to ``privatize``: None (fresh OS entropy, the production path) or the
    audit's generator (seeded per-row streams, reproducible)."""
    return None if fresh else rng


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

    @classmethod
    def of(cls, mech: Mechanism) -> Claim:
        g = mech.guarantee
        kind = g.kind
        if kind == "approx_dp":
            return cls(kind, float(g.epsilon), float(g.delta), None, g.describe())  # type: ignore[attr-defined]
        if kind == "pure_dp":
            return cls(kind, float(g.epsilon), 0.0, None, g.describe())  # type: ignore[attr-defined]
        if kind == "metric_dp":
            return cls(kind, float(g.epsilon), 0.0, str(g.metric), g.describe())  # type: ignore[attr-defined]
        raise ValueError(
            f"{mech!r} makes no formal guarantee ({g.describe()}); there is nothing to audit."
        )


@dataclass(frozen=True)
class Pair:
    """Neighbouring inputs (before the mechanism's ``input_norm``) and their distance."""

    x0: NDArray[np.float64]
    x1: NDArray[np.float64]
    distance: float
    description: str
    antipodal: bool


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
        fresh: bool = False,
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
    """Isotropic Gaussian noise on unit vectors (``gaussian``, ``empirical``)."""

    name = "gaussian"
    has_statistic = True

    def sensitivity(self, mech: Mechanism, d: int) -> float:
        """The l2 distance the claimed relation allows (the mechanism's stated sensitivity)."""
        return check_real("sensitivity", mech.sensitivity, gt=0)  # type: ignore[attr-defined]

    def sigma(self, mech: Mechanism, d: int) -> float:
        return float(mech.sigma)  # type: ignore[attr-defined]

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        sens = self.sensitivity(mech, d)
        top = min(sens, 2.0)
        l2 = top if distance is None else check_real("distance", distance, gt=0, le=top)
        p = _l2_pair(d, l2, rng)
        return Pair(
            p.x0, p.x1, l2, p.description + f"; relation: l2 sensitivity {sens:g}", p.antipodal
        )

    def centres(self, mech: Mechanism, pair: Pair) -> tuple[NDArray[Any], NDArray[Any]]:
        return super().centres(mech, pair)

    def statistic(self, mech: Mechanism, pair: Pair, Y: NDArray[Any]) -> NDArray[Any]:
        m0, m1 = self.centres(mech, pair)
        return np.asarray(Y @ (m1 - m0), dtype=np.float64)

    def noise_free(self, mech: Mechanism, X: NDArray[Any]) -> NDArray[Any]:
        return mech.prepare_inputs(X)

    def whitebox(
        self,
        mech: Mechanism,
        d: int,
        n: int,
        rng: np.random.Generator,
        level: float,
        *,
        fresh: bool = False,
    ) -> WhiteBoxResult:
        claim = self.claim(mech)
        raw = raw_twin(mech)
        X = random_unit_rows(rng, n, d)
        Z = np.asarray(
            raw.privatize(X, rng=_noise(rng, fresh)), dtype=np.float64
        ) - self.noise_free(raw, X)
        m = Z.size
        k = Z.shape[1]
        ss = float(np.einsum("ij,ij->", Z, Z))
        sigma_hat = math.sqrt(ss / m)
        a = 1.0 - level
        sigma_lo = math.sqrt(ss / stats.chi2.ppf(1.0 - a / 2.0, m))
        sigma_hi = math.sqrt(ss / stats.chi2.ppf(a / 2.0, m))
        claimed_sigma = self.sigma(mech, d)
        thr = a
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
                thr,
            ),
            LawTest(
                "equal variance in every coordinate (max |z|, Bonferroni)",
                float(z_var.max()),
                float(min(1.0, k * 2.0 * stats.norm.sf(z_var.max()))),
                thr,
            ),
            LawTest(
                "zero mean in every coordinate (max |z|, Bonferroni)",
                float(z_mean.max()),
                float(min(1.0, k * 2.0 * stats.norm.sf(z_mean.max()))),
                thr,
            ),
        )
        sens = self.sensitivity(mech, d)
        estimates = [
            Estimate("sigma", sigma_hat, sigma_lo, sigma_hi, claimed_sigma),
            Estimate("sensitivity (relation)", sens),
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
        failed = [t for t in tests if not t.passed]
        if failed:
            verdict, reason = (
                "violation",
                "noise is not the claimed isotropic Gaussian: "
                + "; ".join(f"{t.name} p={t.pvalue:.3g}" for t in failed),
            )
        elif delta_at > claim.delta * (1.0 + 1e-9):
            verdict = "violation"
            reason = (
                f"estimated sigma {sigma_hat:.5g} (<= {sigma_hi:.5g} at level {level:g}) gives "
                f"delta={delta_at:.3g} at the claimed epsilon={claim.epsilon:g} (claimed delta="
                f"{claim.delta:.3g}); at delta={claim.delta:.3g} epsilon >= {eps_low:.4g}"
            )
        else:
            verdict = "consistent"
            reason = (
                f"estimated sigma {sigma_hat:.5g} [{sigma_lo:.5g}, {sigma_hi:.5g}] gives epsilon "
                f"{eps_hat:.4g} at delta={claim.delta:.3g} (claimed {claim.epsilon:g})"
            )
        return WhiteBoxResult(
            family=self.name,
            samples=n,
            level=level,
            estimates=tuple(estimates),
            tests=tests,
            epsilon_estimate=eps_hat,
            epsilon_low=eps_low,
            delta_at_claim=delta_at,
            verdict=verdict,
            reason=reason,
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
    """JL projection then Gaussian noise (``projection``); the relation is record or attribute."""

    name = "projection"

    def _matrix(self, mech: Mechanism, d: int) -> NDArray[Any]:
        return np.asarray(mech.projection.matrix(d), dtype=np.float64)  # type: ignore[attr-defined]

    def sensitivity(self, mech: Mechanism, d: int) -> float:
        """Computed here from the public matrix, independently of the mechanism's calibration."""
        P = self._matrix(mech, d)
        if mech.neighbouring == "record":  # type: ignore[attr-defined]
            return 2.0 * float(np.linalg.norm(P, 2))
        return float(np.sqrt(np.max(np.einsum("ij,ij->j", P, P))))

    def sigma(self, mech: Mechanism, d: int) -> float:
        return float(mech.sigma_for(d))  # type: ignore[attr-defined]

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        if distance is not None:
            raise ValueError(
                "the projection's pair is fixed by its relation (record or attribute); "
                f"distance must be None, got distance={distance!r}."
            )
        P = self._matrix(mech, d)
        if mech.neighbouring == "record":  # type: ignore[attr-defined]
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
        M = np.asarray(mech.project(np.stack([pair.x0, pair.x1])), dtype=np.float64)  # type: ignore[attr-defined]
        return M[0], M[1]

    def noise_free(self, mech: Mechanism, X: NDArray[Any]) -> NDArray[Any]:
        return np.asarray(mech.project(X), dtype=np.float64)  # type: ignore[attr-defined]


class LaplaceFamily(Family):
    """Multivariate l2 Laplace noise (``laplace``): radius Gamma(d, 1/epsilon), uniform direction."""

    name = "l2 laplace"
    has_statistic = True

    def weights(self, mech: Mechanism, d: int) -> NDArray[np.float64]:
        """Whitening weights of the claimed metric (per coordinate); ones for l2."""
        return np.ones(d)

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
        w = self.weights(mech, Y.shape[1])
        return _norms((Y - pair.x0) * w) - _norms((Y - pair.x1) * w)

    def claimed_epsilon(self, mech: Mechanism) -> float:
        return self.claim(mech).epsilon

    def whitebox(
        self,
        mech: Mechanism,
        d: int,
        n: int,
        rng: np.random.Generator,
        level: float,
        *,
        fresh: bool = False,
    ) -> WhiteBoxResult:
        claim_eps = self.claimed_epsilon(mech)
        raw = raw_twin(mech)
        X = random_unit_rows(rng, n, d)
        Z = np.asarray(
            raw.privatize(X, rng=_noise(rng, fresh)), dtype=np.float64
        ) - raw.prepare_inputs(X)
        extra = self._extra_estimates(mech, Z, d)
        W = Z * self.weights(mech, d)
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
        tests = (
            LawTest(
                f"KS of noise radius vs Gamma({d}, 1/eps_hat)",
                float(ks.statistic),
                float(ks.pvalue),
                a,
            ),
            _sphere_coordinate_test("direction uniform: coordinate 0", U[:, 0], d, a),
            _sphere_coordinate_test("direction uniform: a random axis", U @ axis, d, a),
        )
        estimates = (
            Estimate("epsilon (radius scale, shape d)", eps_hat, eps_lo, eps_hi, claim_eps),
            Estimate("radius Gamma shape", k_hat, k_lo, k_hi, float(d)),
            *extra,
        )
        failed = [t for t in tests if not t.passed]
        if not (k_lo <= d <= k_hi):
            verdict = "violation"
            eps_low = math.inf
            reason = (
                f"noise radius has Gamma shape {k_hat:.4g} [{k_lo:.4g}, {k_hi:.4g}], not d={d}: the "
                f"noise density is proportional to r^({k_hat:.3g} - {d}) exp(-eps r), so the "
                "privacy loss is unbounded near the input"
            )
        elif failed:
            verdict, eps_low = "violation", eps_lo
            reason = "noise is not the claimed law: " + "; ".join(
                f"{t.name} p={t.pvalue:.3g}" for t in failed
            )
        elif eps_lo > claim_eps:
            verdict, eps_low = "violation", eps_lo
            reason = (
                f"noise radius implies epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}] per "
                f"unit, above the claimed {claim_eps:g}"
            )
        else:
            verdict, eps_low = "consistent", eps_lo
            reason = (
                f"noise radius implies epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}] per "
                f"unit (claimed {claim_eps:g}); Gamma shape {k_hat:.4g} consistent with d={d}"
            )
        return WhiteBoxResult(
            family=self.name,
            samples=n,
            level=level,
            estimates=estimates,
            tests=tests,
            epsilon_estimate=eps_hat,
            epsilon_low=eps_low,
            delta_at_claim=None,
            verdict=verdict,
            reason=reason,
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
        identity = bool(np.all(self.weights(mech, d) == 1.0))
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
    """Mahalanobis noise (``mahalanobis``): whitened by the *claimed* Sigma it is l2 Laplace."""

    name = "mahalanobis"

    def claimed_diagonal(self, mech: Mechanism, d: int) -> NDArray[np.float64]:
        """Sigma as the claim states it: the mechanism's (diagonal) Sigma normalised to trace d."""
        diag = mech.covariance_diagonal  # type: ignore[attr-defined]
        if diag is None:
            return np.ones(d)
        diag = np.asarray(diag, dtype=np.float64)
        if diag.size != d:
            raise DataError(f"the mechanism's covariance has dimension {diag.size}, but dim={d}.")
        lmin, lmax = mech.eigenvalue_range  # type: ignore[attr-defined]
        if not (
            math.isclose(lmin, diag.min(), rel_tol=1e-9)
            and math.isclose(lmax, diag.max(), rel_tol=1e-9)
        ):
            raise ValueError(
                "this Mahalanobis mechanism has a full (non-diagonal) covariance, which "
                "MahalanobisMechanism does not expose; only diagonal Sigma (mask or diagonal "
                "covariance) can be audited."
            )
        return diag * (d / diag.sum())

    def weights(self, mech: Mechanism, d: int) -> NDArray[np.float64]:
        return 1.0 / np.sqrt(self.claimed_diagonal(mech, d))

    def pair(
        self, mech: Mechanism, d: int, distance: float | None, rng: np.random.Generator
    ) -> Pair:
        diag = self.claimed_diagonal(mech, d)
        j = int(np.argmax(diag))
        lam = float(diag[j])
        l2 = 2.0 if distance is None else check_real("distance", distance, gt=0) * math.sqrt(lam)
        if l2 > 2.0 + 1e-12 and mech.input_norm in ("normalize", "clip"):
            raise ValueError(
                f"unit vectors along the largest-variance axis are at most {2 / math.sqrt(lam):.6g} "
                f"apart in the Mahalanobis metric; got distance={distance!r}."
            )
        if d == 1:
            return Pair(
                np.array([-1.0]), np.array([1.0]), 2.0 / math.sqrt(lam), "x0 = -1, x1 = +1", True
            )
        v = np.zeros(d)
        v[j] = 1.0
        u = np.zeros(d)
        u[int(np.argmin(diag)) if int(np.argmin(diag)) != j else (j + 1) % d] = 1.0
        x0, x1 = _sphere_pair(u, v, min(l2, 2.0))
        dist = min(l2, 2.0) / math.sqrt(lam)
        return Pair(
            x0,
            x1,
            dist,
            f"unit vectors at l2 distance {min(l2, 2.0):g} along the largest-variance "
            f"axis {j} (Sigma_jj = {lam:.4g}): Mahalanobis distance {dist:.6g}",
            l2 >= 2.0,
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

    def whitebox(
        self,
        mech: Mechanism,
        d: int,
        n: int,
        rng: np.random.Generator,
        level: float,
        *,
        fresh: bool = False,
    ) -> WhiteBoxResult:
        claim_eps = self.claim(mech).epsilon
        X = random_unit_rows(rng, n, d)
        Y = np.asarray(mech.privatize(X, rng=_noise(rng, fresh)), dtype=np.float64)
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
        failed = [t for t in tests if not t.passed]
        if trunc > self.truncation_tolerance:
            verdict = "violation"
            reason = (
                f"the sampler's angle table covers [{self._range(mech, d)[0]:.4g}, "
                f"{self._range(mech, d)[1]:.6g}] rad only: for antipodal inputs, outputs that x0 "
                f"can never produce have probability {trunc:.3g} under x1, so the pure "
                f"{math.pi * claim_eps:.4g}-LDP claim holds only with delta={trunc:.3g}"
            )
        elif failed:
            verdict = "violation"
            reason = "output is not the claimed law: " + "; ".join(
                f"{t.name} p={t.pvalue:.3g}" for t in failed
            )
        elif eps_lo > claim_eps:
            verdict = "violation"
            reason = (
                f"angles imply epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}] per radian, above "
                f"the claimed {claim_eps:g}"
            )
        else:
            verdict = "consistent"
            reason = (
                f"angles imply epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}] per radian "
                f"(claimed {claim_eps:g})"
            )
        return WhiteBoxResult(
            family=self.name,
            samples=n,
            level=level,
            estimates=estimates,
            tests=tests,
            epsilon_estimate=eps_hat,
            epsilon_low=eps_lo,
            delta_at_claim=None,
            verdict=verdict,
            reason=reason,
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
        fresh: bool = False,
    ) -> WhiteBoxResult:
        claim = self.claim(mech)
        P = self._matrix(mech)
        k = P.shape[0]
        s_max = float(np.linalg.norm(P, 2))
        ortho = float(np.max(np.abs(P @ P.T - np.eye(k))))
        a = 1.0 - level
        raw = raw_twin(mech)
        X = random_unit_rows(rng, n, d)
        Y = np.asarray(raw.privatize(X, rng=_noise(rng, fresh)), dtype=np.float64)
        V = np.asarray(mech.public_transform(X), dtype=np.float64)
        noise = self._noise(mech)
        contraction = [
            Estimate("largest singular value of P (a contraction: <= 1)", s_max, claimed=1.0),
            Estimate("max |P P^T - I| (orthonormal rows)", ortho, claimed=0.0),
        ]
        if noise == "laplace":
            tests, est, eps_hat, eps_lo, why = self._laplace(Y - V, k, claim.epsilon, a, rng)
            delta_at = None
        elif noise == "gaussian":
            tests, est, eps_hat, eps_lo, why, delta_at = self._gaussian(
                Y - V, 2.0 * s_max, claim, a
            )
        else:
            U = V / np.maximum(_norms(V), 1e-300)[:, None]
            tests, est, eps_hat, eps_lo, why = self._angles(Y, U, k, claim.epsilon, a, rng)
            delta_at = None
        failed = [t for t in tests if not t.passed]
        if s_max > 1.0 + self.contraction_tolerance:
            verdict, reason = (
                "violation",
                f"P is not a contraction: ||P||_2 = {s_max:.9g} > 1, so the noise's guarantee "
                f"holds only per unit of {s_max:.6g} x the input distance",
            )
        elif failed:
            verdict, reason = (
                "violation",
                "noise is not the claimed law in k dimensions: "
                + "; ".join(f"{t.name} p={t.pvalue:.3g}" for t in failed),
            )
        elif why is not None:
            verdict, reason = "violation", why
        else:
            verdict = "consistent"
            reason = (
                f"P is a contraction (||P||_2 = {s_max:.9g}); noise in k={k} dimensions implies "
                f"epsilon {eps_hat:.5g} (claimed {claim.epsilon:g})"
            )
        return WhiteBoxResult(
            family=self.name,
            samples=n,
            level=level,
            estimates=(*contraction, *est),
            tests=tuple(tests),
            epsilon_estimate=eps_hat,
            epsilon_low=eps_lo,
            delta_at_claim=delta_at,
            verdict=verdict,
            reason=reason,
        )

    @staticmethod
    def _laplace(
        Z: NDArray[Any], k: int, claim_eps: float, a: float, rng: np.random.Generator
    ) -> tuple[list[LawTest], list[Estimate], float, float, str | None]:
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
        return tests, est, eps_hat, eps_lo, why

    @staticmethod
    def _gaussian(
        Z: NDArray[Any], sens: float, claim: Claim, a: float
    ) -> tuple[list[LawTest], list[Estimate], float, float, str | None, float]:
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
        return tests, est, eps_hat, eps_low, why, delta_at

    @staticmethod
    def _angles(
        Y: NDArray[Any],
        U: NDArray[Any],
        k: int,
        claim_eps: float,
        a: float,
        rng: np.random.Generator,
    ) -> tuple[list[LawTest], list[Estimate], float, float, str | None]:
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
        return tests, est, eps_hat, eps_lo, why


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
