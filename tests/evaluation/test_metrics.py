"""Utility metrics against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError
from privembed.evaluation import mean_cosine, neighbourhood_overlap, retrieval_ranks, self_retrieval


def test_mean_cosine_hand_values():
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    Y = np.array([[1.0, 1.0], [0.0, -3.0]])
    assert mean_cosine(X, Y) == pytest.approx((1 / np.sqrt(2) - 1) / 2)


def test_retrieval_ranks_and_ties_count_against():
    D = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    Q = np.array([[1.0, 0.1], [1.0, 0.0], [1.0, 1.0]])
    # query 1 ([1,0]) is closer to D[0] than to its target D[1]: rank 2 (D0, D2 ahead)
    np.testing.assert_array_equal(retrieval_ranks(Q, D), [0, 2, 0])
    assert self_retrieval(Q, D) == pytest.approx(2 / 3)
    assert self_retrieval(Q, D, k=3) == 1.0
    # an exact tie with another candidate counts as a miss at k=1
    D2 = np.array([[1.0, 0.0], [1.0, 0.0]])
    assert self_retrieval(D2, D2) == 0.0


def test_neighbourhood_overlap():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 5))
    assert neighbourhood_overlap(X, X, k=5) == 1.0
    assert neighbourhood_overlap(X, 3 * X, k=5) == 1.0
    Y = rng.standard_normal((30, 5))
    assert neighbourhood_overlap(X, Y, k=5) < 0.5


def test_shape_mismatch():
    with pytest.raises(DataError, match="same shape"):
        mean_cosine(np.ones((2, 3)), np.ones((3, 3)))
