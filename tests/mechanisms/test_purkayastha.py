r"""Purkayastha mechanism: the angle law, the tangent direction, the table's stated accuracy.

The angle theta between input and output has density proportional to
exp(-epsilon theta) sin^{d-2}(theta) on [0, pi]; the reference CDF is computed independently by
adaptive quadrature (``_laws.ExactAngleLaw``). The unit tangent direction
w = (y - cos(theta) x)/sin(theta) is uniform on the (d-2)-sphere orthogonal to x, so for a fixed
unit axis a orthogonal to x, (<w, a> + 1)/2 ~ Beta((d-2)/2, (d-2)/2).

Criteria (see ``_laws``): KS p > 1e-3; moments within 4.4 standard errors; fixed seeds. The
table test is deterministic: its tolerance is the accuracy the sampler itself states.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privembed import DataError, MetricDP, PureDP, PurkayasthaMechanism
from privembed.core import theory
from privembed.mechanisms.purkayastha import AngleTable

from ._laws import (
    K_SE,
    P_MIN,
    ExactAngleLaw,
    angles_to,
    assert_mean_within,
    ks_pvalue,
    unit_rows,
)

# (epsilon, d): the circle and the 2-sphere, where the density has a pole of sin at 0 (and pi),
# sentence-embedding dimensions, tiny and very large epsilon
GRID = [
    (1.0, 2),
    (50.0, 2),
    (1e4, 2),
    (0.5, 3),
    (10.0, 3),
    (1e4, 3),
    (2.0, 5),
    (1.0, 384),
    (10.0, 384),
    (1e3, 384),
    (1e4, 384),
    (5.0, 768),
]
#: the accuracy the sampler documents for these parameters (max relative density error, nats)
STATED_MAX_LOG_ERROR = 1e-5
#: relative tolerance of the reference quadrature
QUAD_TOL = 1e-9


@pytest.fixture(scope="module")
def exact_laws() -> dict[tuple[float, int], ExactAngleLaw]:
    return {}


def _law(cache: dict, epsilon: float, d: int) -> ExactAngleLaw:
    if (epsilon, d) not in cache:
        cache[(epsilon, d)] = ExactAngleLaw(epsilon, d)
    return cache[(epsilon, d)]


@pytest.mark.parametrize(("epsilon", "d"), GRID)
def test_angle_table_cdf_matches_exact_cdf(epsilon: float, d: int, exact_laws) -> None:
    """Deterministic: the sampler's CDF vs the independently integrated one.

    If the table's log-density is within ``eta = max_log_error`` nats of the true one, its CDF
    is within ``expm1(eta)`` of the true CDF everywhere; the mass the table drops in the far
    tails is below 1e-20. Tolerance: ``expm1(eta) + 1e-9`` (quadrature).
    """
    table = AngleTable(epsilon, d)
    eta = table.max_log_error
    assert 0.0 <= eta <= STATED_MAX_LOG_ERROR, f"stated accuracy not met: {eta:.3g} nats"
    # the table reaches pi, whatever epsilon: no input's sampler stops short of an angle the
    # antipode's sampler reaches (a cut breaks pure LDP; found by the white-box audit)
    assert table.edges[-1] == (math.pi if d == 2 else math.pi - 1e-10)
    law = _law(exact_laws, epsilon, d)
    lo, hi = table.edges[0], table.edges[table.core_cells]  # the core: the mass is there
    grid = np.unique(
        np.concatenate(
            [
                np.linspace(0.0, math.pi, 301),
                np.linspace(lo, hi, 301),
                # the first and last cells, where the density's log-sin pole bites
                np.linspace(table.edges[0], table.edges[64], 65),
                np.linspace(table.edges[table.core_cells - 64], hi, 65),
                law.mode + np.linspace(-1, 1, 41) * (hi - lo) / 20,
            ]
        )
    )
    grid = grid[(grid >= 0) & (grid <= math.pi)]
    err = np.abs(table.cdf_at(grid) - law.cdf(grid))
    worst = int(np.argmax(err))
    assert err[worst] <= math.expm1(eta) + QUAD_TOL, (
        f"|F_table - F_exact| = {err[worst]:.3g} at theta = {grid[worst]!r}"
    )


@pytest.mark.slow
@pytest.mark.parametrize(("epsilon", "d"), GRID)
def test_sampled_angles_follow_the_exact_law(epsilon: float, d: int, exact_laws) -> None:
    m = PurkayasthaMechanism(epsilon=epsilon)
    n = 4000
    X = unit_rows(np.random.default_rng(40 + d), n, d)
    theta = angles_to(X, m.privatize(X, rng=41))
    law = _law(exact_laws, epsilon, d)
    # KS of F_exact(theta) against U(0, 1): p > 1e-3
    p = ks_pvalue(law.cdf(theta))
    assert p > P_MIN, f"angle KS p = {p:.3g}"
    # E[cos theta] against the quadrature value and theory's closed form, 4.4 sample SEs
    assert_mean_within(np.cos(theta), law.mean_cos(), what="E[cos theta] (quad)")
    assert_mean_within(
        np.cos(theta), theory.expected_cosine_purkayastha(epsilon, d), what="E[cos theta]"
    )


def test_small_angles_near_the_pole_d3() -> None:
    """Mass of the first table cells (where sin has its pole) vs the exact law.

    For d = 3, P(theta < c) ~ (eps c)^2/2 for small c; a sampler that loses or misplaces the
    first cells under-samples it. Binomial count within 4.4 SE of n * P.
    """
    eps, d, n = 10.0, 3, 200_000
    law = ExactAngleLaw(eps, d)
    c = 0.02
    p = float(law.cdf(np.array([c]))[0])
    m = PurkayasthaMechanism(epsilon=eps)
    theta = angles_to(
        np.tile(np.eye(d)[0], (n, 1)), m.privatize(np.tile(np.eye(d)[0], (n, 1)), rng=47)
    )
    k = int(np.sum(theta < c))
    assert abs(k - n * p) <= K_SE * math.sqrt(n * p * (1 - p)), (k, n * p)


@pytest.mark.parametrize(("epsilon", "n"), [(50.0, 200_000), (1e4, 200_000)])
def test_small_angles_near_zero_d2(epsilon: float, n: int) -> None:
    """d = 2: theta is exponential(epsilon) truncated to [0, pi]; check P(theta < c) for c at
    0.5% of the mean, where a table that drops its first cell has no mass. Binomial, 4.4 SE."""
    c = 0.005 / epsilon
    p = -math.expm1(-epsilon * c) / -math.expm1(-epsilon * math.pi)
    m = PurkayasthaMechanism(epsilon=epsilon)
    X = unit_rows(np.random.default_rng(48), n, 2)
    k = int(np.sum(angles_to(X, m.privatize(X, rng=49)) < c))
    assert abs(k - n * p) <= K_SE * math.sqrt(n * p * (1 - p)), (k, n * p)


@pytest.mark.parametrize(("epsilon", "d"), [(5.0, 3), (20.0, 16), (200.0, 384)])
def test_tangent_direction_is_uniform(epsilon: float, d: int) -> None:
    n = 20_000 if d < 384 else 5_000
    rng = np.random.default_rng(42)
    x = unit_rows(rng, 1, d)[0]
    a = rng.standard_normal(d)
    a -= (a @ x) * x
    a /= np.linalg.norm(a)  # a fixed unit axis orthogonal to x
    Y = PurkayasthaMechanism(epsilon=epsilon).privatize(np.tile(x, (n, 1)), rng=43)
    c = Y @ x
    W = (Y - c[:, None] * x) / np.sqrt(np.maximum(1 - c**2, 0))[:, None]
    np.testing.assert_allclose(W @ x, 0.0, atol=1e-9)
    t = W @ a
    k = (d - 2) / 2.0
    p = ks_pvalue(stats.beta.cdf((t + 1) / 2, k, k))
    assert p > P_MIN, f"tangent direction KS p = {p:.3g}"
    # E[t^2] = 1/(d-1) on the (d-2)-sphere, exact sd of t^2 known
    m = d - 1
    assert_mean_within(t**2, 1.0 / m, sd=math.sqrt(3.0 / (m * (m + 2)) - 1.0 / m**2))


def test_circle_direction_is_a_fair_coin() -> None:
    n = 40_000
    x = np.array([0.6, 0.8])
    perp = np.array([-0.8, 0.6])
    Y = PurkayasthaMechanism(epsilon=3.0).privatize(np.tile(x, (n, 1)), rng=44)
    k = int(np.sum(Y @ perp > 0))
    assert abs(k - n / 2) <= K_SE * math.sqrt(n) / 2


def test_outputs_are_unit_even_without_renormalize() -> None:
    X = np.random.default_rng(45).standard_normal((100, 32)) * 7
    Y = PurkayasthaMechanism(epsilon=30.0, renormalize=False).privatize(X, rng=46)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 1.0, atol=1e-12)


def test_guarantee_angular_metric_and_pure_ldp() -> None:
    g = PurkayasthaMechanism(epsilon=3.0).guarantee
    assert isinstance(g, MetricDP) and g.epsilon == 3.0 and "angular" in g.metric
    (ldp,) = g.implied
    assert isinstance(ldp, PureDP) and ldp.epsilon == 3.0 * math.pi  # angles are <= pi


def test_one_dimension_is_rejected() -> None:
    with pytest.raises(DataError, match="dimension >= 2"):
        PurkayasthaMechanism(epsilon=1.0).privatize(np.ones((3, 1)), rng=0)


def test_expected_cosine_is_the_theory_value() -> None:
    m = PurkayasthaMechanism(epsilon=40.0)
    assert m.expected_cosine(384) == theory.expected_cosine_purkayastha(40.0, 384)
