"""Tests for privembed.mechanisms.projection: PrivateProjection (JL projection then noise).

Every random draw has a fixed seed. Statistical checks name their statistic and derive the
tolerance from the sample size (exact standard errors, Balle & Wang's delta, dp_accounting's PLD).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import stats

from privembed import DataError
from privembed.core.accounting import guarantee_from_dict
from privembed.core.rng import as_generator
from privembed.mechanisms import (
    MECHANISMS,
    LaplaceMechanism,
    PrivateProjection,
    build_mechanism,
    get_mechanism,
)
from privembed.mechanisms.projection import require_projection

KINDS = ("gaussian", "sparse", "srht")


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


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


def test_require_projection() -> None:
    m = PrivateProjection(**_BASE)
    assert require_projection(m) is m
    with pytest.raises(
        TypeError,
        match=r"^db must be a PrivateProjection, got db=LaplaceMechanism\(epsilon=5\.0\)\.$",
    ):
        require_projection(LaplaceMechanism(epsilon=5.0), name="db")
