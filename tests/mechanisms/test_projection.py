"""Tests for privembed.mechanisms.projection: public JL projections, PrivateProjection, JLSketch.

Every random draw has a fixed seed. Statistical checks name their statistic and derive the
tolerance from the sample size (binomial quantiles, exact standard errors, KS at alpha=1e-3).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import linalg, stats

from privembed import DataError
from privembed.accounting import guarantee_from_dict
from privembed.mechanisms import MECHANISMS, build_mechanism, get_mechanism
from privembed.mechanisms.projection import (
    JLProjection,
    JLSketch,
    PrivateProjection,
    blocki_threshold,
    fwht,
    jl_target_dim,
)
from privembed.rng import as_generator

KINDS = ("gaussian", "sparse", "srht")


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------
# JL property
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gaussian", "sparse"])
def test_all_pairs_within_lemma_distortion_with_stated_probability(kind: str) -> None:
    """k = jl_target_dim(n, eta, failure_prob=beta) keeps all pairs within 1 +- eta with prob
    >= 1 - beta. Over T independent public seeds the number of failing seeds is Binomial(T, p)
    with p <= beta; we reject only above its 99.9% quantile under p = beta."""
    n, d, eta, beta, T = 25, 400, 0.5, 0.1, 40
    k = jl_target_dim(n, eta, failure_prob=beta)
    X = _unit(as_generator(0), n, d)
    iu, ju = np.triu_indices(n, 1)
    true = np.sum((X[iu] - X[ju]) ** 2, axis=1)
    failures = 0
    for seed in range(T):
        Y = JLProjection(k=k, kind=kind, seed=seed).apply(X)
        ratio = np.sum((Y[iu] - Y[ju]) ** 2, axis=1) / true
        failures += int(np.any(np.abs(ratio - 1.0) > eta))
    assert failures <= stats.binom.ppf(0.999, T, beta)


@pytest.mark.parametrize("kind", ["gaussian", "sparse"])
def test_single_pair_tail_within_lemma_bound(kind: str) -> None:
    """Per vector, P(|‖Px‖²/‖x‖² - 1| > eta) <= 2 exp(-k(eta²/2 - eta³/3)/2) ([DG03], [Ach03]).
    One projection per seed -> independent Bernoulli trials; 99.9% binomial quantile."""
    d, k, eta, T = 200, 40, 0.5, 400
    bound = 2.0 * math.exp(-k * (eta**2 / 2 - eta**3 / 3) / 2)
    x = _unit(as_generator(1), 1, d)
    viol = 0
    for seed in range(T):
        y = JLProjection(k=k, kind=kind, seed=seed).apply(x)
        viol += int(abs(float(np.sum(y**2)) - 1.0) > eta)
    assert viol <= stats.binom.ppf(0.999, T, bound)


def test_gaussian_projection_norm_follows_chi_square() -> None:
    """For Gaussian P, k‖Px‖²/‖x‖² ~ chi²_k exactly: KS over 300 public seeds, alpha = 1e-3."""
    d, k, T = 48, 12, 300
    x = _unit(as_generator(2), 1, d)
    v = np.array([k * float(np.sum(JLProjection(k=k, seed=s).apply(x) ** 2)) for s in range(T)])
    assert stats.kstest(v, stats.chi2(k).cdf).pvalue > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_norm_is_preserved_in_expectation(kind: str) -> None:
    """E‖Px‖² = ‖x‖² for every kind; mean over 300 seeds within 4.4 standard errors."""
    d, k, T = 40, 8, 300
    x = _unit(as_generator(3), 1, d)
    v = np.array(
        [float(np.sum(JLProjection(k=k, kind=kind, seed=s).apply(x) ** 2)) for s in range(T)]
    )
    assert abs(v.mean() - 1.0) <= 4.4 * v.std(ddof=1) / math.sqrt(T)


def test_jl_target_dim_formula() -> None:
    n, eta, beta = 500, 0.3, 0.01
    m = n * (n - 1) / 2
    expected = math.ceil(2 * math.log(2 * m / beta) / (eta**2 / 2 - eta**3 / 3))
    assert jl_target_dim(n, eta, failure_prob=beta) == expected
    assert jl_target_dim(n, 0.1) > jl_target_dim(n, 0.3) > jl_target_dim(50, 0.3)


# ------------------------------------------------------------------------------------------
# Matrices: SRHT vs dense Hadamard, sparse density, public derivation, persistence
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("d", "k"), [(5, 3), (8, 4), (13, 8), (3, 7), (64, 16)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_srht_equals_dense_hadamard_product(d: int, k: int, dtype: type) -> None:
    P = JLProjection(k=k, kind="srht", seed=11)
    m = P.padded_dim(d)
    assert m == 1 << max(0, (max(d, k) - 1).bit_length())
    built = P._build(d)
    assert built.signs is not None and built.rows is not None
    assert set(np.unique(built.signs)) <= {-1.0, 1.0}
    assert len(set(built.rows.tolist())) == k
    H = linalg.hadamard(m).astype(np.float64)
    ref = (H[built.rows] * built.signs[None, :])[:, :d] / math.sqrt(k)
    np.testing.assert_array_equal(P.matrix(d), ref)
    X = as_generator(4).standard_normal((9, d)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    out = P.apply(X)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, X.astype(np.float64) @ ref.T, rtol=tol, atol=tol)


def test_fwht_matches_scipy_hadamard() -> None:
    rng = as_generator(5)
    for m in (1, 2, 16, 128):
        X = rng.standard_normal((m, 3))
        np.testing.assert_allclose(fwht(X, axis=0), linalg.hadamard(m) @ X, atol=1e-10)
        np.testing.assert_allclose(fwht(X.T), X.T @ linalg.hadamard(m), atol=1e-10)
    x = rng.standard_normal(8)
    before = x.copy()
    fwht(x)
    np.testing.assert_array_equal(x, before)
    with pytest.raises(
        ValueError, match=re.escape("fwht needs a power-of-two length, got length=6.")
    ):
        fwht(np.ones(6))


def test_sparse_kind_is_achlioptas() -> None:
    P = JLProjection(k=64, kind="sparse", seed=3)
    d = 300
    S = P.sparse_matrix(d)
    vals = np.unique(np.round(P.matrix(d) * math.sqrt(64 / 3)))
    assert set(vals.tolist()) <= {-1.0, 0.0, 1.0}
    # density 1/3: nnz ~ Binomial(k d, 1/3), within 4.4 standard deviations
    N = 64 * d
    assert abs(S.nnz - N / 3) <= 4.4 * math.sqrt(N * (1 / 3) * (2 / 3))
    X = as_generator(6).standard_normal((5, d))
    np.testing.assert_allclose(P.apply(X), X @ P.matrix(d).T, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_matrix_is_a_public_function_of_kind_d_k_seed(kind: str) -> None:
    a = JLProjection(k=8, kind=kind, seed=5)
    b = JLProjection(k=8, kind=kind, seed=5)
    np.testing.assert_array_equal(a.matrix(30), b.matrix(30))
    assert a.fingerprint(30) == b.fingerprint(30)
    assert a.fingerprint(30) != JLProjection(k=8, kind=kind, seed=6).fingerprint(30)
    assert a.matrix(30).shape == (8, 30) and a.matrix(31).shape == (8, 31)
    assert not a.matrix(30).flags.writeable
    # the noise rng never touches P
    m = PrivateProjection(k=8, epsilon=2.0, delta=1e-5, kind=kind, projection_seed=5)
    X = _unit(as_generator(7), 4, 30)
    m.privatize(X, rng=1)
    m.privatize(X, rng=None)
    np.testing.assert_array_equal(m.projection.matrix(30), a.matrix(30))


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(kind: str, tmp_path) -> None:
    P = JLProjection(k=6, kind=kind, seed=9)
    path = P.save(tmp_path / f"{kind}.npz", 20)
    Q, d = JLProjection.load(path)
    assert d == 20 and Q == P
    np.testing.assert_array_equal(Q.matrix(20), P.matrix(20))
    meta = Q.metadata(20)
    assert meta["sha256"] == P.fingerprint(20) and meta["kind"] == kind and meta["seed"] == 9


def test_load_rejects_tampered_and_foreign_files(tmp_path) -> None:
    path = JLProjection(k=4, seed=1).save(tmp_path / "p.npz", 10)
    with np.load(path) as z:
        data = dict(z)
    data["matrix"] = data["matrix"] + 1e-9
    bad = tmp_path / "bad.npz"
    np.savez(bad, **data)
    with pytest.raises(DataError, match="does not match its stored SHA-256"):
        JLProjection.load(bad)
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    with pytest.raises(DataError, match="is not a privembed JL projection file"):
        JLProjection.load(other)


def test_spectral_and_column_norms() -> None:
    d, k = 384, 128
    G = JLProjection(k=k, kind="gaussian", seed=0)
    # Gaussian: ||P||_2 ~ 1 + sqrt(d/k) (Bai-Yin), within 5% at this size
    assert abs(G.spectral_norm(d) / (1 + math.sqrt(d / k)) - 1) < 0.05
    assert G.spectral_norm(d) == pytest.approx(np.linalg.svd(G.matrix(d), compute_uv=False)[0])
    S = JLProjection(k=k, kind="srht", seed=0)
    assert S.max_column_norm(d) == pytest.approx(1.0, abs=1e-12)
    assert S.spectral_norm(d) <= math.sqrt(S.padded_dim(d) / k) + 1e-12
    for P in (G, S, JLProjection(k=k, kind="sparse", seed=0)):
        cols = P.apply(np.eye(d))  # row j = P e_j, through the fast path
        assert P.max_column_norm(d) == pytest.approx(float(np.max(np.linalg.norm(cols, axis=1))))


# ------------------------------------------------------------------------------------------
# Calibration and guarantee
# ------------------------------------------------------------------------------------------


def _bw_delta(sigma: float, eps: float, sens: float) -> float:
    """Balle & Wang Thm 8 in plain (not log) space with scipy.stats.norm -- an independent path."""
    a = sens / (2 * sigma)
    b = eps * sigma / sens
    return float(stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("neighbouring", ["record", "attribute"])
def test_sigma_matches_independent_calibration(kind: str, neighbouring: str) -> None:
    from dp_accounting.pld import privacy_loss_distribution as pld

    d, eps, delta = 50, 3.0, 1e-5
    m = PrivateProjection(
        k=10, epsilon=eps, delta=delta, kind=kind, neighbouring=neighbouring, input_dim=d
    )
    # sensitivity from columns P e_j computed through apply(), not through matrix()
    cols = m.projection.apply(np.eye(d))
    if neighbouring == "record":
        sens = 2 * float(np.linalg.svd(cols, compute_uv=False)[0])
    else:
        sens = float(np.max(np.linalg.norm(cols, axis=1)))
    assert m.sensitivity(d) == pytest.approx(sens, rel=1e-12)
    s = m.sigma
    # exact delta at sigma equals the target; slightly less noise breaks it (minimality)
    assert _bw_delta(s, eps, sens) == pytest.approx(delta, rel=1e-6)
    assert _bw_delta(s * (1 - 1e-4), eps, sens) > delta
    # dp_accounting's PLD (pessimistic discretisation) agrees to within 2%
    got = pld.from_gaussian_mechanism(s, sensitivity=sens).get_delta_for_epsilon(eps)
    assert got == pytest.approx(delta, rel=0.02)


def test_classic_calibration_and_true_delta() -> None:
    d, eps, delta = 32, 5.0, 1e-5
    m = PrivateProjection(k=8, epsilon=eps, delta=delta, calibration="classic", input_dim=d)
    sens = 2 * m.projection.spectral_norm(d)
    assert m.sigma == pytest.approx(sens * math.sqrt(2 * math.log(1.25 / delta)) / eps)
    achieved = _bw_delta(m.sigma, eps, sens)
    g = m.guarantee
    assert g.delta == pytest.approx(max(delta, achieved), rel=1e-6)
    big = PrivateProjection(k=8, epsilon=50.0, delta=delta, calibration="classic", input_dim=d)
    assert big.guarantee.delta > 0.5  # the classic sigma under-noises badly at epsilon = 50
    assert "under-noises" in big.guarantee.note


def test_guarantee_names_the_relation_and_round_trips() -> None:
    rec = PrivateProjection(k=8, epsilon=2.0, delta=1e-6)
    att = PrivateProjection(
        k=8, epsilon=2.0, delta=1e-6, neighbouring="attribute", input_norm="none"
    )
    assert "record level" in rec.guarantee.neighbouring
    assert "2*||P||_2" in rec.guarantee.neighbouring
    assert att.guarantee.neighbouring.startswith(
        "inputs that differ in one coordinate by at most 1"
    )
    for g in (rec.guarantee, att.guarantee):
        assert (g.epsilon, g.delta) == (2.0, 1e-6)
        assert guarantee_from_dict(g.to_dict()) == g
    assert rec.fingerprint != att.fingerprint


# ------------------------------------------------------------------------------------------
# Mechanism contract
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_mechanism_contract(kind: str) -> None:
    m = PrivateProjection(k=12, epsilon=4.0, delta=1e-5, kind=kind, projection_seed=3)
    assert m.renormalize is False
    X = as_generator(8).standard_normal((7, 40)).astype(np.float32)
    X0 = X.copy()
    Y = m.privatize(X, rng=5)
    assert Y.shape == (7, 12) and Y.dtype == np.float32
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(Y, m.privatize(X, rng=5))
    assert not np.array_equal(Y, m.privatize(X, rng=6))
    assert m.privatize(X[0], rng=5).shape == (12,)
    # privatize never changes the mechanism: no state depends on the call history
    assert m.output_dim(40) == 12 and m.input_dim is None
    # noiseless part = P (x / |x|)
    np.testing.assert_allclose(
        m.project(X),
        (X / np.linalg.norm(X, axis=1, keepdims=True))
        @ m.projection.matrix(40).T.astype(np.float32),
        rtol=1e-4,
        atol=1e-5,
    )
    r = PrivateProjection(k=12, epsilon=4.0, delta=1e-5, kind=kind, renormalize=True)
    np.testing.assert_allclose(np.linalg.norm(r.privatize(X, rng=5), axis=1), 1.0, rtol=1e-5)
    with pytest.raises(DataError):
        m.privatize(np.zeros((2, 40)), rng=0)


def test_registry_and_cli_kwargs() -> None:
    assert MECHANISMS["projection"] is PrivateProjection
    m = get_mechanism(
        "projection",
        k=16,
        kind="srht",
        projection_seed=7,
        neighbouring="record",
        epsilon=5.0,
        delta=1e-5,
        calibration=None,
    )
    assert isinstance(m, PrivateProjection)
    assert m.config == {
        "mechanism": "projection",
        "k": 16,
        "epsilon": 5.0,
        "delta": 1e-5,
        "kind": "srht",
        "neighbouring": "record",
        "calibration": "analytic",
        "projection_seed": 7,
        "input_norm": "normalize",
        "renormalize": False,
        "input_dim": None,
    }
    meta = m.release_metadata(64)["projection"]
    assert meta["sigma"] == m.sigma_for(64) and meta["k"] == 16 and meta["seed"] == 7
    # input_dim only builds P early: same law, same fingerprint
    pinned = build_mechanism(**{**m.config, "input_dim": 64})
    assert pinned.fingerprint == m.fingerprint


def test_sigma_is_per_dimension_and_never_depends_on_call_history() -> None:
    m = PrivateProjection(k=8, epsilon=3.0, delta=1e-5)
    with pytest.raises(ValueError, match="sigma depends on the input dimension d"):
        _ = m.sigma
    fp = m.fingerprint
    m.privatize(_unit(as_generator(9), 2, 20), rng=0)
    m.privatize(_unit(as_generator(9), 2, 200), rng=0)
    with pytest.raises(ValueError, match="sigma depends on the input dimension d"):
        _ = m.sigma  # privatize did not pin a dimension
    assert m.fingerprint == fp and m.input_dim is None
    assert m.sigma_for(200) > m.sigma_for(20)
    assert PrivateProjection(k=8, epsilon=3.0, delta=1e-5, input_dim=20).sigma == m.sigma_for(20)
    pinned = PrivateProjection(k=8, epsilon=3.0, delta=1e-5, input_dim=20)
    with pytest.raises(DataError, match="built for input_dim=20"):
        pinned.privatize(_unit(as_generator(9), 2, 200), rng=0)


# ------------------------------------------------------------------------------------------
# Unbiased estimators ([MC25] §5.2)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gaussian", "srht"])
def test_distance_estimator_mean_error_within_three_standard_errors(kind: str) -> None:
    d, k, N = 64, 16, 20000
    m = PrivateProjection(k=k, epsilon=5.0, delta=1e-5, kind=kind, projection_seed=2, input_dim=d)
    x = _unit(as_generator(10), 2, d)
    a = m.project(x)
    target = float(np.sum((a[0] - a[1]) ** 2))
    Yi = m.privatize(np.repeat(x[:1], N, axis=0), rng=11)
    Yj = m.privatize(np.repeat(x[1:], N, axis=0), rng=12)
    s2 = m.sigma**2
    # both released: ||a + z||² with z ~ N(0, 2 s2 I_k): Var = 2k(2 s2)² + 4 (2 s2) ||a||²
    err = m.squared_distance_estimate(Yi, Yj) - target
    se = math.sqrt((2 * k * (2 * s2) ** 2 + 4 * 2 * s2 * target) / N)
    assert abs(err.mean()) <= 3 * se
    # the uncorrected distance is biased by 2 k sigma², far outside that band
    assert abs(np.sum((Yi - Yj) ** 2, axis=1).mean() - target) > 30 * se
    # one side a clean projection: subtract k sigma² only
    err1 = m.squared_distance_estimate(np.repeat(a[:1], N, axis=0), Yj, released=1) - target
    se1 = math.sqrt((2 * k * s2**2 + 4 * s2 * target) / N)
    assert abs(err1.mean()) <= 3 * se1
    # inner product: Var = s2 |a_i|² + s2 |a_j|² + k s2²
    ip_t = float(a[0] @ a[1])
    ip_err = m.inner_product_estimate(Yi, Yj) - ip_t
    se_ip = math.sqrt((s2 * (a[0] @ a[0] + a[1] @ a[1]) + k * s2**2) / N)
    assert abs(ip_err.mean()) <= 3 * se_ip
    # squared norm: |a + z|² - k s2, Var = 2k s2² + 4 s2 |a|²
    nt = float(a[0] @ a[0])
    n_err = m.squared_norm_estimate(Yi) - nt
    assert abs(n_err.mean()) <= 3 * math.sqrt((2 * k * s2**2 + 4 * s2 * nt) / N)


def test_cosine_estimate_for_unnormalised_inputs_uses_corrected_norms() -> None:
    # corrected norms need k sigma² below |Px|² (here 0.04 vs 0.25); the ratio is unstable otherwise
    m = PrivateProjection(k=64, epsilon=1e4, delta=1e-5, input_norm="clip", input_dim=32)
    x = 0.5 * _unit(as_generator(13), 2, 32)
    Y = m.privatize(np.tile(x, (200, 1)), rng=14).reshape(200, 2, 64)
    est = m.cosine_estimate(Y[:, 0], Y[:, 1])
    a = m.project(x)
    truth = float(a[0] @ a[1] / np.linalg.norm(a[0]) / np.linalg.norm(a[1]))
    naive = (
        np.sum(Y[:, 0] * Y[:, 1], 1)
        / np.linalg.norm(Y[:, 0], axis=1)
        / np.linalg.norm(Y[:, 1], axis=1)
    )
    assert abs(est.mean() - truth) < abs(naive.mean() - truth)


# ------------------------------------------------------------------------------------------
# Bias-corrected search
# ------------------------------------------------------------------------------------------


def _setup_search():
    d, n = 48, 300
    m = PrivateProjection(k=24, epsilon=20.0, delta=1e-5, projection_seed=1, input_dim=d)
    X = _unit(as_generator(15), n, d)
    Y = m.privatize(X, rng=16)
    return m, X, Y


def test_search_matches_faiss() -> None:
    """ "cosine" = IndexFlatIP over L2-normalised vectors; "ip" = IndexFlatIP over raw releases."""
    faiss = pytest.importorskip("faiss")
    m, X, Y = _setup_search()
    Q = np.ascontiguousarray(m.project(X[:50]), dtype=np.float32)
    Y32 = np.ascontiguousarray(Y, dtype=np.float32)
    for metric, q, y in (
        ("ip", Q, Y32),
        (
            "cosine",
            Q / np.linalg.norm(Q, axis=1, keepdims=True),
            Y32 / np.linalg.norm(Y32, axis=1, keepdims=True),
        ),
    ):
        D, idx = m.search(X[:50], Y, 5, metric=metric)
        index = faiss.IndexFlatIP(Y.shape[1])
        index.add(np.ascontiguousarray(y))
        Df, If = index.search(np.ascontiguousarray(q), 5)
        np.testing.assert_array_equal(idx, If)
        np.testing.assert_allclose(D, Df, rtol=1e-4, atol=1e-4)


def test_search_cosine_corrected_matches_cosine_estimate() -> None:
    m, _, Y = _setup_search()
    D, idx = m.search(Y[:5], Y[5:], 4, metric="cosine_corrected", queries_released=True)
    assert np.all(np.abs(D) <= 1.0)
    for i in range(5):
        est = m.cosine_estimate(np.repeat(Y[i : i + 1], 4, axis=0), Y[5:][idx[i]])
        np.testing.assert_allclose(D[i], est, rtol=1e-5, atol=1e-6)


def test_search_l2_is_bias_corrected_and_padded() -> None:
    m, X, Y = _setup_search()
    Q = m.project(X[:10])
    D, idx = m.search(X[:10], Y, 3, metric="l2")
    raw = np.sum((Q[:, None, :] - Y[None, :, :]) ** 2, axis=2)
    np.testing.assert_array_equal(idx, np.argsort(raw, axis=1, kind="stable")[:, :3])
    expect = np.take_along_axis(raw, idx, axis=1) - m.k * m.sigma**2
    np.testing.assert_allclose(D, expect, rtol=1e-5, atol=1e-5)
    # released queries subtract 2 k sigma²
    Dr, _ = m.search(Y[:10], Y[10:], 3, metric="l2", queries_released=True)
    raw_r = np.sort(np.sum((Y[:10, None] - Y[None, 10:]) ** 2, axis=2), axis=1)[:, :3]
    np.testing.assert_allclose(Dr, raw_r - 2 * m.k * m.sigma**2, rtol=1e-5, atol=1e-5)
    # FAISS-style padding when k > n
    Dp, Ip = m.search(X[:2], Y[:3], 5, metric="l2")
    assert (Ip[:, 3:] == -1).all() and np.isinf(Dp[:, 3:]).all()
    assert sorted(Ip[0, :3].tolist()) == [0, 1, 2]


def test_search_per_row_sigma_changes_l2_ranking() -> None:
    m, X, Y = _setup_search()
    sig = np.full(Y.shape[0], m.sigma)
    sig[::2] = 3 * m.sigma  # rows released at a smaller epsilon carry more noise
    _, I1 = m.search(X[:20], Y, 10, metric="l2")
    _, I2 = m.search(X[:20], Y, 10, metric="l2", database_sigma=sig)
    assert not np.array_equal(I1, I2)
    with pytest.raises(ValueError, match="database_sigma must be a non-negative scalar"):
        m.search(X[:2], Y, 1, database_sigma=np.ones(3))


def test_self_retrieval_needs_a_large_epsilon_at_record_level() -> None:
    _, X, _ = _setup_search()
    hits = {}
    for eps in (20.0, 1e4):
        mm = PrivateProjection(k=24, epsilon=eps, delta=1e-5, projection_seed=1)
        _, idx = mm.search(X, mm.privatize(X, rng=16), 1)
        hits[eps] = float(np.mean(idx[:, 0] == np.arange(len(X))))
    assert hits[20.0] < 0.2 < 0.95 < hits[1e4]


# ------------------------------------------------------------------------------------------
# JL-only sketch (Blocki et al.)
# ------------------------------------------------------------------------------------------


def test_sketch_refuses_small_singular_values() -> None:
    s = JLSketch(r=5, epsilon=10.0, delta=1e-3)
    w = blocki_threshold(10.0, 1e-3, 5)
    assert s.threshold == pytest.approx(w)
    A = as_generator(17).standard_normal((50, 4))  # singular values ~ 7, far below w ~ 111
    with pytest.raises(ValueError, match=r"^JL-only sketch refused: the smallest singular value"):
        s.release(A, rng=0)
    with pytest.raises(ValueError, match=r"is 0 but the guarantee needs >= 112\.4"):
        s.release(np.ones((2, 4)), rng=0)  # n < d: zero singular values
    # just below / at the floor w + row_bound
    U, _, Vt = np.linalg.svd(A, full_matrices=False)
    floor = s.required_singular_value
    with pytest.raises(ValueError, match="JL-only sketch refused"):
        s.release(U @ np.diag([floor * 0.999] * 4) @ Vt, rng=0)
    R = s.release(U @ np.diag([floor * 1.001] * 4) @ Vt, rng=0)
    assert R.shape == (5, 4)
    # smoothing makes every matrix acceptable and its covariance estimate unbiased-corrected
    sm = JLSketch(r=5, epsilon=10.0, delta=1e-3, smoothing=True)
    assert sm.release(A, rng=0).shape == (5, 4)
    assert "smoothing" in sm.guarantee.note and "one row" in sm.guarantee.neighbouring


def test_sketch_covariance_estimate_is_unbiased() -> None:
    sm = JLSketch(r=20, epsilon=50.0, delta=1e-3, smoothing=True)
    A = as_generator(18).standard_normal((30, 3))
    C = np.mean([sm.covariance_estimate(sm.release(A, rng=i)) for i in range(400)], axis=0)
    G = A.T @ A
    B = G + sm.threshold**2 * np.eye(3)
    # Var of (R^T R / r)_ij = (B_ii B_jj + B_ij²) / r (Wishart); mean of 400 draws
    se = np.sqrt((np.outer(np.diag(B), np.diag(B)) + B**2) / sm.r / 400)
    assert np.all(np.abs(C - G) <= 4.4 * se)


def test_graph_sketch_refusal_and_unbiased_cuts() -> None:
    s = JLSketch(r=4, epsilon=200.0, delta=1e-2)
    w = blocki_threshold(200.0, 1e-2, 4)
    with pytest.raises(ValueError, match=r"n_vertices=10 is below 2\*w\^2"):
        s.release_graph([(0, 1)], 10, rng=0)
    n = 30
    assert n >= 2 * w * w
    g = as_generator(19)
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if g.random() < 0.2]
    S = list(range(7))
    true_cut = sum((u in S) != (v in S) for u, v in edges)
    omega = s.graph_overlay_weight(n)
    quad = omega * 7 * (n - 7) + (1 - omega) * true_cut  # 1_S^T L 1_S
    T = 600
    est = np.array([s.release_graph(edges, n, rng=100 + t).cut(S) for t in range(T)])
    # ||M v||²/r ~ quad * chi²_r / r: Var(est) = 2 quad² / (r (1 - omega)²)
    se = math.sqrt(2 * quad**2 / s.r) / (1 - omega) / math.sqrt(T)
    assert abs(est.mean() - true_cut) <= 3 * se
    with pytest.raises(ValueError, match="edges must join two distinct vertices"):
        s.release_graph([(0, 0)], n, rng=0)


# ------------------------------------------------------------------------------------------
# Parameter errors (exact messages)
# ------------------------------------------------------------------------------------------

_BASE = {"k": 8, "epsilon": 5.0, "delta": 1e-5}


@pytest.mark.parametrize(
    ("override", "exc", "message"),
    [
        ({"k": 0}, ValueError, "k must be >= 1, got k=0."),
        ({"k": 2.5}, TypeError, "k must be an integer, got k=2.5."),
        ({"epsilon": -1}, ValueError, "epsilon must be > 0, got epsilon=-1."),
        ({"epsilon": math.inf}, ValueError, "epsilon must be finite, got epsilon=inf."),
        ({"delta": 0}, ValueError, "delta must be > 0, got delta=0."),
        ({"delta": 1}, ValueError, "delta must be < 1, got delta=1."),
        (
            {"kind": "dense"},
            ValueError,
            "kind must be one of 'gaussian', 'sparse', 'srht', got kind='dense'.",
        ),
        (
            {"neighbouring": "user"},
            ValueError,
            "neighbouring must be one of 'record', 'attribute', got neighbouring='user'.",
        ),
        (
            {"calibration": "exact"},
            ValueError,
            "calibration must be one of 'analytic', 'classic', got calibration='exact'.",
        ),
        (
            {"projection_seed": -1},
            ValueError,
            "projection_seed must be >= 0, got projection_seed=-1.",
        ),
        ({"renormalize": 1}, TypeError, "renormalize must be a bool, got renormalize=1."),
        ({"input_dim": 0}, ValueError, "input_dim must be >= 1, got input_dim=0."),
        (
            {"input_norm": "none"},
            ValueError,
            "input_norm='none' bounds no distance between records; neighbouring='record' needs "
            "input_norm='normalize' or 'clip', got input_norm='none'.",
        ),
    ],
)
def test_private_projection_parameter_errors(override, exc, message) -> None:
    with pytest.raises(exc, match=f"^{re.escape(message)}$"):
        PrivateProjection(**{**_BASE, **override})


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: JLProjection(k=0), ValueError, "k must be >= 1, got k=0."),
        (lambda: JLProjection(k=4, seed=-2), ValueError, "seed must be >= 0, got seed=-2."),
        (lambda: jl_target_dim(100, 1.0), ValueError, "eta must be < 1, got eta=1."),
        (lambda: jl_target_dim(1, 0.1), ValueError, "n must be >= 2, got n=1."),
        (
            lambda: jl_target_dim(10, 0.1, failure_prob=0),
            ValueError,
            "failure_prob must be > 0, got failure_prob=0.",
        ),
        (lambda: JLSketch(r=0, epsilon=1.0, delta=1e-5), ValueError, "r must be >= 1, got r=0."),
        (
            lambda: JLSketch(r=2, epsilon=1.0, delta=1e-5, smoothing="yes"),
            TypeError,
            "smoothing must be a bool, got smoothing='yes'.",
        ),
        (
            lambda: PrivateProjection(**_BASE).search(
                np.ones((1, 4)), np.ones((2, 8)), 1, metric="dot"
            ),
            ValueError,
            "metric must be one of 'cosine', 'cosine_corrected', 'ip', 'l2', got metric='dot'.",
        ),
    ],
)
def test_other_parameter_errors(call, exc, message) -> None:
    with pytest.raises(exc, match=f"^{re.escape(message)}$"):
        call()
