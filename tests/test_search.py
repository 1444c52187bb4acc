"""Tests for privembed.search.projection: bias-corrected k-NN search over PrivateProjection releases.

Every random draw has a fixed seed.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from privembed import DataError
from privembed.core.rng import as_generator
from privembed.mechanisms import LaplaceMechanism, PrivateProjection
from privembed.search.projection import projection_search


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _setup_search():
    d, n = 48, 300
    m = PrivateProjection(k=24, epsilon=20.0, delta=1e-5, projection_seed=1, input_dim=d)
    X = _unit(as_generator(15), n, d)
    Y = m.privatize(X, rng=16)
    return m, X, Y


def test_search_matches_faiss() -> None:
    """ "cosine" = IndexFlatIP over L2-normalised vectors; "ip" = IndexFlatIP over raw releases."""
    import faiss

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
        D, idx = projection_search(m, X[:50], Y, 5, metric=metric)
        index = faiss.IndexFlatIP(Y.shape[1])
        index.add(np.ascontiguousarray(y))
        Df, If = index.search(np.ascontiguousarray(q), 5)
        np.testing.assert_array_equal(idx, If)
        np.testing.assert_allclose(D, Df, rtol=1e-4, atol=1e-4)


def test_search_cosine_corrected_matches_cosine_estimate() -> None:
    m, _, Y = _setup_search()
    D, idx = projection_search(m, Y[:5], Y[5:], 4, metric="cosine_corrected", queries_released=True)
    assert np.all(np.abs(D) <= 1.0)
    for i in range(5):
        est = m.cosine_estimate(np.repeat(Y[i : i + 1], 4, axis=0), Y[5:][idx[i]])
        np.testing.assert_allclose(D[i], est, rtol=1e-5, atol=1e-6)


def test_search_l2_is_bias_corrected_and_padded() -> None:
    m, X, Y = _setup_search()
    Q = m.project(X[:10])
    D, idx = projection_search(m, X[:10], Y, 3, metric="l2")
    raw = np.sum((Q[:, None, :] - Y[None, :, :]) ** 2, axis=2)
    np.testing.assert_array_equal(idx, np.argsort(raw, axis=1, kind="stable")[:, :3])
    expect = np.take_along_axis(raw, idx, axis=1) - m.k * m.sigma**2
    np.testing.assert_allclose(D, expect, rtol=1e-5, atol=1e-5)
    # released queries subtract 2 k sigma²
    Dr, _ = projection_search(m, Y[:10], Y[10:], 3, metric="l2", queries_released=True)
    raw_r = np.sort(np.sum((Y[:10, None] - Y[None, 10:]) ** 2, axis=2), axis=1)[:, :3]
    np.testing.assert_allclose(Dr, raw_r - 2 * m.k * m.sigma**2, rtol=1e-5, atol=1e-5)
    # FAISS-style padding when k > n
    Dp, Ip = projection_search(m, X[:2], Y[:3], 5, metric="l2")
    assert (Ip[:, 3:] == -1).all() and np.isinf(Dp[:, 3:]).all()
    assert sorted(Ip[0, :3].tolist()) == [0, 1, 2]


def test_search_per_row_sigma_changes_l2_ranking() -> None:
    m, X, Y = _setup_search()
    sig = np.full(Y.shape[0], m.sigma)
    sig[::2] = 3 * m.sigma  # rows released at a smaller epsilon carry more noise
    _, I1 = projection_search(m, X[:20], Y, 10, metric="l2")
    _, I2 = projection_search(m, X[:20], Y, 10, metric="l2", database_sigma=sig)
    assert not np.array_equal(I1, I2)
    with pytest.raises(ValueError, match="database_sigma must be a non-negative scalar"):
        projection_search(m, X[:2], Y, 1, database_sigma=np.ones(3))


def test_self_retrieval_needs_a_large_epsilon_at_record_level() -> None:
    _, X, _ = _setup_search()
    hits = {}
    for eps in (20.0, 1e4):
        mm = PrivateProjection(k=24, epsilon=eps, delta=1e-5, projection_seed=1)
        _, idx = projection_search(mm, X, mm.privatize(X, rng=16), 1)
        hits[eps] = float(np.mean(idx[:, 0] == np.arange(len(X))))
    assert hits[20.0] < 0.2 < 0.95 < hits[1e4]


def test_refusals() -> None:
    m, X, Y = _setup_search()
    with pytest.raises(
        ValueError,
        match="^"
        + re.escape(
            "metric must be one of 'cosine', 'cosine_corrected', 'ip', 'l2', got metric='dot'."
        )
        + "$",
    ):
        projection_search(m, np.ones((1, 4)), np.ones((2, 8)), 1, metric="dot")
    with pytest.raises(TypeError, match=r"^mechanism must be a PrivateProjection, got "):
        projection_search(LaplaceMechanism(epsilon=5.0), X, Y, 1)
    unpinned = PrivateProjection(k=24, epsilon=20.0, delta=1e-5, projection_seed=1)
    with pytest.raises(ValueError, match="the input dimension d is not known"):
        projection_search(unpinned, Y[:2], Y, 1, queries_released=True)
    with pytest.raises(DataError, match="queries have dimension 48 but d=40 was given"):
        projection_search(m, X[:2], Y, 1, d=40)
    with pytest.raises(DataError):
        projection_search(m, X[:2], Y[:, :10], 1)  # database not of dimension k
