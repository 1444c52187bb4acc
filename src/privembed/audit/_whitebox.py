"""The white box's shared parts: noise drawn through the audited path, fits of the three noise laws
(Gaussian coordinates, an l2-Laplace radius and direction, a Purkayastha angle and tangent), the
goodness-of-fit tests, the parameter checks and the verdict every family concludes with.

Each fit is written once here and serves every family whose noise has that law: the
isotropic Gaussian and the subspace's Gaussian noise are both "is Z iid N(0, sigma^2)", the l2
and Mahalanobis Laplace (after whitening) and the subspace's Laplace noise are all "is the radius
Gamma(k, 1/epsilon) and the direction uniform", the Purkayastha mechanism and the subspace's
Purkayastha noise are both "is the angle law e^(-epsilon theta) sin^(k-2) theta".
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from ..core import theory
from ..mechanisms.base import Mechanism
from ._laws import AngleLaw, gamma_shape_mle, purkayastha_mle
from ._paths import NoisePath
from ._results import Estimate, LawTest, ParameterCheck, WhiteBoxResult

if TYPE_CHECKING:
    from ._family import Claim

__all__ = [
    "AngleFit",
    "Draws",
    "Evidence",
    "GaussianFit",
    "RadiusFit",
    "angles_to",
    "check_claim_epsilon",
    "check_value",
    "conclude",
    "isotropy_test",
    "norms",
    "random_unit_rows",
    "raw_twin",
    "relative",
]

#: goodness-of-fit tests use at most this many values (the KS statistic is exact at any n)
_KS_CAP = 1_000_000


# ---- small numerical helpers ----------------------------------------------------------------
def random_unit_rows(rng: np.random.Generator, n: int, d: int) -> NDArray[np.float64]:
    """``n`` independent uniform unit vectors in R^d."""
    X = rng.standard_normal((n, d))
    X /= np.sqrt(np.einsum("ij,ij->i", X, X))[:, None]
    return X


def norms(A: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.sqrt(np.einsum("ij,ij->i", A, A))


def angles_to(Y: NDArray[np.float64], x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Angle between each row of ``Y`` and ``x`` (a unit vector, or unit rows aligned with Y).

    Uses atan2(|y - <y,x>x|, <y,x>), accurate also for tiny angles (arccos is not).
    """
    c = Y @ x if x.ndim == 1 else np.einsum("ij,ij->i", Y, x)
    xs = x[None, :] if x.ndim == 1 else x
    s = norms(Y - c[:, None] * xs)
    return np.arctan2(s, c)


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


def isotropy_test(name: str, U: NDArray[Any], threshold: float) -> LawTest | None:
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


# ---- the three noise laws, each fitted once -----------------------------------------------------
def _max_z_test(name: str, z: NDArray[Any], threshold: float) -> LawTest:
    """The largest of ``z.size`` |z| statistics, Bonferroni-corrected."""
    top = float(z.max())
    return LawTest(name, top, float(min(1.0, z.size * 2.0 * stats.norm.sf(top))), threshold)


@dataclass(frozen=True)
class GaussianFit:
    """Is ``Z`` (n draws of k coordinates) iid N(0, sigma^2)? sigma with its chi-square interval.

    ``tests``: KS of Z / sigma_hat against N(0, 1), and the largest |z| over coordinates of the
    variance and of the mean (Bonferroni).
    """

    sigma: float
    low: float
    high: float
    tests: tuple[LawTest, ...]

    @classmethod
    def of(cls, Z: NDArray[Any], a: float) -> GaussianFit:
        n = Z.shape[0]
        m = Z.size
        ss = float(np.einsum("ij,ij->", Z, Z))
        sigma_hat = math.sqrt(ss / m)
        sigma_lo = math.sqrt(ss / stats.chi2.ppf(1.0 - a / 2.0, m))
        sigma_hi = math.sqrt(ss / stats.chi2.ppf(a / 2.0, m))
        ks = stats.kstest(Z.ravel()[:_KS_CAP] / sigma_hat, "norm")
        var_j = np.einsum("ij,ij->j", Z, Z) / n
        z_var = np.abs(var_j / sigma_hat**2 - 1.0) / math.sqrt(2.0 / n)
        z_mean = np.abs(Z.mean(axis=0)) / (sigma_hat / math.sqrt(n))
        tests = (
            LawTest(
                "KS of noise coordinates / sigma_hat vs N(0, 1)",
                float(ks.statistic),
                float(ks.pvalue),
                a,
            ),
            _max_z_test("equal variance in every coordinate (max |z|, Bonferroni)", z_var, a),
            _max_z_test("zero mean in every coordinate (max |z|, Bonferroni)", z_mean, a),
        )
        return cls(sigma_hat, sigma_lo, sigma_hi, tests)

    def privacy(self, claim: Claim, sens: float) -> tuple[float, float, float, float]:
        """(epsilon at sigma_hat, its low and high ends, delta at the claimed epsilon) at the
        claimed delta and sensitivity ``sens`` (the end of the interval favourable to the
        mechanism: the largest sigma)."""
        eps, dlt = claim.epsilon, claim.delta
        return (
            theory.analytic_gaussian_epsilon(self.sigma, dlt, sens),
            theory.analytic_gaussian_epsilon(self.high, dlt, sens),
            theory.analytic_gaussian_epsilon(self.low, dlt, sens),
            theory.analytic_gaussian_delta(self.high, eps, sens),
        )


