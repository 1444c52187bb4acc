"""SanText exponential mechanism: frequencies against exp(-eps d / 2), batching, validation."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import MetricDP
from privembed.text import ExponentialSanitizer
from privembed.text.exponential import sample_exponential

from .conftest import make_vocab
from .test_sanitizer import P_MIN, _chi_square_p


def _law(X: np.ndarray, w: int, eps: float) -> np.ndarray:
    """Independent reference: softmax of -eps * ||X[w] - X[x]|| / 2, straight from the norms."""
    d = np.linalg.norm(X.astype(np.float64) - X[w].astype(np.float64), axis=1)
    p = np.exp(-eps * d / 2)
    return p / p.sum()


@pytest.mark.parametrize("eps,word", [(2.0, 0), (6.0, 7), (0.5, 3)])
def test_frequencies_match_the_exponential_law(eps, word):
    voc = make_vocab(n=40, d=3, seed=5)
    san = ExponentialSanitizer(vocabulary=voc, epsilon=eps)
    N = 20_000
    out = san.sanitize_ids(np.full(N, word), rng=123)
    p = _law(voc.vectors, word, eps)
    np.testing.assert_allclose(san.probabilities(word), p, rtol=1e-9, atol=1e-15)
    assert _chi_square_p(np.bincount(out, minlength=len(voc)), p) > P_MIN


def test_each_word_of_a_batch_gets_its_own_law():
    voc = make_vocab(n=30, d=2, seed=2)
    san = ExponentialSanitizer(vocabulary=voc, epsilon=3.0, block_rows=2)
    ids = np.repeat(np.array([4, 0, 9]), 8000)
    rng = np.random.default_rng(8)
    out = san.sanitize_ids(rng.permutation(ids), rng=1)
    perm = np.random.default_rng(8).permutation(ids)
    for w in (0, 4, 9):
        counts = np.bincount(out[perm == w], minlength=len(voc))
        assert _chi_square_p(counts, _law(voc.vectors, w, 3.0)) > P_MIN


def test_block_size_does_not_change_the_draws():
    voc = make_vocab(n=50, d=4, seed=1)
    ids = np.array([5, 1, 5, 9, 9, 9, 2, 40, 1])
    a = ExponentialSanitizer(vocabulary=voc, epsilon=1.5, block_rows=1).sanitize_ids(ids, rng=3)
    b = ExponentialSanitizer(vocabulary=voc, epsilon=1.5, block_rows=64).sanitize_ids(ids, rng=3)
    assert np.array_equal(a, b)


def test_huge_epsilon_keeps_words_and_text(vocab):
    san = ExponentialSanitizer(vocabulary=vocab, epsilon=1e5)
    assert san.sanitize("The cat, the MAT!", rng=0) == "The cat, the MAT!"


def test_sample_exponential_does_not_modify_its_input():
    D = np.array([[0.0, 1.0, 2.0], [3.0, 0.5, 0.0]])
    before = D.copy()
    out = sample_exponential(D, 1.0, np.random.default_rng(0), counts=np.array([2, 0]))
    assert np.array_equal(D, before) and out[0].shape == (2,) and out[1].shape == (0,)


def test_guarantee_and_validation(vocab):
    g = ExponentialSanitizer(vocabulary=vocab, epsilon=2.0).guarantee
    assert isinstance(g, MetricDP) and g.epsilon == 2.0 and "exponential" in g.note
    with pytest.raises(ValueError, match=r"epsilon must be > 0, got epsilon=0\."):
        ExponentialSanitizer(vocabulary=vocab, epsilon=0)
    with pytest.raises(ValueError, match="oov must be one of"):
        ExponentialSanitizer(vocabulary=vocab, epsilon=1.0, oov="x")
    with pytest.raises(ValueError, match=r"block_rows must be >= 1"):
        ExponentialSanitizer(vocabulary=vocab, epsilon=1.0, block_rows=0)


def test_progress_reaches_every_in_vocabulary_word(vocab):
    san = ExponentialSanitizer(vocabulary=vocab, epsilon=2.0, block_rows=2)
    texts = ["the cat sat on the mat", "the dog"]
    seen: list[int] = []
    out = san.sanitize_many(texts, rng=3, on_progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == san.count_words(texts) == 8
    assert out == san.sanitize_many(texts, rng=3)
