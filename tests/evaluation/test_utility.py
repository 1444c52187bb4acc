"""UtilityEvaluator: one-pass float32 metrics agree with the float64 reference functions."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError
from privembed.evaluation import (
    RetrievalTask,
    STSTask,
    UtilityEvaluator,
    mean_cosine,
    neighbourhood_overlap,
    recall_at_k,
    retrieval_metrics,
    sts_correlation,
)
from privembed.mechanisms import LaplaceMechanism, PrivateProjection
from privembed.search.projection import projection_search


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    X = rng.standard_normal((300, 24))
    Y = LaplaceMechanism(epsilon=15.0).privatize(X, rng=12)
    return X, Y


def test_matches_reference_functions(data):
    X, Y = data
    r = UtilityEvaluator(X, n_queries=None, ks=(1, 5)).evaluate(Y)
    assert r["mean_cosine"] == pytest.approx(mean_cosine(X, Y), abs=1e-6)
    assert r["top1_originals"] == pytest.approx(recall_at_k(Y, X, k=1))
    assert r["recall@5_originals"] == pytest.approx(recall_at_k(Y, X, k=5))
    assert r["top1_protected"] == pytest.approx(recall_at_k(X, Y, k=1))
    assert r["knn_overlap@10"] == pytest.approx(neighbourhood_overlap(X, Y, k=10))
    assert 0.05 < r["top1_originals"] < 0.95  # a regime where the comparison means something


def test_baseline_is_the_ceiling(data):
    X, _ = data
    b = UtilityEvaluator(X, n_queries=None).baseline()
    assert b["top1_originals"] == b["top1_protected"] == b["knn_overlap@10"] == 1.0
    assert b["mean_cosine"] == pytest.approx(1.0, abs=1e-6)


def test_query_sample_is_fixed_and_unbiased(data):
    X, Y = data
    a = UtilityEvaluator(X, n_queries=100, query_seed=3)
    b = UtilityEvaluator(X, n_queries=100, query_seed=3)
    np.testing.assert_array_equal(a.query_index, b.query_index)
    full = recall_at_k(Y, X, k=1)
    ranks_of_sample = a.evaluate(Y)["top1_originals"]
    # a uniform sample of 100 of 300 queries: SE <= sqrt(p(1-p)/100 * (1 - 100/300))
    se = np.sqrt(full * (1 - full) / 100 * (2 / 3))
    assert abs(ranks_of_sample - full) < 4.4 * se


def test_sts_and_retrieval_tasks(data):
    X, Y = data
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 300, (40, 2))
    scores = rng.random(40)
    queries = X[:10] + 0.1 * rng.standard_normal((10, 24))
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(10)}
    ids = [f"d{i}" for i in range(300)]
    task = RetrievalTask(queries, [f"q{i}" for i in range(10)], ids, qrels, ks=(1, 10))
    ev = UtilityEvaluator(X, sts=STSTask(pairs, scores), retrieval=task)
    r = ev.evaluate(Y)
    ref = sts_correlation(Y[pairs[:, 0]], Y[pairs[:, 1]], scores)
    assert r["sts_pearson"] == pytest.approx(ref["pearson"], abs=1e-6)
    assert r["sts_spearman"] == pytest.approx(ref["spearman"], abs=1e-6)
    ret = retrieval_metrics(queries, Y, qrels, query_ids=task.query_ids, doc_ids=ids, ks=(1, 10))
    assert r["ndcg@10"] == pytest.approx(ret["ndcg@10"])
    assert r["recall@1_qrels"] == pytest.approx(ret["recall@1"])
    assert set(ev.columns) == set(r)


def test_projection_uses_the_query_side_projection(data):
    X, _ = data
    m = PrivateProjection(k=12, epsilon=200.0, delta=1e-5, input_dim=24)
    Y = m.privatize(X, rng=1)
    r = UtilityEvaluator(X, n_queries=None).evaluate(Y, m)
    P = m.project(X)
    assert r["mean_cosine"] == pytest.approx(mean_cosine(P, Y), abs=1e-6)
    assert r["top1_protected"] == pytest.approx(recall_at_k(P, Y, k=1))
    # the library's search (plain cosine to raw releases) ranks the same way
    _, idx = projection_search(m, X, Y, 1)
    assert r["top1_protected"] == pytest.approx(float(np.mean(idx[:, 0] == np.arange(300))))
    with pytest.raises(DataError, match="has no project"):
        UtilityEvaluator(X).evaluate(Y)


def test_bad_inputs(data):
    X, Y = data
    with pytest.raises(DataError, match="Y has 10 rows but X has 300"):
        UtilityEvaluator(X).evaluate(Y[:10])
    with pytest.raises(DataError, match="sts pairs must index rows of X"):
        UtilityEvaluator(X, sts=STSTask(np.array([[0, 300], [1, 2]]), np.array([1.0, 2.0])))


def test_knn_excludes_the_query_even_among_duplicates():
    from privembed.evaluation.utility import _knn_rows, _unit32

    X = np.repeat(np.random.default_rng(2).standard_normal((10, 5)), 3, axis=0)  # triplicates
    U = _unit32(X)
    q = np.arange(30)
    nn = _knn_rows(U, q, 4)
    assert not (nn == q[:, None]).any()
    assert all(len(set(row)) == 4 for row in nn.tolist())
    # the two copies of each row are its nearest neighbours
    for i, row in enumerate(nn.tolist()):
        twins = {3 * (i // 3) + j for j in range(3)} - {i}
        assert twins <= set(row)
