"""Concept profiles (files, Sigma, combining), neuron sensitivity and the embedding cache."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError, MahalanobisMechanism
from privembed.concepts import (
    Concept,
    ConceptProfile,
    embed_texts,
    learn_profile,
    neuron_sensitivity,
    sensitivity_diagnostic,
)


def _profile(d=8, seed=0, name="disease", model="toy-model"):
    rng = np.random.default_rng(seed)
    mask = np.where(rng.random(d) < 0.4, rng.random(d), 0.0)
    return ConceptProfile(
        mask=mask,
        log_alpha=rng.normal(size=d),
        log_beta=rng.normal(size=d),
        sensitivity=rng.random(d),
        metadata={
            "concept": Concept(name=name, tokens=("flu",)).to_dict(),
            "embedding_model": model,
            "training": {"lam": 1e-3},
            "probe": {"val_accuracy_masked": 0.9, "val_accuracy_unmasked": 0.95},
            "pairs": {"n_pairs": 10},
        },
    )


def test_save_load_round_trip_with_any_suffix(tmp_path):
    p = _profile()
    path = p.save(tmp_path / "disease.profile")
    assert path.exists() and not (tmp_path / "disease.profile.npz").exists()
    q = ConceptProfile.load(path)
    for name in ("mask", "log_alpha", "log_beta", "sensitivity"):
        np.testing.assert_array_equal(getattr(q, name), getattr(p, name))
    assert q.metadata["format"] == "privembed.concept-profile/1"
    assert q.concept == p.concept and q.concept_names == ["disease"]
    assert q.summary()["val_accuracy_masked"] == 0.9 and q.summary()["lambda"] == 1e-3


def test_mahalanobis_from_profile_reads_the_file_and_normalises_the_trace(tmp_path):
    p = _profile(d=16, seed=3)
    path = p.save(tmp_path / "x.profile")
    mech = MahalanobisMechanism.from_profile(path, epsilon=5.0, mask_delta=1e-3)
    S = mech.covariance_diagonal
    assert S is not None  # a mask gives a diagonal Sigma
    d = p.dim
    assert S.sum() == pytest.approx(d, rel=1e-12)  # trace d: Laplace's total noise power
    np.testing.assert_allclose(S, (p.mask + 1e-3) * d / (p.mask + 1e-3).sum(), rtol=1e-12)
    np.testing.assert_allclose(S, p.covariance(mask_delta=1e-3), rtol=1e-12)
    S_again = p.mechanism(epsilon=5.0, mask_delta=1e-3).covariance_diagonal
    assert S_again is not None
    np.testing.assert_allclose(S_again, S)
    # smoothing keeps the trace at d and moves Sigma towards I
    Ss = p.covariance(mask_delta=1e-3, smoothing=0.5)
    assert Ss.sum() == pytest.approx(d) and np.ptp(Ss) < np.ptp(S)
    X = np.random.default_rng(0).standard_normal((5, d))
    assert mech.privatize(X, rng=0).shape == (5, d)


def test_combine_rules_and_errors():
    a, b = _profile(seed=1, name="disease"), _profile(seed=2, name="drug")
    c = ConceptProfile.combine([a, b])
    np.testing.assert_array_equal(c.mask, np.maximum(a.mask, b.mask))
    np.testing.assert_array_equal(c.log_alpha, np.maximum(a.log_alpha, b.log_alpha))
    assert c.concept_names == ["disease", "drug"] and c.metadata["combine"]["rule"] == "max"
    assert c.concept is None and c.metadata["embedding_model"] == "toy-model"
    m = ConceptProfile.combine([a, b], rule="mean")
    np.testing.assert_allclose(m.mask, (a.mask + b.mask) / 2)
    with pytest.raises(DataError, match="different dimensions"):
        ConceptProfile.combine([a, _profile(d=9)])
    with pytest.raises(DataError, match="different embedding models"):
        ConceptProfile.combine([a, _profile(model="other")])
    with pytest.raises(ValueError, match="rule must be one of 'max', 'mean'"):
        ConceptProfile.combine([a], rule="min")


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        ConceptProfile.load(tmp_path / "missing.profile")
    (tmp_path / "junk.profile").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="cannot read profile"):
        ConceptProfile.load(tmp_path / "junk.profile")
    np.save(tmp_path / "m.npy", np.ones(3))
    with pytest.raises(DataError, match=r"not an \.npz archive"):
        ConceptProfile.load(tmp_path / "m.npy")
    np.savez(tmp_path / "e.npz", embeddings=np.ones((2, 3)))
    with pytest.raises(DataError, match="no 'mask' array"):
        ConceptProfile.load(tmp_path / "e.npz")
    with pytest.raises(DataError, match=r"mask values must be in \[0, 1\]"):
        ConceptProfile(mask=[0.5, 1.5])
    with pytest.raises(DataError, match=r"log_alpha must have shape \(2,\)"):
        ConceptProfile(mask=[0.5, 0.5], log_alpha=[1.0])


def test_neuron_sensitivity_and_diagnostic():
    rng = np.random.default_rng(0)
    neg = rng.standard_normal((400, 30))
    pos = neg + rng.normal(0, 0.05, size=neg.shape)
    pos[:, [4, 5, 6]] += 1.0
    delta = neuron_sensitivity(pos, neg)
    np.testing.assert_allclose(delta, np.abs(pos - neg).max(axis=0))
    assert set(np.argsort(-delta)[:3]) == {4, 5, 6}
    good = np.zeros(30)
    good[[4, 5, 6]] = 1.0
    diag = sensitivity_diagnostic(pos, neg, good, fraction=0.1)
    assert diag.top_dims == [4, 5, 6] and diag.ratio > 5 and diag.wilcoxon_pvalue < 1e-10
    assert diag.ranksum_pvalue <= 0.05 + 1e-12  # the smallest exact p for 3 vs 3 dimensions
    # a ranking that ignores the concept finds nothing
    blind = np.zeros(30)
    blind[[20, 21, 22]] = 1.0
    d2 = sensitivity_diagnostic(pos, neg, blind)
    assert d2.ratio < 1.5 and d2.wilcoxon_pvalue > 0.01
    with pytest.raises(DataError, match=r"scores must have shape \(30,\)"):
        sensitivity_diagnostic(pos, neg, np.zeros(3))


class CountingEmbedder:
    """Deterministic toy embedder: a random unit vector per word, summed."""

    def __init__(self, d=16):
        self.d, self.calls = d, 0

    def _word(self, w):
        import zlib

        return np.random.default_rng(zlib.crc32(w.lower().encode())).standard_normal(self.d)

    def encode(self, texts):
        self.calls += 1
        X = np.array([sum(self._word(w) for w in (t.split() or ["<empty>"])) for t in texts])
        return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)

    def metadata(self):
        return {"embedding_model": f"toy-{self.d}", "dim": self.d, "normalized": True}


def test_embedding_cache(tmp_path):
    emb = CountingEmbedder()
    a = embed_texts(["a b", "c"], embedder=emb, cache_dir=tmp_path)
    b = embed_texts(["a b", "c"], embedder=emb, cache_dir=tmp_path)
    assert emb.calls == 1 and np.array_equal(a, b) and a.dtype == np.float32
    embed_texts(["c", "a b"], embedder=emb, cache_dir=tmp_path)
    assert emb.calls == 2 and len(list(tmp_path.glob("*.npz"))) == 2
    for f in tmp_path.glob("*.npz"):
        f.write_bytes(b"corrupt")
    embed_texts(["a b", "c"], embedder=emb, cache_dir=tmp_path)
    assert emb.calls == 3  # a broken cache entry is recomputed, not trusted
    embed_texts(["a b", "c"], embedder=emb, use_cache=False)
    assert emb.calls == 4


@pytest.mark.slow
def test_learn_profile_pipeline(tmp_path):
    import torch  # noqa: F401 - a dev dependency: a broken install fails, never skips

    texts = [f"patient {i} has {d} today" for i in range(60) for d in ("flu", "gout")][:100]
    texts += [f"routine visit number {i}" for i in range(10)]
    concept = Concept(name="disease", tokens=("flu", "gout"))
    prof = learn_profile(
        texts,
        concept,
        embedder=CountingEmbedder(),
        cache_dir=tmp_path,
        rng=0,
        epochs=5,
        lr=0.01,
        hidden=(16,),
        baseline_epochs=3,
    )
    md = prof.metadata
    assert md["pairs"]["n_pairs"] == 100 and md["pairs"]["n_without_concept"] == 10
    assert md["concept"]["tokens"] == ["flu", "gout"] and md["seed"] == 0
    assert md["embedding_model"] == "toy-16" and prof.dim == 16
    assert md["training"]["lam"] == 1e-3 and md["training"]["epochs"] == 5
    assert md["probe"]["val_accuracy_masked"] is not None and md["sensitivity_diagnostic"]
    assert prof.sensitivity is not None and prof.log_alpha is not None
    with pytest.raises(DataError, match="contain the concept"):
        learn_profile(["nothing here"], concept, embedder=CountingEmbedder(), cache_dir=tmp_path)
