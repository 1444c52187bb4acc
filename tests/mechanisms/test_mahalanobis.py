"""Mahalanobis mechanism: whitened noise is l2 Laplace, Sigma's normalisation and smoothing.

Z = Y Sigma^{1/2} u with Y ~ Gamma(d, 1/epsilon), u uniform: the whitened noise
W = Sigma^{-1/2} Z has the l2 Laplace law (radius Gamma(d, 1/epsilon), uniform direction), and
E[Z Z^T] = E[Y^2]/d * Sigma = (d+1)/epsilon^2 * Sigma. Sigma is the trace-d normalisation of
the given covariance / diag(mask + delta), smoothed as lambda I + (1 - lambda) Sigma and
renormalised to trace d ([T26] Alg. 1, [F26] eq. 6). The reference Sigma here is computed
independently from those formulas, not read back from the mechanism.

Criteria (see ``_laws``): KS p > 1e-3; moments within 4.4 standard errors; fixed seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privembed import DataError, LaplaceMechanism, MahalanobisMechanism, MetricDP, PureDP
from privembed.mechanisms.mahalanobis import covariance_from_mask, smooth_covariance

from ._laws import K_SE, check_radius_and_direction, unit_rows


def _spd(d: int, seed: int) -> np.ndarray:
    B = np.random.default_rng(seed).standard_normal((d, d))
    return B @ B.T / d + 0.2 * np.eye(d)


def _reference_sigma(cov: np.ndarray, smoothing: float) -> np.ndarray:
    """Trace-d normalisation, smoothing, renormalisation -- from the formulas, as a full matrix."""
    S = np.diag(cov) if cov.ndim == 1 else cov
    d = S.shape[0]
    S = S * d / np.trace(S)
    S = smoothing * np.eye(d) + (1 - smoothing) * S
    return S * d / np.trace(S)


def _inv_sqrt(S: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh(S)
    return (V / np.sqrt(w)) @ V.T


D = 8
CASES = {
    "diagonal": (np.linspace(0.2, 5.0, D), 0.0),
    "diagonal-smoothed": (np.linspace(0.2, 5.0, D), 0.4),
    "full": (_spd(D, 20), 0.0),
    "full-smoothed": (_spd(D, 21), 0.3),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_whitened_noise_is_l2_laplace(case: str) -> None:
    cov, lam = CASES[case]
    eps = 3.0
    m = MahalanobisMechanism(epsilon=eps, covariance=cov, smoothing=lam, renormalize=False)
    n = 20_000
    rng = np.random.default_rng(22)
    X = unit_rows(rng, n, D)
    Z = m.privatize(X, rng=23) - X
    S = _reference_sigma(cov, lam)
    W = Z @ _inv_sqrt(S)  # Sigma^{-1/2} z for each row (Sigma symmetric)
    check_radius_and_direction(W, eps, unit_rows(rng, 1, D)[0], what=case)
    # second moments: E[Z_j^2] = (d+1)/eps^2 * Sigma_jj, each within 4.4 sample SEs
    z2 = Z**2
    se = z2.std(axis=0, ddof=1) / math.sqrt(n)
    dev = (z2.mean(axis=0) - (D + 1) / eps**2 * np.diag(S)) / se
    assert np.abs(dev).max() < K_SE, dev


def test_mask_covariance_in_the_mechanism() -> None:
    mask = np.array([1, 1, 0.5, 0, 0, 0, 0, 1.0])
    m = MahalanobisMechanism(epsilon=2.0, mask=mask, mask_delta=0.05, renormalize=False)
    S = np.diag((mask + 0.05) * D / (mask + 0.05).sum())
    np.testing.assert_allclose(np.diag(m.covariance_diagonal), S, rtol=1e-13)
    n = 20_000
    rng = np.random.default_rng(24)
    X = unit_rows(rng, n, D)
    W = (m.privatize(X, rng=25) - X) / np.sqrt(np.diag(S))
    check_radius_and_direction(W, 2.0, unit_rows(rng, 1, D)[0], what="mask")


def test_covariance_from_mask_formula() -> None:
    m = np.array([1.0, 0.5, 0.0, 0.0])
    got = covariance_from_mask(m, delta=0.01)
    np.testing.assert_allclose(got, (m + 0.01) * 4 / (m + 0.01).sum(), rtol=1e-15)
    assert math.isclose(got.sum(), 4.0, rel_tol=1e-15)
    np.testing.assert_array_equal(covariance_from_mask([1, 0, 0, 1], delta=0.0), [2, 0, 0, 2])


@pytest.mark.parametrize("lam", [0.0, 0.25, 1.0])
def test_smoothing_formula(lam: float) -> None:
    diag = np.array([0.1, 0.2, 3.0, 0.7])
    diag = diag * 4 / diag.sum()
    expected = (lam + (1 - lam) * diag) * 4 / (lam * 4 + (1 - lam) * diag.sum())
    np.testing.assert_allclose(smooth_covariance(diag, lam), expected, rtol=1e-14)
    full = _spd(4, 26)
    full = full * 4 / np.trace(full)
    F = smooth_covariance(full, lam)
    np.testing.assert_allclose(F, _reference_sigma(full, lam), rtol=1e-13)
    assert math.isclose(np.trace(F), 4.0, rel_tol=1e-14)
    if lam == 1.0:
        np.testing.assert_allclose(F, np.eye(4), atol=1e-15)


@pytest.mark.parametrize("case", sorted(CASES))
def test_sigma_is_trace_normalised(case: str) -> None:
    cov, lam = CASES[case]
    m = MahalanobisMechanism(epsilon=1.0, covariance=cov, smoothing=lam)
    S = _reference_sigma(cov, lam)
    np.testing.assert_allclose(m.covariance_diagonal, np.diag(S), rtol=1e-12)
    assert math.isclose(m.covariance_diagonal.sum(), D, rel_tol=1e-13)
    w = np.linalg.eigvalsh(S)
    np.testing.assert_allclose(m.eigenvalue_range, (w.min(), w.max()), rtol=1e-10)
    # the total noise power equals the isotropic Laplace mechanism's
    assert m.expected_noise_norm_sq(D) == D * (D + 1) / 1.0


def test_covariance_scale_does_not_matter() -> None:
    cov = _spd(D, 27)
    X = unit_rows(np.random.default_rng(28), 50, D)
    a = MahalanobisMechanism(epsilon=5.0, covariance=cov).privatize(X, rng=29)
    b = MahalanobisMechanism(epsilon=5.0, covariance=7.5 * cov).privatize(X, rng=29)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_diagonal_given_as_matrix_equals_diagonal() -> None:
    diag = np.linspace(0.5, 2.0, D)
    X = unit_rows(np.random.default_rng(30), 50, D)
    a = MahalanobisMechanism(epsilon=5.0, covariance=diag).privatize(X, rng=31)
    b = MahalanobisMechanism(epsilon=5.0, covariance=np.diag(diag)).privatize(X, rng=31)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_identity_sigma_is_the_laplace_mechanism() -> None:
    X = unit_rows(np.random.default_rng(32), 100, D)
    for kw in ({}, {"covariance": np.ones(D)}, {"smoothing": 1.0, "covariance": _spd(D, 33)}):
        a = MahalanobisMechanism(epsilon=4.0, **kw).privatize(X, rng=34)
        b = LaplaceMechanism(epsilon=4.0).privatize(X, rng=34)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_guarantee_reports_mahalanobis_and_euclidean_epsilon() -> None:
    diag = np.array([4.0, 1.0, 1.0, 0.25, 1.0, 1.0, 1.0, 1.0])
    m = MahalanobisMechanism(epsilon=2.0, covariance=diag)
    S = diag * D / diag.sum()
    g = m.guarantee
    assert isinstance(g, MetricDP) and g.epsilon == 2.0 and "Mahalanobis" in g.metric
    l2, ldp = g.implied
    assert isinstance(l2, MetricDP) and l2.metric == "l2"
    assert math.isclose(l2.epsilon, 2.0 / math.sqrt(S.min()), rel_tol=1e-12)  # worst direction
    assert f"{2.0 / math.sqrt(S.max()):.4g}" in l2.note  # best direction
    assert isinstance(ldp, PureDP) and math.isclose(ldp.epsilon, 2 * l2.epsilon, rel_tol=1e-12)
    # identity Sigma: the plain l2 guarantee of the Laplace mechanism
    gi = MahalanobisMechanism(epsilon=2.0).guarantee
    assert gi.epsilon == 2.0 and gi.implied[0].epsilon == 4.0
    # no bounded domain: no implied LDP
    gn = MahalanobisMechanism(epsilon=2.0, covariance=diag, input_norm="none").guarantee
    assert [type(x) for x in gn.implied] == [MetricDP]


def test_dimension_mismatch_raises() -> None:
    m = MahalanobisMechanism(epsilon=1.0, covariance=np.ones(D))
    with pytest.raises(DataError, match="dimension mismatch"):
        m.privatize(np.ones((3, D + 1)), rng=0)


def test_from_profile(tmp_path) -> None:
    mask = (np.arange(D) % 2).astype(float)
    np.savez(tmp_path / "p.npz", mask=mask)
    np.save(tmp_path / "m.npy", mask)
    a = MahalanobisMechanism.from_profile(tmp_path / "p.npz", epsilon=3.0)
    b = MahalanobisMechanism.from_profile(tmp_path / "m.npy", epsilon=3.0)
    c = MahalanobisMechanism(epsilon=3.0, mask=mask)
    assert a.fingerprint == b.fingerprint == c.fingerprint
    np.savez(tmp_path / "bad.npz", other=mask)
    with pytest.raises(DataError, match="has no 'mask' array"):
        MahalanobisMechanism.from_profile(tmp_path / "bad.npz", epsilon=3.0)
    with pytest.raises(FileNotFoundError):
        MahalanobisMechanism.from_profile(tmp_path / "missing.npz", epsilon=3.0)
