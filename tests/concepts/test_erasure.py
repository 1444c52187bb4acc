"""LEACE concept erasure: a linear probe drops to chance on held-out data; files; bad input."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from privembed import DataError
from privembed.concepts.erasure import ConceptEraser, eraser_path


def _data(rng, n, d=48, classes=2):
    """Unit embeddings whose concept (a class id) shifts a few directions, plus nuisance."""
    z = rng.integers(0, classes, n)
    dirs = np.linalg.qr(rng.standard_normal((d, classes)))[0].T  # orthonormal class directions
    X = rng.standard_normal((n, d)) * np.linspace(0.3, 1.5, d) + 1.5 * dirs[z]
    return X / np.linalg.norm(X, axis=1, keepdims=True), z


def _probe_accuracy(Xtr, ztr, Xte, zte) -> float:
    clf = LogisticRegression(max_iter=2000, C=10.0).fit(Xtr, ztr)
    return float(clf.score(Xte, zte))


@pytest.mark.parametrize("classes", [2, 4])
def test_linear_probe_drops_to_chance_on_held_out_data(classes):
    rng = np.random.default_rng(0)
    X, z = _data(rng, 6000, classes=classes)
    Xtr, ztr, Xte, zte = X[:4000], z[:4000], X[4000:], z[4000:]
    before = _probe_accuracy(Xtr, ztr, Xte, zte)
    eraser = ConceptEraser.fit(Xtr, ztr)
    assert eraser.rank == classes - 1
    after = _probe_accuracy(eraser.transform(Xtr), ztr, eraser.transform(Xte), zte)
    # chance = the majority share of the held-out labels; the probe may not beat it by more
    # than 4.4 binomial standard errors (n = 2000)
    chance = np.bincount(zte).max() / zte.size
    se = np.sqrt(chance * (1 - chance) / zte.size)
    assert before > chance + 0.25  # the concept is linearly readable before erasure
    assert after <= chance + 4.4 * se, (before, after, chance)


def test_from_pairs_and_utility_is_kept():
    rng = np.random.default_rng(2)
    X, z = _data(rng, 3000)
    er = ConceptEraser.from_pairs(X[z == 1], X[z == 0], metadata={"concept": "toy"})
    assert er.metadata["concept"] == "toy" and er.metadata["n_pos"] == int((z == 1).sum())
    Y = er.transform(X)
    # one direction of 48 is removed: rows stay close to the originals on average
    assert np.mean(np.sum(X * Y, axis=1)) > 0.8
    np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 1.0, rtol=1e-12)


def test_transform_keeps_dtype_and_does_not_mutate():
    rng = np.random.default_rng(3)
    X, z = _data(rng, 500, d=16)
    er = ConceptEraser.fit(X, z)
    X32 = X.astype(np.float32)
    copy = X32.copy()
    Y = er.transform(X32)
    assert Y.dtype == np.float32 and Y.shape == X32.shape
    np.testing.assert_array_equal(X32, copy)
    assert er.transform(X[0]).shape == (16,)
    raw = er.transform(X, renormalize=False)
    np.testing.assert_allclose(raw, (X - er.bias) @ er.projection.T + er.bias, atol=1e-12)


def test_saved_beside_the_profile_and_reloaded(tmp_path):
    rng = np.random.default_rng(4)
    X, z = _data(rng, 600, d=16)
    er = ConceptEraser.fit(X, z, metadata={"concept": "disease"})
    p = er.save(eraser_path(tmp_path / "disease.profile"))
    assert p.name == "disease.profile.eraser.npz"
    back = ConceptEraser.load(p)
    np.testing.assert_array_equal(back.transform(X), er.transform(X))
    assert back.metadata["concept"] == "disease" and "format" not in back.metadata
    assert repr(back) == "ConceptEraser(dim=16, rank=1, concept='disease')"
    np.savez(tmp_path / "x.npz", a=np.zeros(2))
    with pytest.raises(DataError, match="is not a concept eraser"):
        ConceptEraser.load(tmp_path / "x.npz")
    with pytest.raises(FileNotFoundError, match="eraser not found"):
        ConceptEraser.load(tmp_path / "nope.npz")


def test_bad_input():
    rng = np.random.default_rng(5)
    X, z = _data(rng, 100, d=8)
    with pytest.raises(DataError, match="labels has 99 entries but X has 100 rows"):
        ConceptEraser.fit(X, z[:99])
    with pytest.raises(DataError, match="at least 2 classes"):
        ConceptEraser.fit(X, np.zeros(100))
    with pytest.raises(ValueError, match="method must be one of"):
        ConceptEraser.fit(X, z, method="ridge")
    er = ConceptEraser.fit(X, z)
    with pytest.raises(DataError):
        er.transform(np.ones((3, 9)))
    with pytest.raises(DataError, match="must match"):
        ConceptEraser(np.zeros((8, 1)), np.zeros((2, 8)))


# ---- erasure fitted and checked on labelled real text -------------------------------------------
def _real_and_pairs(rng, n=3000, d=32):
    """A concept that real text carries in a *topic* direction t (texts that mention a disease
    talk about medicine throughout), while generated D+/D- pairs differ only by the word's own
    direction w (the same template with and without the word). Rows are not normalised here, so
    that erasing the concept leaves norms that do not depend on it (see
    test_renormalising_after_erasure_can_reintroduce_the_concept for what happens otherwise)."""
    t, w = np.linalg.qr(rng.standard_normal((d, 2)))[0].T
    z = rng.integers(0, 2, n)
    real = rng.standard_normal((n, d)) * 0.6 + np.outer(z, 1.5 * t + 0.8 * w)
    base = rng.standard_normal((n, d)) * 0.6
    pos, neg = base + 0.8 * w, base
    return real, z, pos, neg


def test_a_pairs_eraser_leaves_real_text_readable_and_a_real_text_eraser_does_not():
    from privembed.concepts.erasure import fit_checked, probe_aucs

    rng = np.random.default_rng(5)
    real, z, pos, neg = _real_and_pairs(rng)
    fit, held = np.arange(2000), np.arange(2000, 3000)
    pairs = ConceptEraser.from_pairs(pos, neg)
    E = pairs.transform(real)
    lin, _ = probe_aucs(E[fit], z[fit], E[held], z[held], mlp=False, rng=0)
    assert lin > 0.95  # the generated-pair eraser erased nothing a probe reads on real text
    er, check = fit_checked(real, z, mlp=True, rng=0, data="real texts (toy)")
    assert check.linear_before > 0.95 and check.mlp_before > 0.95
    assert check.linear_after < 0.6  # erased on the distribution it was fitted on
    assert er.metadata["check"]["linear_after"] == check.linear_after
    assert er.metadata["fitted_on"] == "real texts (toy)" and check.n_heldout == 900


def test_the_check_warns_when_the_concept_stays_readable():
    from privembed.concepts.erasure import ErasureCheck

    c = ErasureCheck(0.99, 0.52, 0.99, 0.93, 700, 300, 0.4, "real texts (notes.jsonl)")
    (line,) = c.readable()
    assert line.startswith("erasure leaves the concept readable: a non-linear (MLP) probe reads")
    assert "0.930 on held-out real texts (notes.jsonl) (0.990 before erasure" in line
    assert "linear 0.990 -> 0.520, MLP 0.990 -> 0.930" in c.describe()


def test_fit_checked_keeps_pairs_together_and_refuses_bad_labels():
    from privembed.concepts.erasure import _split, fit_checked

    y = np.r_[np.ones(50, dtype=int), np.zeros(50, dtype=int)]
    groups = np.r_[np.arange(50), np.arange(50)]
    fit, test = _split(y, 0.3, groups, 0)
    assert not set(groups[fit]) & set(groups[test])  # no pair on both sides
    X = np.random.default_rng(0).standard_normal((100, 8))
    with pytest.raises(DataError, match="needs 2 classes of labels, got 3"):
        fit_checked(X, np.arange(100) % 3)
    with pytest.raises(DataError, match="labels must be"):
        fit_checked(X, np.ones(99))
    with pytest.raises(DataError, match="too few to hold some out"):
        fit_checked(X, np.r_[1, np.zeros(99, dtype=int)])


def test_renormalising_after_erasure_can_reintroduce_the_concept():
    """Found while building the check: LEACE equalises the class means of the erased rows, but
    their norms still differ by class, and scaling rows back to unit length (what every
    normalising mechanism does next) makes the means differ again. The check therefore probes
    the rows as they are released (renormalised) and warns."""
    from privembed.concepts.erasure import fit_checked, probe_aucs

    rng = np.random.default_rng(5)
    t, w = np.linalg.qr(rng.standard_normal((32, 2)))[0].T
    z = rng.integers(0, 2, 3000)
    X = rng.standard_normal((3000, 32)) * 0.6 + np.outer(z, 1.2 * t + 0.3 * w)
    X /= np.linalg.norm(X, axis=1, keepdims=True)  # the concept is a large part of the norm
    fit, held = np.arange(2100), np.arange(2100, 3000)
    er = ConceptEraser.fit(X[fit], z[fit])
    raw = er.transform(X, renormalize=False)
    unit = er.transform(X, renormalize=True)
    assert probe_aucs(raw[fit], z[fit], raw[held], z[held], mlp=False, rng=0)[0] < 0.56
    assert probe_aucs(unit[fit], z[fit], unit[held], z[held], mlp=False, rng=0)[0] > 0.75
    _, check = fit_checked(X, z, mlp=False, rng=0)
    assert check.linear_after > 0.75 and check.readable()  # measured as released, and warned


def test_iterative_erasure_reaches_chance_where_one_leace_fit_does_not():
    """Where renormalisation brings the concept back after LEACE (previous test's data), the
    iterative eraser, fitted on the released rows themselves, leaves a held-out linear probe
    near chance; the check records its rank and method."""
    from privembed.concepts.erasure import fit_checked

    rng = np.random.default_rng(5)
    t, w = np.linalg.qr(rng.standard_normal((32, 2)))[0].T
    z = rng.integers(0, 2, 3000)
    X = rng.standard_normal((3000, 32)) * 0.6 + np.outer(z, 1.2 * t + 0.3 * w)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    _, leace = fit_checked(X, z, mlp=False, rng=0)
    er, it = fit_checked(X, z, mlp=False, rng=0, method="iterative")
    assert leace.linear_after > 0.75
    assert it.linear_after < 0.6 and it.readable() == [], it
    assert er.metadata["method"].startswith("iterative") and er.rank >= 1
    with pytest.raises(ValueError, match="method must be one of 'leace', 'iterative'"):
        fit_checked(X, z, method="inlp")