@dataclass(frozen=True)
class RadiusFit:
    r"""Is ``W`` (n draws in k dimensions) l2 Laplace: radius Gamma(k, 1/epsilon), direction uniform?

    epsilon (``epsilon`` in [``low``, ``high``]) is the radius scale at shape k, with the exact
    Gamma interval of :math:`\sum \rho \sim \mathrm{Gamma}(nk, 1/\varepsilon)`; the shape is
    fitted freely (``shape`` in [``shape_low``, ``shape_high``], normal interval). ``tests``: KS
    of the radius, two coordinates of the direction and its isotropy.
    """

    k: int
    epsilon: float
    low: float
    high: float
    shape: float
    shape_low: float
    shape_high: float
    tests: tuple[LawTest, ...]

    @classmethod
    def of(cls, W: NDArray[Any], a: float, rng: np.random.Generator) -> RadiusFit:
        k = W.shape[1]
        rho = norms(W)
        z = float(stats.norm.isf(a / 2.0))
        S, nk = float(rho.sum()), float(rho.size) * k
        eps_hat = nk / S
        eps_lo = float(stats.gamma.ppf(a / 2.0, nk)) / S
        eps_hi = float(stats.gamma.ppf(1.0 - a / 2.0, nk)) / S
        k_hat, k_se = gamma_shape_mle(rho)
        ks = stats.kstest(rho[:_KS_CAP], stats.gamma(k, scale=1.0 / eps_hat).cdf)
        U = W / rho[:, None]
        axis = random_unit_rows(rng, 1, k)[0]
        tests = [
            LawTest(f"KS of noise radius vs Gamma({k}, 1/eps_hat)", float(ks.statistic),
                    float(ks.pvalue), a),
            _sphere_coordinate_test("direction uniform: coordinate 0", U[:, 0], k, a),
            _sphere_coordinate_test("direction uniform: a random axis", U @ axis, k, a),
        ]  # fmt: skip
        iso = isotropy_test("direction uniform: mean square of every coordinate", U, a)
        if iso is not None:
            tests.append(iso)
        return cls(k, eps_hat, eps_lo, eps_hi, k_hat, k_hat - z * k_se, k_hat + z * k_se, (*tests,))

    @property
    def shape_ok(self) -> bool:
        return self.shape_low <= self.k <= self.shape_high

    def problems(self, claim_eps: float, symbol: str = "d") -> tuple[list[str], str | None]:
        """(findings, exceeded) for :func:`conclude`: a shape other than k makes the privacy
        loss unbounded near the input; else the favourable end of epsilon against the claim."""
        if not self.shape_ok:
            return [
                f"noise radius has Gamma shape {self.shape:.4g} [{self.shape_low:.4g}, "
                f"{self.shape_high:.4g}], not {symbol}={self.k}: the noise density is "
                f"proportional to r^({self.shape:.3g} - {self.k}) exp(-eps r), so the privacy "
                "loss is unbounded near the input"
            ], None
        if self.low > claim_eps:
            return [], (
                f"noise radius implies epsilon {self.epsilon:.5g} [{self.low:.5g}, "
                f"{self.high:.5g}] per unit, above the claimed {claim_eps:g}"
            )
        return [], None

    @property
    def bound_low(self) -> float:
        """The low end of epsilon that the verdict uses: unbounded when the shape is wrong."""
        return self.low if self.shape_ok else math.inf


