"""Linkage (re-identification) wraps evaluation.metrics: same numbers as [K26] top-1 retrieval."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError
from privembed.attacks import LinkageAttack, linkage_ranks
from privembed.evaluation.metrics import retrieval_ranks, self_retrieval
from privembed.mechanisms import LaplaceMechanism


def _X(n=80, d=32, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d))


def test_unprotected_vectors_are_all_reidentified_and_chance_is_k_over_m():
    X = _X()
    rep = LinkageAttack(ks=(1, 5)).score(X, X)
    assert rep.top_k == {1: 1.0, 5: 1.0} and rep.mrr == 1.0 and rep.mean_rank == 1.0
    assert rep.chance == {1: 1 / 80, 5: 5 / 80}


def test_same_number_as_k26_top1_retrieval():
    X = _X()
    Y = LaplaceMechanism(epsilon=6.0).privatize(X, rng=11)
    rep = LinkageAttack(ks=(1, 3)).score(Y, X)
    assert rep.top_k[1] == self_retrieval(Y, X)
    assert rep.top_k[3] == self_retrieval(Y, X, k=3)
    assert 0.0 < rep.top_k[1] < 1.0


def test_larger_pool_with_targets_ranks_among_all_candidates():
    pool = np.eye(6)
    Q = np.array([[0.0, 0.0, 1.0, 0.2, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0, 0.0, 0.9]])
    # query 0 -> row 2 is the nearest (rank 0); query 1 -> row 5 is second after row 3 (rank 1)
    assert linkage_ranks(Q, pool, targets=[2, 5]).tolist() == [0, 1]
    # the padding trick gives what a direct computation over the full pool gives
    X = _X(50)
    Y = LaplaceMechanism(epsilon=40.0).privatize(X[10:30], rng=1)
    ranks = linkage_ranks(Y, X, targets=np.arange(10, 30))
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Yn = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    S = Yn @ Xn.T
    direct = (S >= S[np.arange(20), np.arange(10, 30)][:, None]).sum(axis=1) - 1
    np.testing.assert_array_equal(ranks, direct)


def test_repeated_sources_are_scored_in_separate_rounds():
    X = _X(10)
    Q = np.concatenate([X[[3]], X[[3]] * 2.0, X[[7]]])
    assert linkage_ranks(Q, X, targets=[3, 3, 7]).tolist() == [0, 0, 0]


def test_independent_vectors_are_linked_at_chance():
    X = _X(200)
    Z = np.random.default_rng(9).standard_normal((200, 32))  # no relation to X
    r = LinkageAttack(ks=(10,)).score(Z, X).top_k[10]
    p = 10 / 200
    assert abs(r - p) < 4.4 * np.sqrt(p * (1 - p) / 200)  # binomial, 4.4 standard errors


def test_errors_and_retrieval_ranks_reuse():
    X = _X(5)
    with pytest.raises(DataError, match="dimension"):
        linkage_ranks(X[:, :4], X)
    with pytest.raises(DataError, match="give targets"):
        linkage_ranks(_X(6), X)
    with pytest.raises(DataError, match=r"rows of candidates"):
        linkage_ranks(X[:2], X, targets=[0, 9])
    np.testing.assert_array_equal(linkage_ranks(X, X), retrieval_ranks(X, X))
    with pytest.raises(ValueError, match="ks must be"):
        LinkageAttack(ks=())


def test_wilson_interval_and_beating_chance():
    from scipy.stats import binomtest

    from privembed.attacks.linkage import rate_interval

    lo, hi = rate_interval(3, 40)
    ci = binomtest(3, 40).proportion_ci(method="wilson")
    assert (lo, hi) == (pytest.approx(ci.low), pytest.approx(ci.high))
    X = _X()
    assert LinkageAttack(ks=(1,)).score(X, X).beats_chance(1)  # all 80 linked, chance 1/80
    # vectors unrelated to the originals: at chance, the interval contains 1/80
    Y = _X(seed=9)
    rep = LinkageAttack(ks=(1,)).score(Y, X)
    assert rep.interval[1][0] <= rep.chance[1] and not rep.beats_chance(1)
