"""The private subspace: the basis step, the noise laws in k dimensions, DP-PCA, the composed
guarantee, the ledger charge of a DP-PCA basis, and attacks on each.

Criteria (see ``_laws``): KS p > 1e-3 against the exact law; moments within 4.4 standard errors
of the exact value; fixed seeds throughout.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privembed import DataError
from privembed.audit import audit, whitebox_check
from privembed.core import theory
from privembed.core.accounting import ApproxDP, MetricDP, PureDP, UnsupportedGuarantee
from privembed.keys.ledger import BudgetExceeded, Ledger, record_key
from privembed.mechanisms import build_mechanism
from privembed.mechanisms.subspace import (
    SecondMoments,
    SubspaceBasis,
    SubspaceMechanism,
    charge_basis,
    dp_pca,
    dp_pca_sensitivity,
    subspace_dimension,
)

from ._laws import (
    P_MIN,
    ExactAngleLaw,
    angles_to,
    assert_mean_within,
    check_radius_and_direction,
    ks_pvalue,
    unit_rows,
)

D = 24


def _basis(k: int = 6, d: int = D, seed: int = 0) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((d, k)))[0].T


def _anisotropic(n: int, d: int = D, seed: int = 1) -> np.ndarray:
    scales = np.r_[np.linspace(4.0, 2.0, 4), np.full(d - 4, 0.5)]
    return np.random.default_rng(seed).standard_normal((n, d)) * scales + 0.3


# ---- the basis step: a contraction ------------------------------------------------------------
def test_basis_rows_are_orthonormal_and_the_step_is_a_contraction() -> None:
    X = _anisotropic(2000)
    b = SubspaceBasis.from_embeddings(X)
    P = b.components
    np.testing.assert_allclose(P @ P.T, np.eye(P.shape[0]), atol=1e-10)
    assert np.linalg.norm(P, 2) <= 1.0 + 1e-12  # rounding of the SVD (the audit allows 1e-9)
    m = SubspaceMechanism(basis=b, epsilon=5.0, k=5)
    # white box: the mechanism's own matrix, and the step's Lipschitz constant on many pairs
    assert np.linalg.svd(m.basis, compute_uv=False).max() <= 1.0 + 1e-12
    U = unit_rows(np.random.default_rng(2), 4000, D)
    V = unit_rows(np.random.default_rng(3), 4000, D)
    num = np.linalg.norm(m.public_transform(U) - m.public_transform(V), axis=1)
    assert np.all(num <= np.linalg.norm(U - V, axis=1) * (1 + 1e-12))


def test_rounding_above_one_is_scaled_away() -> None:
    P = _basis(4) * (1 + 2e-7)  # orthonormal within tolerance, ||P||_2 slightly above 1
    m = SubspaceMechanism(basis=P, epsilon=3.0)
    assert np.linalg.norm(m.basis, 2) <= 1.0


def test_a_stretching_basis_is_refused() -> None:
    with pytest.raises(DataError, match=r"orthonormal \(P P\^T = I\)"):
        SubspaceMechanism(basis=_basis(4) * 1.5, epsilon=3.0)


def test_public_transform_is_the_centred_projection_of_the_normalised_input() -> None:
    P, mu = _basis(5), np.linspace(-0.1, 0.1, D)
    m = SubspaceMechanism(basis=P, mean=mu, epsilon=3.0)
    X = _anisotropic(7)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_allclose(m.public_transform(X), (U - mu) @ P.T, rtol=1e-12, atol=1e-14)
    assert m.output_dim(D) == 5 and m.privatize(X, rng=0).shape == (7, 5)
    with pytest.raises(DataError, match="dimension mismatch"):
        m.privatize(np.ones((2, D + 1)), rng=0)


# ---- the noise laws in k dimensions ---------------------------------------------------------------
@pytest.mark.parametrize(("epsilon", "k"), [(2.0, 3), (50.0, 16)])
def test_laplace_noise_in_k_dimensions(epsilon: float, k: int) -> None:
    m = SubspaceMechanism(
        basis=_basis(k), mean=np.full(D, 0.05), epsilon=epsilon, renormalize=False
    )
    X = unit_rows(np.random.default_rng(4), 20_000, D)
    Z = m.privatize(X, rng=5) - m.public_transform(X)
    check_radius_and_direction(Z, epsilon, np.eye(k)[0], what=f"subspace eps={epsilon}, k={k}")


def test_gaussian_noise_in_k_dimensions_is_calibrated_at_sensitivity_2() -> None:
    m = SubspaceMechanism(
        basis=_basis(8), epsilon=3.0, delta=1e-5, noise="gaussian", renormalize=False
    )
    assert m.sigma == theory.analytic_gaussian_sigma(3.0, 1e-5, 2.0)
    X = unit_rows(np.random.default_rng(6), 20_000, D)
    Z = (m.privatize(X, rng=7) - m.public_transform(X)).ravel()
    assert ks_pvalue(stats.norm.cdf(Z / m.sigma)) > P_MIN
    # E[z^2] = sigma^2, exact sd of z^2 is sqrt(2) sigma^2
    assert_mean_within(Z**2, m.sigma**2, sd=math.sqrt(2) * m.sigma**2, what="E z^2")


def test_classic_gaussian_in_k_dimensions_reports_the_delta_it_achieves() -> None:
    # the classic sigma at sensitivity 2 under-noises at epsilon = 50: the guarantee (what the
    # ledger charges) states the exact delta of that sigma, as GaussianMechanism's does
    m = SubspaceMechanism(
        basis=_basis(8), epsilon=50.0, delta=1e-5, noise="gaussian", calibration="classic"
    )
    assert m.sigma == theory.classic_gaussian_sigma(50.0, 1e-5, 2.0)
    g = m.guarantee
    assert g.delta == pytest.approx(theory.analytic_gaussian_delta(m.sigma, 50.0, 2.0), rel=1e-12)
    assert g.delta > 0.5 and "under-noises" in g.note and g.noise_multiplier == m.sigma / 2.0
    # below epsilon 1 the classic sigma over-noises and the requested delta stands
    low = SubspaceMechanism(
        basis=_basis(8), epsilon=0.5, delta=1e-5, noise="gaussian", calibration="classic"
    )
    assert low.guarantee.delta == 1e-5


@pytest.mark.parametrize(("epsilon", "k"), [(5.0, 4), (40.0, 24)])
def test_purkayastha_angle_law_in_k_dimensions(epsilon: float, k: int) -> None:
    mu = np.full(D, 0.05)
    m = SubspaceMechanism(basis=_basis(k), mean=mu, epsilon=epsilon, noise="purkayastha")
    X = unit_rows(np.random.default_rng(8), 20_000, D)
    V = m.public_transform(X)
    U = V / np.linalg.norm(V, axis=1, keepdims=True)
    Y = m.privatize(X, rng=9)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 1.0, atol=1e-12)
    theta = angles_to(U, Y)
    law = ExactAngleLaw(epsilon, k)
    assert ks_pvalue(law.cdf(theta)) > P_MIN
    assert_mean_within(np.cos(theta), law.mean_cos(), what="E cos theta")


def test_purkayastha_handles_a_zero_projection() -> None:
    P = _basis(4)
    x = np.linalg.qr(np.c_[P.T, np.random.default_rng(1).standard_normal(D)])[0][:, -1]
    m = SubspaceMechanism(basis=P, epsilon=10.0, noise="purkayastha")
    assert np.allclose(m.public_transform(x), 0.0, atol=1e-12)  # x is orthogonal to the basis
    y = m.privatize(x, rng=3)
    assert np.isfinite(y).all() and abs(np.linalg.norm(y) - 1.0) < 1e-12


# ---- guarantees -----------------------------------------------------------------------------------
def test_guarantees_state_the_per_record_charge_of_each_noise() -> None:
    P = _basis(6)
    lap = SubspaceMechanism(basis=P, epsilon=50.0)
    g = lap.guarantee
    assert isinstance(g, MetricDP) and g.metric == "l2" and g.epsilon == 50.0
    assert g.implied == (PureDP(100.0, neighbouring="any two unit vectors"),)
    assert "public data" in g.note
    gauss = SubspaceMechanism(basis=P, epsilon=4.0, delta=1e-6, noise="gaussian")
    assert isinstance(gauss.guarantee, ApproxDP)
    assert gauss.guarantee.noise_multiplier == pytest.approx(gauss.sigma / 2.0)
    purk = SubspaceMechanism(basis=P, epsilon=30.0, noise="purkayastha")
    assert purk.guarantee.implied[0].epsilon == pytest.approx(30.0 * math.pi)
    assert purk.guarantee.metric.startswith("angular (great-circle distance between the centred")
    none = SubspaceMechanism(basis=P, epsilon=5.0, input_norm="none")
    with pytest.raises(UnsupportedGuarantee):  # unbounded inputs: no per-record charge
        from privembed.core.accounting import cost_of

        cost_of(none.guarantee)


def test_composed_guarantee_basic_for_laplace_and_pld_for_gaussian() -> None:
    P = _basis(6)
    lap = SubspaceMechanism(basis=P, epsilon=50.0, basis_epsilon=1.0, basis_delta=1e-5)
    g = lap.composed_guarantee()
    assert (g.epsilon, g.delta) == (101.0, 1e-5)
    assert lap.composed_guarantee(releases=3).epsilon == pytest.approx(301.0)
    public = SubspaceMechanism(basis=P, epsilon=50.0)
    assert public.composed_guarantee().epsilon == 100.0
    # Gaussian noise and a Gaussian DP-PCA basis compose by PLD: cross-checked against
    # dp_accounting directly (an independent composition of the two Gaussian events)
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting import pld

    gauss = SubspaceMechanism(
        basis=P,
        epsilon=2.0,
        delta=1e-6,
        noise="gaussian",
        basis_epsilon=1.0,
        basis_delta=1e-6,
        basis_noise_multiplier=3.9,
    )
    acc = pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dpa.GaussianDpEvent(gauss.sigma / 2.0))
    acc.compose(dpa.GaussianDpEvent(3.9))
    ref = acc.get_epsilon(1e-5)
    got = gauss.composed_guarantee(delta=1e-5)
    # the ledger composes Gaussians in closed form (one Gaussian of mu = sqrt(sum mu_i^2)):
    # exact, so at most the PLD accountant's pessimistic discretised value and within 1e-5
    mu = math.hypot(2.0 / gauss.sigma, 1.0 / 3.9)
    assert got.epsilon == pytest.approx(theory.analytic_gaussian_epsilon(1.0 / mu, 1e-5, 1.0),
                                        rel=1e-9)  # fmt: skip
    assert got.epsilon <= ref and got.epsilon == pytest.approx(ref, rel=1e-5)
    assert got.delta == 1e-5
    assert got.epsilon < 2.0 + theory.analytic_gaussian_epsilon(
        3.9, 1e-6, 1.0
    )  # tighter than basic


def test_basis_provenance_travels_with_the_basis_and_cannot_be_contradicted(tmp_path) -> None:
    X = _anisotropic(3000)
    b = dp_pca(X, epsilon=1.0, delta=1e-5, rng=0)
    path = b.save(tmp_path / "basis.npz")
    m = build_mechanism("subspace", basis=str(path), epsilon=20.0, k=4)
    assert (m.basis_epsilon, m.basis_delta) == (1.0, 1e-5)
    assert m.basis_noise_multiplier == pytest.approx(b.guarantee.noise_multiplier)
    assert "DP-PCA" in m.guarantee.describe()
    with pytest.raises(
        ValueError, match=r"the basis records basis_epsilon=1\.0, got basis_epsilon=0\.5"
    ):
        SubspaceMechanism(basis=b, epsilon=20.0, basis_epsilon=0.5)
    # the configuration records arrays by digest only (the mean too) and rebuilds with them
    cfg = m.config
    assert set(cfg["basis"]) == {"sha256", "shape"} and set(cfg["mean"]) == {"sha256", "shape"}
    with pytest.raises(ValueError, match="records basis only by its SHA-256"):
        build_mechanism(**cfg)
    again = build_mechanism(**{**cfg, "basis": m.basis, "mean": m.mean})
    assert again.config == cfg and again.fingerprint == m.fingerprint


# ---- DP-PCA ---------------------------------------------------------------------------------------
def test_dp_pca_sensitivity_bounds_every_replacement_and_is_nearly_attained() -> None:
    """White box: the l2 change of (a sum, upper(M)) over many replacements, including the
    analytic worst case c = -a^2/2, never exceeds the stated sensitivity."""
    rng = np.random.default_rng(20)
    d = 6
    iu = np.triu_indices(d)
    for a in (0.0, 0.25, 1.0, 2.0):
        sens = dp_pca_sensitivity(a)

        def change(x, y, a=a):
            return math.sqrt(
                np.sum((a * (x - y)) ** 2) + np.sum((np.outer(x, x) - np.outer(y, y))[iu] ** 2)
            )

        X = unit_rows(rng, 20_000, d)
        Y = unit_rows(rng, 20_000, d)
        worst = max(change(x, y) for x, y in zip(X, Y, strict=True))
        c = max(-1.0, -(a * a) / 2.0)
        x = np.eye(d)[0]
        y = c * np.eye(d)[0] + math.sqrt(1 - c * c) * np.eye(d)[1]
        worst = max(worst, change(x, y), change(x, -x))
        assert worst <= sens * (1 + 1e-12), (a, worst, sens)
        assert worst >= 0.97 * sens, (a, worst, sens)  # the bound is nearly tight


def test_dp_pca_noise_law_distribution_and_moments() -> None:
    """The released sum and upper triangle minus the exact ones are i.i.d. N(0, sigma^2)
    (the sum's noise scaled by 1/a), and the matrix noise is symmetric."""
    d, a = 10, 0.25
    acc = SecondMoments(d)
    acc.add(_anisotropic(500, d))
    iu = np.triu_indices(d)
    upper, total = [], []
    for seed in range(400):
        r = acc.release(epsilon=1.0, delta=1e-5, mean_weight=a, rng=seed)
        E = r.outer - acc.outer
        np.testing.assert_array_equal(E, E.T)
        upper.append(E[iu])
        total.append((r.total - acc.total) * a)
    sigma = theory.analytic_gaussian_sigma(1.0, 1e-5, dp_pca_sensitivity(a))
    assert r.sigma == sigma
    for name, Z in (("upper triangle", np.concatenate(upper)), ("sum", np.concatenate(total))):
        assert ks_pvalue(stats.norm.cdf(Z / sigma)) > P_MIN, name
        assert_mean_within(Z, 0.0, sd=sigma, what=f"{name} mean")
        assert_mean_within(Z**2, sigma**2, sd=math.sqrt(2) * sigma**2, what=f"{name} variance")


def test_dp_pca_recovers_a_strong_subspace_and_reports_its_guarantee() -> None:
    X = _anisotropic(40_000)
    b = dp_pca(X, epsilon=1.0, delta=1e-5, rng=1, max_components=8)
    exact = SubspaceBasis.from_embeddings(X, max_components=4)
    # principal angles between the top-4 subspaces: cosines near 1
    s = np.linalg.svd(b.components[:4] @ exact.components.T, compute_uv=False)
    assert s.min() > 0.99
    g = b.guarantee
    assert (g.epsilon, g.delta) == (1.0, 1e-5) and g.relation.value == "record"
    assert b.noise_floor > 0 and b.n_records == 40_000
    with pytest.raises(DataError, match="at least 2 records"):
        dp_pca(X[:1], epsilon=1.0, delta=1e-5)


def test_dp_pca_does_not_reveal_a_record_by_its_mean_or_basis() -> None:
    """Attack: insert one distinctive record and try to see it in the released basis/mean.

    With the noise of (1, 1e-5)-DP the released mean moves by far more than one record can
    move it: the attacker's estimate of the record's presence (inner product of the mean
    difference with the record) is buried in noise, measured over repeated releases."""
    d = 12
    base = _anisotropic(2000, d)
    target = np.zeros(d)
    target[-1] = 1.0  # a direction no other record uses much
    with_t = np.vstack([base[:-1], target])
    scores = {True: [], False: []}
    for seed in range(60):
        for present, data in ((True, with_t), (False, base)):
            b = dp_pca(data, epsilon=1.0, delta=1e-5, rng=1000 + seed)
            scores[present].append(float(b.mean @ target))
    gap = np.mean(scores[True]) - np.mean(scores[False])
    spread = np.std(scores[True] + scores[False])
    assert abs(gap) < 1.0 * spread  # the presence shift is within the noise


def test_subspace_dimension_balances_noise_and_signal_energy() -> None:
    lam = 0.02 * 0.93 ** np.arange(200)
    S = np.cumsum(lam)
    ks = [subspace_dimension(lam, noise="laplace", epsilon=e) for e in (10, 50, 200, 1000)]
    assert ks == sorted(ks) and ks[0] < ks[-1]
    for e, k in zip((10, 50, 200, 1000), ks, strict=True):
        if k < lam.size:  # the smallest k whose noise energy k(k+1)/eps^2 reaches S(k)
            assert k * (k + 1) / e**2 >= S[k - 1] and (k - 1) * k / e**2 < S[k - 2]
    capped = subspace_dimension(lam, noise="laplace", epsilon=1000, noise_floor=lam[10] / 2)
    assert capped <= 11
    for sigma in (0.05, 0.1):  # Gaussian noise energy k sigma^2
        k = subspace_dimension(lam, noise="gaussian", epsilon=1.0, sigma=sigma)
        assert k * sigma**2 >= S[k - 1] and (k == 1 or (k - 1) * sigma**2 < S[k - 2])
    # Purkayastha: the first k whose expected cosine falls to 1/sqrt(2)
    k = subspace_dimension(lam, noise="purkayastha", epsilon=50.0)
    assert theory.expected_cosine_purkayastha(50.0, k) <= 2**-0.5
    assert theory.expected_cosine_purkayastha(50.0, k - 1) > 2**-0.5
    m = SubspaceMechanism(basis=SubspaceBasis(np.eye(200), spectrum=lam), epsilon=50.0)
    assert m.k == ks[1]


# ---- the ledger ------------------------------------------------------------------------------------
def test_the_basis_charge_reaches_every_record_and_composes_with_releases(tmp_path) -> None:
    from privembed.release import Release

    X = _anisotropic(300)
    ids = [f"doc{i}" for i in range(300)]
    b = dp_pca(X, epsilon=1.0, delta=1e-5, rng=2)
    with Ledger(tmp_path / "l.db") as led:
        out = charge_basis(led, b, ids)
        assert out == {"records": 300, "fresh": 300, "free": 0, "batch": out["batch"]}
        spent = {s.record_id: s for s in led.spent()}
        assert set(spent) == {record_key(i) for i in ids}
        assert all(
            s.epsilon
            == pytest.approx(
                theory.analytic_gaussian_epsilon(
                    b.guarantee.noise_multiplier, led.report_delta, 1.0
                ),
                rel=1e-3,
            )
            for s in spent.values()
        )
        # the same basis charged again (a saved basis reused) is the same release: free
        again = charge_basis(led, b, ids)
        assert again["fresh"] == 0 and again["free"] == 300
        # a record's protected release composes with the basis charge
        m = SubspaceMechanism(basis=b, epsilon=5.0, k=4)
        with Release(m, ledger=led) as rel:
            rel.protect(X[:10], ids=ids[:10])
        s0 = next(s for s in led.spent([ids[0]]))
        s9 = next(s for s in led.spent([ids[299]]))
        assert s0.epsilon > s9.epsilon + 9.99  # 2 * 5 on top of the basis' share
        summary = led.summary()
        assert any(
            c["mechanism"]["mechanism"] == "subspace-basis" for c in summary["configurations"]
        )


def test_the_basis_charge_is_refused_over_budget_and_needs_every_record(tmp_path) -> None:
    X = _anisotropic(100)
    b = dp_pca(X, epsilon=1.0, delta=1e-5, rng=3)
    with Ledger(tmp_path / "l.db") as led:
        led.set_budget(epsilon=0.5, delta=1e-5)
        with pytest.raises(BudgetExceeded):
            charge_basis(led, b, range(100))
        assert led.spent() == []
    with Ledger(tmp_path / "l2.db") as led:
        with pytest.raises(DataError, match="computed from 100 records but 99 ids"):
            charge_basis(led, b, range(99))
        assert led.spent() == []
    with pytest.raises(ValueError, match="public basis costs no privacy"):
        charge_basis(None, SubspaceBasis.from_embeddings(X), range(100))


# ---- audits (the composed mechanism) and planted bugs -------------------------------------------------
FAST = {"samples": 20_000, "whitebox_samples": 20_000}


@pytest.mark.parametrize(
    "params",
    [
        {"epsilon": 1.0},
        {"epsilon": 2.0, "delta": 1e-5, "noise": "gaussian"},
        {"epsilon": 1.0, "noise": "purkayastha"},
    ],
    ids=["laplace", "gaussian", "purkayastha"],
)
def test_the_composed_mechanism_audits_below_its_claim(params) -> None:
    m = SubspaceMechanism(basis=_basis(4, 8), mean=np.full(8, 0.05), **params)
    r = audit(m, dim=8, rng=11, **FAST)
    assert r.verdict == "consistent" and r.epsilon_lower < r.claimed_epsilon, r
    assert r.whitebox.verdict == "consistent", r.whitebox.reason
    names = [e.name for e in r.whitebox.estimates]
    assert "largest singular value of P (a contraction: <= 1)" in names


class _HalfNoise(SubspaceMechanism):
    """Planted bug: Laplace noise drawn at 2 epsilon (half the radius)."""

    def _perturb(self, X, source):
        from privembed.mechanisms.laplace import sample_l2_laplace

        V = (X - self.mean) @ self.basis.T
        return V + sample_l2_laplace(source, V.shape[0], V.shape[1], 2 * self.epsilon)


class _FullDimensionAngles(SubspaceMechanism):
    """Planted bug: Purkayastha angles from the table of the input dimension, not k."""

    def _perturb(self, X, source):
        from privembed.mechanisms.purkayastha import purkayastha_angle_table

        V = (X - self.mean) @ self.basis.T
        U = V / np.linalg.norm(V, axis=1, keepdims=True)
        u = source.uniform(V.shape[0], 2)
        theta = purkayastha_angle_table(self.epsilon, X.shape[1]).sample(u[:, 0], u[:, 1])
        w = source.normal(*V.shape)
        w -= np.einsum("ij,ij->i", w, U)[:, None] * U
        w *= (np.sin(theta) / np.linalg.norm(w, axis=1))[:, None]
        return w + np.cos(theta)[:, None] * U


def test_a_stretching_projection_is_caught() -> None:
    # planted bug: the projection is scaled by 2 after validation (not a contraction)
    m = SubspaceMechanism(basis=_basis(2, 4), epsilon=1.0, renormalize=False)
    m.basis = m.basis * 2.0
    r = audit(m, dim=4, rng=12, **FAST)
    assert r.whitebox.verdict == "violation" and "not a contraction" in r.whitebox.reason
    assert r.sampling_violation  # twice the distance: the loss reaches past the claim


def test_half_the_noise_is_caught() -> None:
    wb = whitebox_check(_HalfNoise(basis=_basis(3, 6), epsilon=1.0), dim=6, samples=20_000, rng=1)
    assert wb.verdict == "violation"
    assert wb.estimates[2].value == pytest.approx(2.0, rel=0.05)


def test_angles_of_the_wrong_dimension_are_caught() -> None:
    m = _FullDimensionAngles(basis=_basis(3, 16), epsilon=5.0, noise="purkayastha")
    wb = whitebox_check(m, dim=16, samples=20_000, rng=2)
    assert wb.verdict == "violation"
