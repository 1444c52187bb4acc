"""The linkage attack in blocks (issue 38.2): the same ranks as the whole-pool computation it
replaced, whatever the block size, and never more than a block of candidates at a time."""

from __future__ import annotations

import numpy as np
import pytest

from privembed.attacks import linkage as linkage_mod
from privembed.attacks import linkage_ranks
from privembed.evaluation.metrics import retrieval_ranks


def _padded_ranks(Q, C, targets):
    """The computation before blocks (kept here as the reference): every real query padded
    with the candidates that are no one's source and ranked by ``retrieval_ranks`` over the
    whole pool, protected vectors sharing a source in separate rounds."""
    n, m = Q.shape[0], C.shape[0]
    tgt = np.asarray(targets, dtype=np.int64)
    ranks = np.empty(n, dtype=np.int64)
    occurrence = np.zeros(n, dtype=np.int64)
    seen: dict[int, int] = {}
    for i, t in enumerate(tgt.tolist()):
        occurrence[i] = seen.get(t, 0)
        seen[t] = occurrence[i] + 1
    for r in range(int(occurrence.max()) + 1):
        rows = np.flatnonzero(occurrence == r)
        used = tgt[rows]
        others = np.setdiff1d(np.arange(m), used)
        queries = np.concatenate([Q[rows], C[others]])
        database = np.concatenate([C[used], C[others]])
        ranks[rows] = retrieval_ranks(queries, database)[: rows.size]
    return ranks


def _protected(X, rows, seed):
    rng = np.random.default_rng(seed)
    return X[rows] + 3.0 * rng.standard_normal((len(rows), X.shape[1])) / np.sqrt(X.shape[1])


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, linkage_mod.BLOCK])
def test_blocked_ranks_equal_the_whole_pool_ranks(block):
    rng = np.random.default_rng(0)
    C = rng.standard_normal((53, 12))
    targets = rng.integers(0, 53, size=19)  # repeats among them (19 draws of 53: seed 0 has some)
    assert np.unique(targets).size < targets.size
    Q = _protected(C, targets, 1)
    ranks = linkage_ranks(Q, C, targets=targets, block=block)
    np.testing.assert_array_equal(ranks, _padded_ranks(Q, C, targets))
    assert 0 < ranks.max()  # not all linked: the ranks are informative
    # no targets: row i's source is candidate i (n < m and n == m)
    np.testing.assert_array_equal(
        linkage_ranks(Q, C, block=block), _padded_ranks(Q, C, np.arange(Q.shape[0]))
    )
    np.testing.assert_array_equal(linkage_ranks(C, C, block=block), retrieval_ranks(C, C))


@pytest.mark.parametrize("block", [1, 2, 5, 1000])
def test_ties_count_against_the_attacker_in_every_block(block):
    # small integer vectors: every cosine of equal rows is computed exactly equal, so copies of
    # a source (rows 0, 6 and 11 are one vector; rows 3 and 9 another) tie with it wherever
    # they fall among the blocks
    base = np.array([[1, 2, 0, 1], [0, 1, 1, 0], [2, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 2]])
    C = np.array([base[i] for i in [0, 1, 2, 3, 4, 1, 0, 2, 4, 3, 1, 0]], dtype=np.float64)
    Q = C[[0, 3, 6, 1, 11]] * np.array([[1.0], [2.0], [3.0], [0.5], [1.0]])  # exact directions
    targets = [0, 3, 6, 1, 11]
    ranks = linkage_ranks(Q, C, targets=targets, block=block)
    np.testing.assert_array_equal(ranks, _padded_ranks(Q, C, targets))
    # each source ties with its copies: 2 copies beside rows 0/6/11, 1 beside row 3, 2 beside 1
    assert ranks.tolist() == [2, 1, 2, 2, 2]


def test_no_more_than_a_block_of_candidates_at_a_time(monkeypatch):
    rows_seen = []
    real = linkage_mod.unit_rows

    def spy(X):
        rows_seen.append(X.shape[0])
        return real(X)

    monkeypatch.setattr(linkage_mod, "unit_rows", spy)
    rng = np.random.default_rng(3)
    C = rng.standard_normal((40, 8)).astype(np.float32)
    Q = _protected(C, np.arange(12), 4)
    ranks = linkage_ranks(Q, C, targets=np.arange(12), block=5)
    # the protected vectors are normalised whole (n x d), the candidates 5 rows at a time
    assert rows_seen[0] == 12 and max(rows_seen[1:]) == 5
    assert sum(rows_seen[1:]) == 12 + 3 * 40  # the sources once, then 3 passes over the pool
    monkeypatch.setattr(linkage_mod, "unit_rows", real)
    np.testing.assert_array_equal(ranks, _padded_ranks(Q, C, np.arange(12)))


def test_bad_block_is_refused():
    X = np.eye(3)
    with pytest.raises(ValueError, match="block"):
        linkage_ranks(X, X, block=0)
