"""Variance fingerprints ([F26]): eq. 4 by hand, success under anisotropic noise, and chance exactly
where no classifier can do better (isotropic noise, keyed re-releases)."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError
from privembed.attacks import (
    FingerprintClassifier,
    TemplateMatcher,
    l1_normalize,
    permuted_diagonal,
    release_stack,
    simulate_fingerprints,
    variance_fingerprint,
)
from privembed.mechanisms import LaplaceMechanism, MahalanobisMechanism

D = 24
CONCEPTS = ("a", "b", "c")
KEY = bytes(range(32))


def _masks() -> dict[str, np.ndarray]:
    """Three concepts, each on its own block of 8 dimensions."""
    out = {}
    for i, c in enumerate(CONCEPTS):
        m = np.zeros(D)
        m[8 * i : 8 * (i + 1)] = 1.0
        out[c] = m
    return out


def _pool(n: int = 120, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, D))


def _mechs(**kw) -> dict[str, MahalanobisMechanism]:
    return {
        c: MahalanobisMechanism(epsilon=10.0, mask=m, mask_delta=1e-3, **kw)
        for c, m in _masks().items()
    }


def _chance_bound(n_groups: int, k: float = 4.4) -> float:
    """Predictions independent of the labels: #correct has variance <= n/4 (module notes)."""
    return k * 0.5 / np.sqrt(n_groups)


def test_eq4_on_a_tiny_example_by_hand():
    # 3 releases of 2 documents in 2 dimensions
    R = np.array(
        [
            [[1.0, 0.0], [0.0, 2.0]],
            [[3.0, 0.0], [0.0, 2.0]],
            [[2.0, 3.0], [0.0, 5.0]],
        ]
    )
    # doc 0: dim 0 values 1,3,2 -> var 1; dim 1 values 0,0,3 -> var 3
    # doc 1: dim 0 values 0,0,0 -> var 0; dim 1 values 2,2,5 -> var 3
    np.testing.assert_allclose(variance_fingerprint(R, [[0], [1]]), [[1.0, 3.0], [0.0, 3.0]])
    np.testing.assert_allclose(variance_fingerprint(R), [[0.5, 3.0]])
    np.testing.assert_allclose(l1_normalize(variance_fingerprint(R)), [[0.5 / 3.5, 3.0 / 3.5]])
    # across documents: per release, variance of the 2 documents; then mean over releases
    # release 0: (0.5, 2), release 1: (4.5, 2), release 2: (2, 2) -> (7/3, 2)
    np.testing.assert_allclose(variance_fingerprint(R, across="documents"), [[7 / 3, 2.0]])
    with pytest.raises(DataError, match="N >= 2"):
        variance_fingerprint(R[:1])
    with pytest.raises(DataError, match="indices in"):
        variance_fingerprint(R, [[0, 5]])


def test_identical_releases_have_exactly_zero_variance():
    """numpy's two-pass variance of 10 equal floats leaves ~1e-34 residue that scales with |y|^2
    (a fingerprint of its own); the shifted computation returns exactly 0."""
    rng = np.random.default_rng(3)
    R = np.repeat(rng.standard_normal((1, 6, 9)) * np.geomspace(0.01, 50, 9), 10, axis=0)
    assert (variance_fingerprint(R) == 0).all()
    assert (variance_fingerprint(R, [[0, 1, 2], [3, 4, 5]]) == 0).all()


def test_zero_fingerprint_is_uniform_and_matching_is_argmin_l2():
    np.testing.assert_allclose(l1_normalize([[0.0, 0.0, 0.0, 0.0]]), [[0.25] * 4])
    m = TemplateMatcher.from_covariances({"x": [4.0, 0.0, 0.0], "y": [1.0, 1.0, 1.0]})
    np.testing.assert_allclose(m.distances([[2.0, 0.0, 0.0]]), [[0.0, np.sqrt(4 / 9 + 2 / 9)]])
    assert m.predict([[1.0, 1.0, 1.1], [9.0, 1.0, 0.0]]) == ["y", "x"]
    fitted = TemplateMatcher().fit([[1.0, 0.0], [3.0, 1.0], [0.0, 1.0]], ["p", "p", "q"])
    assert fitted.templates_ is not None
    np.testing.assert_allclose(fitted.templates_, [[0.875, 0.125], [0.0, 1.0]])


def test_release_stack_fresh_vs_keyed():
    X = _pool(5)
    mech = LaplaceMechanism(epsilon=5.0)
    fresh = release_stack(mech, X, 3, rng=0)
    keyed = release_stack(mech, X, 3, key=KEY, ids=list(range(5)))
    assert fresh.shape == keyed.shape == (3, 5, D)
    assert not np.allclose(fresh[0], fresh[1])
    assert (keyed[0] == keyed[1]).all() and (keyed[1] == keyed[2]).all()
    np.testing.assert_array_equal(fresh, release_stack(mech, X, 3, rng=0))


