"""Ranking, correlation and qrels metrics against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privembed import DataError
from privembed.evaluation import (
    exact_search,
    ndcg_at_k,
    pearson,
    qrels_recall_at_k,
    recall_at_k,
    retrieval_metrics,
    spearman,
    sts_correlation,
)
from privembed.evaluation.metrics import _numpy_search, hits_at_k, rank_counts

# ---- recall@k with ties -----------------------------------------------------------------------


def test_rank_counts_and_tie_policies_by_hand():
    # database rows 0 and 1 are identical; row 2 is orthogonal; row 3 is between
    D = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    Q = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.2]])
    g, t = rank_counts(Q, D)
    # q0: target D0 (cos 1) ties D1 -> greater 0, ties 1; q1 likewise
    # q2: target D2 (cos 1), nothing above -> 0, 0
    # q3 = [1, .2]: cos to D0, D1 = .981, to D3 = .832 -> 2 above its target, no tie
    assert g.tolist() == [0, 0, 0, 2]
    assert t.tolist() == [1, 1, 0, 0]
    assert recall_at_k(Q, D, k=1) == pytest.approx(1 / 4)  # pessimistic: only q2
    assert recall_at_k(Q, D, k=1, ties="optimistic") == pytest.approx(3 / 4)
    assert recall_at_k(Q, D, k=1, ties="expected") == pytest.approx((0.5 + 0.5 + 1 + 0) / 4)
    assert recall_at_k(Q, D, k=2) == pytest.approx(3 / 4)  # q3 still has 2 rows ahead
    assert recall_at_k(Q, D, k=3) == 1.0


def test_expected_ties_three_way():
    # target tied with 2 others and 1 strictly above: P(top-2) = (2 - 1) / 3
    h = hits_at_k([1], [2], k=2, policy="expected")
    assert h.tolist() == pytest.approx([1 / 3])
    assert hits_at_k([1], [2], k=4, policy="expected").tolist() == [1.0]
    assert hits_at_k([1], [2], k=1, policy="expected").tolist() == [0.0]


def test_pessimistic_recall_matches_self_retrieval():
    from privembed.evaluation import self_retrieval

    rng = np.random.default_rng(3)
    X = rng.standard_normal((80, 6))
    Y = X + 0.8 * rng.standard_normal(X.shape)
    for k in (1, 5):
        assert recall_at_k(Y, X, k=k) == self_retrieval(Y, X, k=k)


def test_bad_tie_policy():
    with pytest.raises(ValueError, match=r"ties must be one of .* got ties='random'"):
        recall_at_k(np.eye(2), np.eye(2), ties="random")


# ---- correlations -----------------------------------------------------------------------------


def test_pearson_by_hand():
    # x - mean = (-1.5, -.5, .5, 1.5), y - mean = (-3, -1, 0, 4): sum xy = 11, sxx = 5, syy = 26
    assert pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(5 * 26))
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))


def test_spearman_by_hand_with_ties():
    # ranks of x with the tie averaged: (1, 2.5, 2.5, 4); y ranks (1, 2, 3, 4)
    # centred: (-1.5, 0, 0, 1.5) and (-1.5, -.5, .5, 1.5): sum xy = 4.5, sxx = 4.5, syy = 5
    assert spearman([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert spearman([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)  # monotone, not linear


def test_correlations_agree_with_scipy():
    from scipy import stats

    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, 60).astype(float)  # many ties
    y = x + rng.standard_normal(60)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


def test_sts_correlation_uses_cosine_of_pairs():
    A = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    B = np.array([[2.0, 0.0], [1.0, 1.0], [0.0, 3.0]])  # cosines 1, 1/sqrt 2, 0
    r = sts_correlation(A, B, [5.0, 3.0, 0.0])
    c = np.array([1.0, 1 / math.sqrt(2), 0.0])
    assert r["pearson"] == pytest.approx(np.corrcoef(c, [5.0, 3.0, 0.0])[0, 1])
    assert r["spearman"] == pytest.approx(1.0)
    with pytest.raises(DataError, match="scores has 2 entries but there are 3 pairs"):
        sts_correlation(A, B, [1.0, 2.0])


# ---- qrels: NDCG and recall -------------------------------------------------------------------

QRELS = {
    "q1": {"d1": 3, "d2": 2, "d3": 0},  # d3 judged not relevant
    "q2": {"d4": 1},
    "q3": {"d5": 0},  # no relevant document: not counted
}


def test_ndcg_at_10_by_hand():
    ranking = {"q1": ["d2", "d3", "d1", "d9"], "q2": ["d8", "d4"], "q3": ["d5"]}
    # q1: DCG = 2/log2(2) + 0 + 3/log2(4) = 2 + 1.5 = 3.5; IDCG = 3 + 2/log2(3)
    q1 = 3.5 / (3 + 2 / math.log2(3))
    # q2: DCG = 1/log2(3); IDCG = 1
    q2 = 1 / math.log2(3)
    assert ndcg_at_k(ranking, QRELS, k=10) == pytest.approx((q1 + q2) / 2)
    # k = 1: q1 gets 2 / 3, q2 gets 0
    assert ndcg_at_k(ranking, QRELS, k=1) == pytest.approx((2 / 3 + 0) / 2)
    # a perfect ranking scores 1; a query missing from the ranking scores 0
    assert ndcg_at_k({"q1": ["d1", "d2"], "q2": ["d4"]}, QRELS) == pytest.approx(1.0)
    assert ndcg_at_k({"q1": ["d1", "d2"]}, QRELS) == pytest.approx(0.5)


def test_qrels_recall_by_hand():
    ranking = {"q1": ["d2", "d3", "d1"], "q2": ["d8", "d4"]}
    assert qrels_recall_at_k(ranking, QRELS, k=1) == pytest.approx((1 / 2 + 0) / 2)
    assert qrels_recall_at_k(ranking, QRELS, k=2) == pytest.approx((1 / 2 + 1) / 2)
    assert qrels_recall_at_k(ranking, QRELS, k=3) == pytest.approx(1.0)


def test_no_relevant_documents_is_an_error():
    with pytest.raises(DataError, match="no query with a relevant document"):
        ndcg_at_k({"q3": ["d5"]}, {"q3": {"d5": 0}})


def test_exact_search_faiss_matches_numpy():
    rng = np.random.default_rng(1)
    Q = rng.standard_normal((20, 8)).astype(np.float32)
    D = rng.standard_normal((50, 8)).astype(np.float32)
    s, i = exact_search(Q, D, 5)
    U = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    V = D / np.linalg.norm(D, axis=1, keepdims=True)
    s2, i2 = _numpy_search(U, V, 5)
    np.testing.assert_array_equal(i, i2)
    np.testing.assert_allclose(s, s2, atol=1e-5)
    assert exact_search(Q, D, 500)[1].shape == (20, 50)


def test_retrieval_metrics_on_a_tiny_corpus():
    docs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    queries = np.array([[1.0, 0.1, 0.0], [0.0, 0.0, 1.0]])
    qrels = {"a": {"d0": 1, "d3": 1}, "b": {"d2": 2}}
    r = retrieval_metrics(
        queries, docs, qrels, query_ids=["a", "b"], doc_ids=["d0", "d1", "d2", "d3"], ks=(1, 2)
    )
    # a retrieves d0 then d3 (both relevant): NDCG 1, recall@1 1/2; b retrieves d2 first
    assert r == pytest.approx({"ndcg@10": 1.0, "recall@1": 0.75, "recall@2": 1.0})


def _ndcg_by_loops(ranking, qrels, k):
    """The trec_eval formula written out (the hand-written version ndcg_at_k replaced)."""
    vals = []
    for q, docs in qrels.items():
        ideal = sorted((r for r in docs.values() if r > 0), reverse=True)[:k]
        if not ideal:
            continue
        idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
        got = [docs.get(d, 0.0) for d in ranking.get(q, [])[:k]]
        vals.append(sum(max(g, 0.0) / math.log2(i + 2) for i, g in enumerate(got)) / idcg)
    return sum(vals) / len(vals)


def test_ndcg_through_sklearn_equals_the_formula_on_random_judgments():
    """ndcg_at_k uses sklearn's ndcg_score; random graded qrels, rankings shorter and longer
    than k, relevant documents never retrieved, queries missing from the ranking."""
    rng = np.random.default_rng(4)
    docs = [f"d{i}" for i in range(40)]
    qrels, ranking = {}, {}
    for q in range(60):
        judged = rng.choice(40, size=rng.integers(1, 8), replace=False)
        qrels[f"q{q}"] = {docs[j]: float(rng.integers(0, 4)) for j in judged}
        if q % 7:
            ranking[f"q{q}"] = [docs[j] for j in rng.permutation(40)[: rng.integers(0, 15)]]
    for k in (1, 5, 10):
        assert ndcg_at_k(ranking, qrels, k=k) == pytest.approx(
            _ndcg_by_loops(ranking, qrels, k), abs=1e-12
        )
