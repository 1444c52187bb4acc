"""Every noise source gives every mechanism its exact law, at small and large dimensions.

The same law tests run over four ways of drawing noise: bulk draws from one generator per block
(fresh noise), per-row counter streams (seeded experiments), keyed Philox streams and keyed AES
streams (the release path). Small dimensions matter: a Laplace radius drawn with Gamma shape
d - 1 instead of d is almost invisible at d = 384 but obvious at d = 2
(``test_a_planted_radius_bug_is_caught_at_small_d``).

Criteria (tests/mechanisms/_laws.py): KS p-value > 1e-3 against the exact law; means within
4.4 standard errors; fixed seeds and a fixed key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy import stats

from privembed import (
    GaussianMechanism,
    LaplaceMechanism,
    MahalanobisMechanism,
    PurkayasthaMechanism,
)
from privembed.core.rng import GeneratorSource, as_generator
from privembed.mechanisms import Mechanism, PrivateProjection
from privembed.mechanisms import laplace as laplace_module
from privembed.release import Release

from ._laws import (
    K_SE,
    P_MIN,
    ExactAngleLaw,
    angles_to,
    assert_mean_within,
    check_radius_and_direction,
    ks_pvalue,
    unit_rows,
)

KEY = bytes(range(32))
DIMS = [2, 3, 16, 384]
SOURCES = ["bulk", "seeded", "keyed", "keyed-aes"]


def _release(mech: Mechanism, X: np.ndarray, source: str, seed: int) -> np.ndarray:
    """Protect X with the given kind of noise source (all with fixed seeds or a fixed key)."""
    if source == "bulk":
        return mech.privatize_rows(X, lambda s, e: GeneratorSource(as_generator(seed * 1000 + s)))
    if source == "seeded":
        return mech.privatize(X, rng=seed)
    ids = [f"r{seed}-{i}" for i in range(X.shape[0])]
    gen = "aes" if source == "keyed-aes" else "philox"
    with Release(mech, key=KEY, generator=gen) as rel:
        return rel.protect(X, ids)


def _n(d: int, source: str) -> int:
    n = 4000 if d < 384 else 1500
    return n // 2 if source == "keyed-aes" else n


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("d", DIMS)
def test_gaussian_noise_is_iid_normal(source: str, d: int) -> None:
    m = GaussianMechanism(epsilon=4.0, delta=1e-5, renormalize=False)
    rng = np.random.default_rng(100 + d)
    X = unit_rows(rng, _n(d, source), d)
    Z = _release(m, X, source, seed=d) - X
    z = Z.ravel()[:60_000] / m.sigma
    p = ks_pvalue(stats.norm.cdf(z))
    assert p > P_MIN, f"coordinates: KS p = {p:.3g}"
    # per-row squared norm / sigma^2 ~ chi2(d): KS, catches rows that reuse draws
    q = np.einsum("ij,ij->i", Z, Z) / m.sigma**2
    p_q = ks_pvalue(stats.chi2.cdf(q, d))
    assert p_q > P_MIN, f"row norms: KS p = {p_q:.3g}"
    assert_mean_within(q, d, sd=math.sqrt(2 * d), what="E|Z|^2 / sigma^2")


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("d", DIMS)
def test_laplace_noise_is_l2_laplace(source: str, d: int) -> None:
    eps = {2: 2.0, 3: 3.0, 16: 10.0, 384: 100.0}[d]
    m = LaplaceMechanism(epsilon=eps, renormalize=False)
    rng = np.random.default_rng(200 + d)
    X = unit_rows(rng, _n(d, source), d)
    Z = _release(m, X, source, seed=d + 1) - X
    check_radius_and_direction(Z, eps, unit_rows(rng, 1, d)[0], what=f"{source}, d={d}")


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("d", DIMS)
def test_mahalanobis_whitened_noise_is_l2_laplace(source: str, d: int) -> None:
    eps = {2: 2.0, 3: 3.0, 16: 10.0, 384: 100.0}[d]
    mask = (np.arange(d) % 2 == 0).astype(float)
    m = MahalanobisMechanism(epsilon=eps, mask=mask, mask_delta=0.05, renormalize=False)
    rng = np.random.default_rng(300 + d)
    X = unit_rows(rng, _n(d, source), d)
    Z = _release(m, X, source, seed=d + 2) - X
    S = m.covariance_diagonal
    assert S is not None and math.isclose(float(S.sum()), d, rel_tol=1e-12)  # trace d
    W = Z / np.sqrt(S)
    check_radius_and_direction(W, eps, unit_rows(rng, 1, d)[0], what=f"{source}, d={d}")


_ANGLE_LAWS: dict[tuple[float, int], ExactAngleLaw] = {}


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("d", DIMS)
def test_purkayastha_angles_follow_the_exact_law(source: str, d: int) -> None:
    eps = {2: 2.0, 3: 4.0, 16: 30.0, 384: 400.0}[d]
    m = PurkayasthaMechanism(epsilon=eps)
    rng = np.random.default_rng(400 + d)
    X = unit_rows(rng, min(_n(d, source), 1500), d)
    theta = angles_to(X, _release(m, X, source, seed=d + 3))
    law = _ANGLE_LAWS.setdefault((eps, d), ExactAngleLaw(eps, d))
    p = ks_pvalue(law.cdf(theta))
    assert p > P_MIN, f"angle KS p = {p:.3g}"
    assert_mean_within(np.cos(theta), law.mean_cos(), what="E[cos theta]")


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("d", [3, 16, 384])
def test_projection_noise_is_iid_normal(source: str, d: int) -> None:
    k = 2 if d == 3 else 8
    m = PrivateProjection(k=k, epsilon=3.0, delta=1e-5, input_dim=d)
    rng = np.random.default_rng(500 + d)
    X = unit_rows(rng, _n(d, source), d)
    Z = (_release(m, X, source, seed=d + 4) - m.project(X)) / m.sigma
    p = ks_pvalue(stats.norm.cdf(Z.ravel()))
    assert p > P_MIN, f"KS p = {p:.3g}"
    q = np.einsum("ij,ij->i", Z, Z)
    assert_mean_within(q, k, sd=math.sqrt(2 * k), what="E|Z|^2 / sigma^2")


@pytest.mark.parametrize("source", ["seeded", "keyed"])
def test_rows_are_independent(source: str) -> None:
    """Adjacent records' noise is uncorrelated (no stream overlap between rows)."""
    d, n = 16, 3000
    m = GaussianMechanism(epsilon=4.0, delta=1e-5, renormalize=False)
    X = np.tile(np.eye(d)[0], (n, 1))
    Z = _release(m, X, source, seed=9) - X
    for lag in (1, 2, 7):
        r = float(np.corrcoef(Z[:-lag].ravel(), Z[lag:].ravel())[0, 1])
        assert abs(r) < K_SE / math.sqrt(Z[lag:].size), (lag, r)


def _planted_gamma_shape_minus_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def bad(source: Any, n: int, d: int, epsilon: float) -> np.ndarray:
        u = source.normal(n, d)
        r = source.gamma(float(d - 1), n) / epsilon  # the planted bug: shape d - 1
        u *= (r / np.sqrt(np.einsum("ij,ij->i", u, u)))[:, None]
        return u

    monkeypatch.setattr(laplace_module, "sample_l2_laplace", bad)


@pytest.mark.parametrize("source", ["bulk", "seeded", "keyed"])
def test_a_planted_radius_bug_is_caught_at_small_d(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The law test above fails for a Laplace radius with Gamma shape d - 1, on every source."""
    _planted_gamma_shape_minus_one(monkeypatch)
    check: Callable[[], None] = lambda: test_laplace_noise_is_l2_laplace(source, 2)  # noqa: E731
    with pytest.raises(AssertionError, match="radius"):
        check()