def test_anisotropic_noise_reveals_the_concept():
    F, y = simulate_fingerprints(_mechs(), _pool(), n_groups=10, group_size=10, n_releases=5, rng=1)
    matcher = TemplateMatcher.from_covariances(
        {c: m.covariance_diagonal for c, m in _mechs().items()}
    )
    rep = matcher.score(F, y)
    assert rep.accuracy == 1.0 and rep.macro_f1 == 1.0 and rep.chance == pytest.approx(1 / 3)
    assert rep.confusion == [[10, 0, 0], [0, 10, 0], [0, 0, 10]]


def test_isotropic_noise_gives_chance():
    """Every concept gets the same noise law, so predictions are independent of the labels."""
    iso = {c: LaplaceMechanism(epsilon=10.0) for c in CONCEPTS}
    F, y = simulate_fingerprints(iso, _pool(), n_groups=40, group_size=10, n_releases=5, rng=2)
    matcher = TemplateMatcher.from_covariances(
        {c: m.covariance_diagonal for c, m in _mechs().items()}
    )
    rep = matcher.score(F, y)
    assert abs(rep.accuracy - 1 / 3) < _chance_bound(len(y))


def test_keyed_noise_gives_exactly_chance_across_releases():
    """Keyed re-releases are identical: the release variance is 0 and every group gets the same
    prediction, so with balanced labels the accuracy is exactly 1/3."""
    F, y = simulate_fingerprints(
        _mechs(), _pool(), n_groups=10, group_size=10, n_releases=4, key=KEY
    )
    assert (F == 0).all()
    matcher = TemplateMatcher.from_covariances(
        {c: m.covariance_diagonal for c, m in _mechs().items()}
    )
    assert matcher.score(F, y).accuracy == pytest.approx(1 / 3)


def test_keyed_noise_still_leaks_across_documents():
    """The single-release (across-documents) fingerprint is not stopped by keyed noise."""
    F, y = simulate_fingerprints(
        _mechs(), _pool(), n_groups=10, group_size=20, n_releases=1, across="documents", key=KEY
    )
    matcher = TemplateMatcher.from_covariances(
        {c: m.covariance_diagonal for c, m in _mechs().items()}
    )
    assert matcher.score(F, y).accuracy > 0.9


def test_full_smoothing_and_secret_permutation_fall_to_chance():
    templates = TemplateMatcher.from_covariances(
        {c: m.covariance_diagonal for c, m in _mechs().items()}
    )
    F, y = simulate_fingerprints(
        _mechs(smoothing=1.0), _pool(), n_groups=40, group_size=10, n_releases=5, rng=3
    )
    assert abs(templates.score(F, y).accuracy - 1 / 3) < _chance_bound(len(y))
    rng = np.random.default_rng(4)
    perm = {
        c: MahalanobisMechanism(
            epsilon=10.0, covariance=permuted_diagonal(m.covariance_diagonal, rng)
        )
        for c, m in _mechs().items()
    }
    F, y = simulate_fingerprints(perm, _pool(), n_groups=40, group_size=10, n_releases=5, rng=5)
    # the permuted diagonals differ per concept, so this is only approximately label-blind for
    # templates built from the unpermuted masks
    assert templates.score(F, y).accuracy < 0.7


@pytest.mark.slow
def test_mlp_classifier_beats_chance_and_is_reproducible():
    Fr, yr = simulate_fingerprints(
        _mechs(), _pool(seed=8), n_groups=15, group_size=10, n_releases=5, rng=6
    )
    F, y = simulate_fingerprints(_mechs(), _pool(), n_groups=10, group_size=10, n_releases=5, rng=7)
    clf = FingerprintClassifier(epochs=60).fit(Fr, yr, rng=0)
    assert clf.score(F, y).accuracy > 0.9
    again = FingerprintClassifier(epochs=60).fit(Fr, yr, rng=0)
    assert again.predict(F) == clf.predict(F)


@pytest.mark.slow
def test_mlp_classifier_falls_to_chance_under_isotropic_and_keyed_noise():
    """Isotropic noise: test fingerprints are independent of their labels, so a classifier
    trained elsewhere is right 1/3 of the time in expectation (bound as for templates). Keyed
    re-releases: every fingerprint is 0 -> one input -> one prediction -> exactly 1/3."""
    iso = {c: LaplaceMechanism(epsilon=10.0) for c in CONCEPTS}
    Fr, yr = simulate_fingerprints(
        iso, _pool(seed=8), n_groups=15, group_size=10, n_releases=5, rng=6
    )
    F, y = simulate_fingerprints(iso, _pool(), n_groups=40, group_size=10, n_releases=5, rng=7)
    clf = FingerprintClassifier(epochs=60).fit(Fr, yr, rng=0)
    assert abs(clf.score(F, y).accuracy - 1 / 3) < _chance_bound(len(y))
    Fr, yr = simulate_fingerprints(
        _mechs(), _pool(seed=8), n_groups=15, group_size=10, n_releases=5, rng=8
    )
    clf = FingerprintClassifier(epochs=60).fit(Fr, yr, rng=0)
    F, y = simulate_fingerprints(
        _mechs(), _pool(), n_groups=10, group_size=10, n_releases=4, key=KEY
    )
    assert len(set(clf.predict(F))) == 1
    assert clf.score(F, y).accuracy == pytest.approx(1 / 3)
