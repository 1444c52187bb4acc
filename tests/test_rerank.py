"""k' from theory: the cosine laws, the corpus profile, and predicted vs measured recall."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privembed import DataError, get_mechanism
from privembed.core import theory
from privembed.mechanisms import LaplaceMechanism
from privembed.search.rerank import (
    RerankPlanner,
    ScoreProfile,
    cosine_law,
    predicted_recall,
    protected_ranks,
    recall_at_depths,
    rerank_depth,
)


class _SimulatedLaplace(LaplaceMechanism):
    """Laplace under another name: cosine_law must take the privatize (Monte-Carlo) path."""

    name = "laplace-simulated"


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("laplace", {"epsilon": 150.0}, theory.expected_cosine_laplace(150.0, 384)),
        ("gaussian", {"epsilon": 80.0, "delta": 1e-5}, None),
        ("purkayastha", {"epsilon": 150.0}, theory.expected_cosine_purkayastha(150.0, 384)),
    ],
)
def test_cosine_law_mean_matches_the_closed_forms(name, params, expected):
    m = get_mechanism(name, **params)
    if expected is None:
        expected = theory.expected_cosine_gaussian(m.sigma, 384)
    c = cosine_law(m, 384, n=40_000, rng=0)
    # mean within 4.4 standard errors of the exact expectation
    assert abs(c.mean() - expected) < 4.4 * c.std() / np.sqrt(c.size)


def test_cosine_law_by_simulation_matches_the_closed_law():
    law = cosine_law(LaplaceMechanism(epsilon=100.0), 64, n=3000, rng=1)
    sim = cosine_law(_SimulatedLaplace(epsilon=100.0), 64, n=3000, rng=2)
    # two-sample KS test: same law, so p should not fall below 0.001
    assert stats.ks_2samp(law, sim).pvalue > 1e-3


def _corpus(rng, n=6000, d=96, clusters=60):
    """An anisotropic synthetic corpus (shared mean direction + clusters) and a query maker."""
    mean = rng.standard_normal(d)
    mean /= np.linalg.norm(mean)
    centres = rng.standard_normal((clusters, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    X = 0.35 * mean + 0.5 * centres[rng.integers(0, clusters, n)]
    X += 0.9 * rng.standard_normal((n, d)) / np.sqrt(d)
    X /= np.linalg.norm(X, axis=1, keepdims=True)

    def queries(m):
        Q = X[rng.integers(0, n, m)] + 1.2 * rng.standard_normal((m, d)) / np.sqrt(d)
        return Q / np.linalg.norm(Q, axis=1, keepdims=True)

    return X, queries


def _unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


@pytest.mark.slow
@pytest.mark.parametrize("side", ["documents", "queries", "both"])
@pytest.mark.parametrize(
    ("name", "params"),
    [("laplace", {"epsilon": 60.0}), ("purkayastha", {"epsilon": 60.0})],
)
def test_theory_depth_reaches_its_recall_on_held_out_queries(side, name, params):
    rng = np.random.default_rng(5)
    X, queries = _corpus(rng)
    profile = ScoreProfile.from_embeddings(queries(120), X, top_k=20, rng=0)
    m = get_mechanism(name, **params)
    kw = {"documents": m, "queries": m} if side == "both" else {side: m}
    kp = rerank_depth(profile, k=10, recall=0.9, rng=1, **kw)
    assert 10 < kp < X.shape[0]
    Qt = queries(400)  # held out: not the profile's queries
    Y = _unit(m.privatize(X, rng=2)) if side != "queries" else X
    Qp = _unit(m.privatize(Qt, rng=3)) if side != "documents" else Qt
    measured = recall_at_depths(protected_ranks(Qt @ X.T, Qp @ Y.T, k=10), kp)[0]
    # the criterion: within 0.03 of the target (400 queries x 10 documents; the
    # measurement's own standard error is about 0.01)
    assert abs(measured - 0.9) <= 0.03, (kp, measured)


def test_predicted_recall_is_monotone_and_depth_grows_with_noise():
    rng = np.random.default_rng(0)
    scores = np.tanh(rng.normal(0.1, 0.15, size=(30, 4000)))
    prof = ScoreProfile.from_scores(scores, dim=384, top_k=10)
    lap = get_mechanism("laplace", epsilon=300.0)
    r = predicted_recall(prof, [10, 50, 200, 1000, 4000], k=10, documents=lap, rng=0)
    assert np.all(np.diff(r) >= -1e-12) and r[-1] == pytest.approx(1.0, abs=1e-6)
    kp = [
        rerank_depth(prof, documents=get_mechanism("laplace", epsilon=e), rng=0)
        for e in (600.0, 300.0, 150.0)
    ]
    assert kp[0] < kp[1] < kp[2]
    assert rerank_depth(prof, recall=0.8, documents=lap, rng=0) <= rerank_depth(
        prof, recall=0.95, documents=lap, rng=0
    )
    plan = RerankPlanner(prof, documents=lap, rng=0)
    assert plan.depth(k=10, recall=0.95) == plan.depth(k=10, recall=0.95)
    assert 0.0 < plan.recall(plan.depth(k=10, recall=0.95), k=10) >= 0.95


def test_profile_from_embeddings_agrees_with_from_scores_and_round_trips(tmp_path):
    rng = np.random.default_rng(3)
    X, queries = _corpus(rng, n=800, d=32)
    Q = queries(20)
    a = ScoreProfile.from_embeddings(Q, X, top_k=15, bins=500, rng=0, block=7)
    b = ScoreProfile.from_scores(Q @ X.T, dim=32, top_k=15, bins=500)
    # float32 products may move a score across a bin edge: compare totals and the top scores
    assert a.counts.sum(axis=1).tolist() == [800] * 20 == b.counts.sum(axis=1).tolist()
    np.testing.assert_allclose(a.top, b.top, atol=1e-5)
    assert np.all(np.diff(a.top, axis=1) <= 0)
    assert 0.0 <= a.rho < 1.0
    p = a.save(tmp_path / "profile.npz")
    c = ScoreProfile.load(p)
    np.testing.assert_array_equal(c.counts, a.counts)
    assert (c.n_docs, c.dim, c.rho) == (a.n_docs, a.dim, a.rho)
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(DataError, match="is not a score profile"):
        ScoreProfile.load(tmp_path / "other.npz")


def test_documents_can_stand_in_for_queries():
    rng = np.random.default_rng(7)
    X, _ = _corpus(rng, n=500, d=32)
    prof = ScoreProfile.from_embeddings(X[:10], X, top_k=5, rng=0)
    assert prof.n_docs == 499 and prof.counts.sum(axis=1).tolist() == [499] * 10
    assert np.all(prof.top[:, 0] < 1.0 - 1e-6)
    with_self = ScoreProfile.from_embeddings(X[:10], X, top_k=5, exclude_identical=False, rng=0)
    np.testing.assert_allclose(with_self.top[:, 0], 1.0, atol=1e-5)


def test_rho_is_the_mean_residual_cosine():
    rng = np.random.default_rng(4)
    d = 200
    iso = _unit(rng.standard_normal((3000, d)))
    assert ScoreProfile.from_embeddings(iso[:5], iso, rng=0).rho < 0.01
    common = _unit(0.6 * np.eye(d)[0] + _unit(rng.standard_normal((3000, d))))
    q = _unit(rng.standard_normal((5, d)))
    # residual cosine of docs a*e0 + b*u (u isotropic): about a^2 / (a^2 + b^2) = 0.36 / 1.36
    assert ScoreProfile.from_embeddings(q, common, rng=0).rho == pytest.approx(
        0.36 / 1.36, abs=0.03
    )


def test_protected_ranks_against_brute_force():
    rng = np.random.default_rng(6)
    C = rng.random((7, 50))
    P = C + rng.normal(0, 0.2, C.shape)
    R = protected_ranks(C, P, k=5)
    for q in range(7):
        top = np.argsort(-C[q])[:5]
        assert sorted(R[q].tolist()) == sorted(int((P[q] >= P[q, j]).sum()) for j in top)
    assert recall_at_depths(R, 50)[0] == 1.0
    assert recall_at_depths(protected_ranks(C, C, k=5), 5)[0] == 1.0


def test_bad_input():
    prof = ScoreProfile.from_scores(np.random.default_rng(0).random((3, 100)), dim=16, top_k=5)
    lap = get_mechanism("laplace", epsilon=10.0)
    with pytest.raises(ValueError, match="give the documents' mechanism, the queries' mechanism"):
        rerank_depth(prof, k=5)
    with pytest.raises(ValueError, match="k must be <= the profile's top_k = 5, got k=10"):
        rerank_depth(prof, k=10, documents=lap)
    with pytest.raises(ValueError, match="recall must be < 1"):
        rerank_depth(prof, k=5, recall=1.0, documents=lap)
    with pytest.raises(TypeError, match="documents must be a privembed Mechanism"):
        rerank_depth(prof, k=5, documents="laplace")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="profile must be a ScoreProfile"):
        rerank_depth(np.zeros((3, 3)), documents=lap)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keeps the dimension"):
        cosine_law(get_mechanism("projection", k=8, epsilon=5.0, delta=1e-5), 16)
    with pytest.raises(DataError, match="same rows"):
        ScoreProfile(np.zeros((2, 10)), np.zeros((3, 4)), 10, 16)
    with pytest.raises(DataError, match="one shape"):
        protected_ranks(np.zeros((2, 3)), np.zeros((2, 4)))


# ---- k' theory in a private subspace ----------------------------------------------------------
def _subspace(X, k, eps, noise="laplace"):
    from privembed.mechanisms.subspace import SubspaceBasis, SubspaceMechanism

    extra = {"delta": 1e-5} if noise == "gaussian" else {}
    b = SubspaceBasis.from_embeddings(X, max_components=min(48, X.shape[1]))
    return SubspaceMechanism(basis=b, epsilon=eps, k=k, noise=noise, **extra)


@pytest.mark.slow
@pytest.mark.parametrize(("noise", "eps"), [("laplace", 40.0), ("purkayastha", 20.0)])
def test_subspace_theory_depth_reaches_its_recall_on_held_out_queries(noise, eps):
    rng = np.random.default_rng(8)
    X, queries = _corpus(rng)
    m = _subspace(X, 12, eps, noise)
    prof = ScoreProfile.from_subspace(queries(120), X, m, top_k=20)
    assert prof.dim == 12 and prof.norms is not None
    kp = RerankPlanner(prof, documents=m, rng=1).depth(k=10, recall=0.9)
    assert 10 < kp < X.shape[0]
    Qt = queries(400)
    Y = _unit(m.privatize(X, rng=2))
    P = _unit(m.public_transform(Qt)) @ Y.T
    measured = recall_at_depths(protected_ranks(Qt @ X.T, P, k=10), kp)[0]
    assert abs(measured - 0.9) <= 0.03, (kp, measured)


def test_subspace_profile_round_trips_and_refuses_what_it_cannot_model(tmp_path):
    rng = np.random.default_rng(9)
    X, queries = _corpus(rng, n=800, d=32)
    m = _subspace(X, 6, 30.0)
    Q = queries(15)
    prof = ScoreProfile.from_subspace(Q, X, m, top_k=10, norm_nodes=8)
    assert prof.counts.sum(axis=1).tolist() == [800] * 15
    # the top scores are the subspace cosines of the true (full-dimension) top documents
    V = m.public_transform(X)
    A = m.public_transform(Q)
    best = np.argsort(-(Q @ X.T), axis=1)[:, :10]
    sub = np.einsum("qk,qjk->qj", _unit(A), _unit(V)[best])
    np.testing.assert_allclose(prof.top, sub, atol=1e-5)
    np.testing.assert_allclose(prof.top_norms, np.linalg.norm(V, axis=1)[best], rtol=1e-6)
    again = ScoreProfile.load(prof.save(tmp_path / "p.npz"))
    np.testing.assert_array_equal(again.norms, prof.norms)
    np.testing.assert_array_equal(again.top_norms, prof.top_norms)
    with pytest.raises(ValueError, match="protected queries against a subspace collection"):
        RerankPlanner(prof, documents=m, queries=get_mechanism("laplace", epsilon=5.0)).depth()
    with pytest.raises(ValueError, match="no cosine law per signal norm"):
        RerankPlanner(prof, documents=get_mechanism("laplace", epsilon=5.0)).depth()
    with pytest.raises(ValueError, match="needs a subspace mechanism"):
        ScoreProfile.from_subspace(Q, X, get_mechanism("laplace", epsilon=5.0))


def test_best_subspace_dimension_is_the_best_predicted_candidate():
    from privembed.search.rerank import best_subspace_dimension

    rng = np.random.default_rng(10)
    X, queries = _corpus(rng, n=2000, d=48)
    Q = queries(40)
    best, table = best_subspace_dimension(
        Q, X, lambda kk: _subspace(X, kk, 30.0), depth=100, candidates=(4, 8, 16, 32, 64)
    )
    assert set(table) == {4, 8, 16, 32}  # 64 > the basis' 48 components: skipped
    assert table[best] == max(table.values())


@pytest.mark.slow
def test_pseudo_queries_fetch_more_than_documents_standing_in_for_queries():
    """Documents used as queries are closer to their neighbours than real queries: a profile
    built from them under-fetches. With queries that are noisy versions of documents (the
    synthetic corpus), the diluted pseudo-queries plan a larger k' that reaches the target
    within 0.03 on held-out queries, where plain documents stay below it."""
    from privembed.search.rerank import pseudo_queries

    rng = np.random.default_rng(5)
    X, queries = _corpus(rng)
    m = get_mechanism("laplace", epsilon=60.0)
    Qt = queries(400)
    Y = _unit(m.privatize(X, rng=2))
    ranks = protected_ranks(Qt @ X.T, Qt @ Y.T, k=10)
    pick = rng.choice(X.shape[0], 150, replace=False)
    plain = ScoreProfile.from_embeddings(X[pick], X, top_k=20, rng=0)
    pseudo = ScoreProfile.from_embeddings(
        pseudo_queries(X[pick], rng=3), X, top_k=20, rng=0, sources=pick
    )
    kp, got = {}, {}
    for name, prof in (("plain", plain), ("pseudo", pseudo)):
        kp[name] = RerankPlanner(prof, documents=m, rng=1).depth(k=10, recall=0.9)
        got[name] = recall_at_depths(ranks, kp[name])[0]
    assert kp["plain"] < kp["pseudo"] and got["plain"] < got["pseudo"], (kp, got)
    assert got["plain"] < 0.9 - 0.005, got  # documents under-fetch
    assert abs(got["pseudo"] - 0.9) <= 0.03, got


def test_pseudo_query_profiles_leave_out_their_source_document():
    from privembed.search.rerank import document_rows, pseudo_queries

    rng = np.random.default_rng(12)
    X, _ = _corpus(rng, n=500, d=32)
    pick = np.array([3, 17, 250])
    assert document_rows(X[pick], X).tolist() == [3, 17, 250]
    Qp = pseudo_queries(X[pick], rng=0)
    assert np.all(np.einsum("ij,ij->i", Qp, X[pick]) < 0.95)  # diluted, not the document
    prof = ScoreProfile.from_embeddings(Qp, X, top_k=5, rng=0, sources=pick)
    assert prof.n_docs == 499  # the source document is not a competitor
    with pytest.raises(DataError, match="not one of the documents"):
        document_rows(Qp, X)
    with pytest.raises(DataError, match="sources must be 3 row numbers"):
        ScoreProfile.from_embeddings(Qp, X, sources=[1, 2])
