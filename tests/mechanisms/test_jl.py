"""Tests for privembed.mechanisms.jl: the public JL projections (one class per kind).

Every random draw has a fixed seed. Statistical checks name their statistic and derive the
tolerance from the sample size (binomial quantiles, exact standard errors, KS at alpha=1e-3).
"""

from __future__ import annotations

import copy
import hashlib
import math
import pickle
import re

import numpy as np
import pytest
from scipy import linalg, stats

from privembed import DataError
from privembed.core.rng import as_generator
from privembed.mechanisms import JLProjection, PrivateProjection
from privembed.mechanisms.jl import (
    KINDS,
    SRHTJL,
    GaussianJL,
    SparseJL,
    fwht,
    jl_target_dim,
    srht_matrix,
)


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
# Pinned matrices: the split into one class per kind changed no matrix
# ------------------------------------------------------------------------------------------

#: SHA-256 of each kind's matrix (float64, little-endian, C order) for fixed (d, k, seed),
#: computed with the single-class implementation before the split (NumPy 2 PCG64 streams).
#: A change here means every party's public P changed: releases made before no longer compare.
PINNED = {
    ("gaussian", 50, 12, 3): "905ae0c1a21f7c44d4f21bee975e614565538629b14b96f41f0ef34e248c3496",
    ("gaussian", 7, 16, 5): "738b3387482a783dd1c1ef9b7dfd8799540a2de6fbe13bd50f77c046b76968db",
    ("gaussian", 384, 128, 0): "297f5bc77cb8ff6db55d0a1616a1e59c2e4f39bdac205b47564f8868c7daee2a",
    ("sparse", 50, 12, 3): "8b68da4f83d8785c9f0f7c4174c3d5f6263f5f2a151747305eab08cd38921b8b",
    ("sparse", 7, 16, 5): "2e4b533b62d68b9ee1e13231d895aa8e40270d951556d72d6f73b99c20d0b208",
    ("sparse", 384, 128, 0): "86eea90c7e24721609be85a7fa3802fb937d10b0963198e9dd0e65cd0e1271e4",
    ("srht", 50, 12, 3): "7e578526dcae818dc5f465c476df2ceee88ed4c0384eacd2b3f6c8dff7e399a4",
    ("srht", 7, 16, 5): "571b8bc46e2f26fa39733a76cc598f2dd44b8bfa7dc619aaca0f5a2863674ecf",
    ("srht", 384, 128, 0): "57b9d4298bf349114e48489dba20a1b7cb601f0526124f21f85fb4b18db71156",
}


@pytest.mark.parametrize(("kind", "d", "k", "seed"), list(PINNED))
def test_matrices_are_bit_identical_to_the_pinned_hashes(kind, d, k, seed, tmp_path) -> None:
    want = PINNED[(kind, d, k, seed)]
    P = JLProjection(k=k, kind=kind, seed=seed)
    raw = np.ascontiguousarray(P.matrix(d), dtype="<f8").tobytes()
    assert hashlib.sha256(raw).hexdigest() == want
    assert P.fingerprint(d) == want
    # the file's rebuild (dense, CSR or signs + rows) gives the same matrix
    Q, dd = JLProjection.load(P.save(tmp_path / "p.npz", d))
    assert dd == d and Q.fingerprint(d) == want


def test_srht_file_and_build_share_one_dense_rebuild() -> None:
    P = JLProjection(k=8, kind="srht", seed=2)
    b = P._build(13)
    assert b.signs is not None and b.rows is not None
    np.testing.assert_array_equal(srht_matrix(b.signs, b.rows, 13, 8), P.matrix(13))


# ------------------------------------------------------------------------------------------
# One class per kind behind the public constructor
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "cls"), [("gaussian", GaussianJL), ("sparse", SparseJL), ("srht", SRHTJL)]
)
def test_constructor_returns_the_class_of_the_kind(kind: str, cls: type) -> None:
    P = JLProjection(k=5, kind=kind, seed=4)
    assert type(P) is cls and isinstance(P, JLProjection) and P.kind == kind
    direct = cls(k=5, seed=4)
    assert direct == P and hash(direct) == hash(P)
    assert repr(P) == repr(direct) == f"JLProjection(k=5, kind={kind!r}, seed=4)"
    assert P != JLProjection(k=5, kind=kind, seed=5)
    assert {P, direct} == {P}
    np.testing.assert_array_equal(direct.matrix(9), P.matrix(9))
    for clone in (pickle.loads(pickle.dumps(P)), copy.deepcopy(P)):
        assert type(clone) is cls and clone == P
        np.testing.assert_array_equal(clone.matrix(9), P.matrix(9))


def test_default_kind_and_kind_registry() -> None:
    assert type(JLProjection(k=3)) is GaussianJL
    assert KINDS == ("gaussian", "sparse", "srht")
    assert [c.kind_code for c in (GaussianJL, SparseJL, SRHTJL)] == [1, 2, 3]
    assert JLProjection(k=3, kind="srht").metadata(5)["derivation"].endswith("kind_code=3")
    with pytest.raises(
        ValueError, match=r"^kind must be 'sparse' for SparseJL, got kind='srht'\.$"
    ):
        SparseJL(k=3, kind="srht")


def test_apply_without_input_checks_equals_apply() -> None:
    X = as_generator(20).standard_normal((6, 11))
    for kind in KINDS:
        P = JLProjection(k=4, kind=kind, seed=1)
        np.testing.assert_array_equal(P.apply(X, check_input=False), P.apply(X))
        np.testing.assert_allclose(P(X[0]), P.apply(X)[0], rtol=1e-12, atol=1e-12)


def test_matrix_too_large_for_memory_is_refused() -> None:
    with pytest.raises(DataError, match=r"^a srht projection with k=100000 from d=5000 needs"):
        JLProjection(k=100_000, kind="srht").matrix(5000)


# ------------------------------------------------------------------------------------------
# Parameter errors (exact messages)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: JLProjection(k=0), ValueError, "k must be >= 1, got k=0."),
        (lambda: JLProjection(k=0, kind="dense"), ValueError, "k must be >= 1, got k=0."),
        (
            lambda: JLProjection(k=4, kind="dense"),
            ValueError,
            "kind must be one of 'gaussian', 'sparse', 'srht', got kind='dense'.",
        ),
        (
            lambda: JLProjection(k=4, kind=None),
            ValueError,
            "kind must be one of 'gaussian', 'sparse', 'srht', got kind=None.",
        ),
        (lambda: JLProjection(k=4, seed=-2), ValueError, "seed must be >= 0, got seed=-2."),
        (lambda: jl_target_dim(100, 1.0), ValueError, "eta must be < 1, got eta=1."),
        (lambda: jl_target_dim(1, 0.1), ValueError, "n must be >= 2, got n=1."),
        (
            lambda: jl_target_dim(10, 0.1, failure_prob=0),
            ValueError,
            "failure_prob must be > 0, got failure_prob=0.",
        ),
    ],
)
def test_parameter_errors(call, exc, message) -> None:
    with pytest.raises(exc, match=f"^{re.escape(message)}$"):
        call()