@dataclass(frozen=True)
class AngleFit:
    r"""Do the angles of ``Y`` to the unit rows ``U`` (in k dimensions) follow the angle law
    :math:`e^{-\varepsilon\theta}\sin^{k-2}\theta`, with a uniform tangent direction?

    epsilon by maximum likelihood with its normal interval (clipped at 0); ``tests``: KS of
    the angles against the law at the estimate, and a coordinate of the unit tangent direction
    (uniform on the sphere of the orthogonal complement, R^(k-1)).
    """

    epsilon: float
    low: float
    high: float
    tests: tuple[LawTest, ...]

    @classmethod
    def of(
        cls, Y: NDArray[Any], U: NDArray[Any], k: int, a: float, rng: np.random.Generator
    ) -> AngleFit:
        theta = angles_to(Y, U)
        z = float(stats.norm.isf(a / 2.0))
        eps_hat, var = purkayastha_mle(theta, k)
        se = 1.0 / math.sqrt(theta.size * var)
        ks = stats.kstest(theta[:_KS_CAP], AngleLaw(eps_hat, k).cdf)
        T = Y - np.einsum("ij,ij->i", Y, U)[:, None] * U
        axis = random_unit_rows(rng, 1, k)[0]
        A = axis[None, :] - (U @ axis)[:, None] * U
        tn, an = norms(T), norms(A)
        ok = (tn > 1e-9) & (an > 1e-9)
        cos_t = np.einsum("ij,ij->i", T[ok], A[ok]) / (tn[ok] * an[ok])
        tests = (
            LawTest(f"KS of angles vs the angle law in {k} dimensions at eps_hat", float(ks.statistic),
                    float(ks.pvalue), a),
            _sphere_coordinate_test("tangent direction uniform", cos_t, k - 1, a),
        )  # fmt: skip
        return cls(eps_hat, max(0.0, eps_hat - z * se), eps_hat + z * se, tests)

    def exceeded(self, claim_eps: float) -> str | None:
        """The sentence when the favourable end of epsilon is above the claim (else None)."""
        if self.low > claim_eps:
            return (
                f"angles imply epsilon {self.epsilon:.5g} [{self.low:.5g}, {self.high:.5g}] per "
                f"radian, above the claimed {claim_eps:g}"
            )
        return None


# ---- the white box's verdict, shared by every family ------------------------------------------
def relative(a: float, b: float) -> float:
    """|a - b| / |b| (0 when both are 0)."""
    if a == b:
        return 0.0
    return abs(a - b) / abs(b) if b != 0 else math.inf


def check_value(
    name: str, recomputed: float, used: float, tolerance: float, how: str
) -> ParameterCheck:
    """``used`` (the mechanism's) against ``recomputed`` (here), relative deviation."""
    dev = relative(float(used), float(recomputed))
    return ParameterCheck(
        name,
        float(recomputed),
        float(used),
        dev,
        tolerance,
        f"{name}: the mechanism uses {used:.10g}, recomputed {recomputed:.10g} ({how})",
    )


def check_claim_epsilon(claim: Claim, param_epsilon: float, what: str) -> ParameterCheck:
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


@dataclass(frozen=True)
class Draws:
    """How a white box samples: ``n`` uniform unit inputs in R^d, released through the audited
    ``path`` (:class:`~._paths.NoisePath`); its tests are at level ``1 - level``."""

    d: int
    n: int
    rng: np.random.Generator
    level: float
    path: NoisePath

    @property
    def a(self) -> float:
        """The level of each goodness-of-fit test (and of the two-sided intervals)."""
        return 1.0 - self.level

    def release(self, mech: Mechanism) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(inputs X, the mechanism's releases of X)."""
        X = random_unit_rows(self.rng, self.n, self.d)
        return X, self.path.release(mech, X, self.rng, "whitebox")


@dataclass(frozen=True)
class Evidence:
    """What a family's white box found, before the verdict (:func:`conclude`).

    ``interval``: the epsilon the noise implies, (estimate, low, high), in the claim's ``unit``;
    ``findings``: violations the family found on its own (an unbounded privacy loss, a truncated
    table); ``exceeded``: the family's sentence when the favourable end of its interval is beyond
    the claim (``None``: it is not).
    """

    claim: float
    unit: str
    interval: tuple[float, float, float]
    what: str
    estimates: Sequence[Estimate]
    tests: Sequence[LawTest]
    checks: Sequence[ParameterCheck] = ()
    findings: Sequence[str] = ()
    exceeded: str | None = None
    delta_at_claim: float | None = None


def conclude(family: str, ev: Evidence, draws: Draws, resolution: float) -> WhiteBoxResult:
    """The white-box verdict from the evidence (see :class:`WhiteBoxResult`)."""
    n, level, claim = draws.n, draws.level, ev.claim
    eps_hat, eps_lo, eps_hi = ev.interval
    interval = f"{ev.what} implies epsilon {eps_hat:.5g} [{eps_lo:.5g}, {eps_hi:.5g}]{ev.unit}"
    problems = list(ev.findings)
    wrong = [c.detail for c in ev.checks if not c.passed]
    if wrong:
        problems.append("the mechanism is not what its parameters say: " + "; ".join(wrong))
    failed = [t for t in ev.tests if not t.passed]
    if failed:
        problems.append(
            "noise is not the claimed law: "
            + "; ".join(f"{t.name} p={t.pvalue:.3g}" for t in failed)
        )
    if ev.exceeded is not None:
        problems.append(ev.exceeded)
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
        estimates=tuple(ev.estimates),
        tests=tuple(ev.tests),
        epsilon_estimate=eps_hat,
        epsilon_low=eps_lo,
        delta_at_claim=ev.delta_at_claim,
        verdict=verdict,
        reason=reason,
        epsilon_high=eps_hi,
        resolution=resolution,
        samples_needed=needed,
        checks=tuple(ev.checks),
    )
