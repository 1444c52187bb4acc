"""WordSanitizer: noise from the shared Laplace sampler, batching, text handling, validation,
and the rank fix (its law, and that it never looks at the original word)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import privembed.mechanisms.laplace as laplace_module
from privembed import DataError, MetricDP
from privembed.core.rng import as_generator
from privembed.mechanisms.base import GeneratorSource
from privembed.text import NearestNeighbourIndex, Vocabulary, WordSanitizer
from privembed.text.sanitizer import neighbours_at_rank, sample_ranks

from .conftest import make_vocab
from .test_index_and_tokenize import _sq

P_MIN = 1e-3  # chi-square tests: reject below this p-value (fixed seeds, so deterministic)


def _chi_square_p(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson chi-square p-value, pooling cells with expected count < 5 into one."""
    n = counts.sum()
    expected = probs * n
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


# ---- noise comes from the shared sampler -----------------------------------------------------


def test_word_noise_comes_from_the_shared_laplace_sampler(vocab, index, monkeypatch):
    calls = []
    real = laplace_module.sample_l2_laplace

    def spy(source, n, d, epsilon):
        calls.append((type(source), n, d, epsilon))
        return real(source, n, d, epsilon)

    monkeypatch.setattr(laplace_module, "sample_l2_laplace", spy)
    san = WordSanitizer(vocabulary=vocab, epsilon=3.0, index=index)
    san.sanitize_many(["the cat sat on the mat", "a dog, unknownword!"], rng=0)
    # one draw for all 8 in-vocabulary words of the corpus
    assert calls == [(GeneratorSource, 8, vocab.dim, 3.0)]


def test_noise_equals_the_shared_sampler_output_for_the_same_seed(vocab, index):
    san = WordSanitizer(vocabulary=vocab, epsilon=2.5, index=index)
    ids = np.array([0, 5, 5, 17])
    Z = san.noisy_vectors(ids, rng=11) - vocab.vectors[ids].astype(np.float64)
    ref = laplace_module.sample_l2_laplace(GeneratorSource(as_generator(11)), 4, vocab.dim, 2.5)
    np.testing.assert_allclose(Z, ref, rtol=0, atol=1e-6)


def test_one_index_search_for_a_whole_corpus(vocab, monkeypatch):
    idx = NearestNeighbourIndex(vocab.vectors)
    calls: list[int] = []
    real = idx.search

    def search(Q, k=1):
        calls.append(len(Q))
        return real(Q, k)

    monkeypatch.setattr(idx, "search", search)
    san = WordSanitizer(vocabulary=vocab, epsilon=5.0, index=idx)
    san.sanitize_many(["the cat", "sat on", "the mat today"], rng=1)
    assert calls == [6]


# ---- text handling -----------------------------------------------------------------------------


def test_huge_epsilon_returns_the_text_unchanged(vocab, index):
    san = WordSanitizer(vocabulary=vocab, epsilon=1e6, index=index)
    text = "The CAT sat on\tthe Mat...\n  a DOG ran!"
    assert san.sanitize(text, rng=0) == text


def test_output_keeps_layout_and_case(vocab, index):
    san = WordSanitizer(vocabulary=vocab, epsilon=0.5, index=index)
    text = "The CAT sat,\n  on the Mat!"
    out = san.sanitize(text, rng=3)
    a, b = [(t.kind, t.text) for t in _tok(text)], [(t.kind, t.text) for t in _tok(out)]
    assert [k for k, _ in a] == [k for k, _ in b]
    for (kind, x), (_, y) in zip(a, b, strict=True):
        if kind != "word":
            assert x == y
        elif x.isupper() and len(x) > 1:
            assert y == y.upper()
        elif x[0].isupper():
            assert y[0].isupper()
        assert kind != "word" or y.lower() in vocab


def _tok(text):
    from privembed.text import tokenize

    return tokenize(text)


def test_oov_policies(vocab, index):
    keep = WordSanitizer(vocabulary=vocab, epsilon=1e6, index=index, oov="keep")
    assert keep.sanitize("the Xyzzy cat", rng=0) == "the Xyzzy cat"
    rep = WordSanitizer(vocabulary=vocab, epsilon=1e6, index=index, oov="replace")
    out = rep.sanitize("the Xyzzy cat", rng=0)
    word = out.split()[1]
    assert word != "Xyzzy" and word.lower() in vocab and word[0].isupper()
    assert out == rep.sanitize("the Xyzzy cat", rng=0)
    assert "not protected" in keep.guarantee.describe()
    assert "uniform random words" in rep.guarantee.describe()


def test_same_seed_same_output_and_seeds_differ(vocab, index):
    san = WordSanitizer(vocabulary=vocab, epsilon=1.0, index=index)
    text = " ".join(["the cat sat on the mat"] * 5)
    assert san.sanitize(text, rng=4) == san.sanitize(text, rng=4)
    assert san.sanitize(text, rng=4) != san.sanitize(text, rng=5)


def test_guarantee_is_metric_dp_at_epsilon(vocab, index):
    g = WordSanitizer(vocabulary=vocab, epsilon=7.0, post="rank", c=0.1, index=index).guarantee
    assert isinstance(g, MetricDP) and g.epsilon == 7.0 and g.metric == "word-embedding l2"
    assert "rank post-processing" in g.note


@pytest.mark.parametrize(
    "kwargs,exc,pattern",
    [
        ({"epsilon": -1}, ValueError, r"epsilon must be > 0, got epsilon=-1\."),
        ({"epsilon": "1"}, TypeError, "epsilon must be a real number"),
        ({"epsilon": 1, "post": "nn"}, ValueError, "post must be one of 'nearest', 'rank'"),
        ({"epsilon": 1, "c": 0.1}, ValueError, "c only applies to post='rank'"),
        ({"epsilon": 1, "post": "rank"}, ValueError, "c must be given with post='rank'"),
        ({"epsilon": 1, "post": "rank", "c": 0}, ValueError, r"c must be > 0, got c=0\."),
        ({"epsilon": 1, "oov": "drop"}, ValueError, "oov must be one of 'keep', 'replace'"),
        ({"epsilon": 1, "index": "ivf"}, ValueError, "index must be one of 'exact', 'hnsw'"),
    ],
)
def test_constructor_validation(vocab, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        WordSanitizer(vocabulary=vocab, **kwargs)


def test_bad_vocabulary_index_and_ids(vocab):
    with pytest.raises(TypeError, match="vocabulary must be a Vocabulary"):
        WordSanitizer(vocabulary=np.eye(3), epsilon=1.0)  # type: ignore[arg-type]
    small = NearestNeighbourIndex(np.eye(8, dtype=np.float32))
    with pytest.raises(DataError, match="index has 8 vectors"):
        WordSanitizer(vocabulary=vocab, epsilon=1.0, index=small)
    san = WordSanitizer(vocabulary=vocab, epsilon=1.0)
    with pytest.raises(DataError, match=r"ids must lie in \[0, 400\)"):
        san.sanitize_ids([0, 400])
    with pytest.raises(TypeError, match="use sanitize"):
        san.sanitize_many("one text")
    assert san.sanitize_ids(np.array([], dtype=np.int64)).size == 0


# ---- the rank fix ---------------------------------------------------------------------------


def _truncated_geometric(lam: float, V: int) -> np.ndarray:
    p = np.exp(-lam * np.arange(V))
    return p / p.sum()


def test_sample_ranks_follows_the_truncated_geometric_law():
    lam, V, N = 0.3, 40, 20_000
    r = sample_ranks(lam, N, V, np.random.default_rng(0))
    assert r.min() >= 0 and r.max() < V
    assert _chi_square_p(np.bincount(r, minlength=V), _truncated_geometric(lam, V)) > P_MIN
    # lam -> 0: uniform over all V ranks
    u = sample_ranks(1e-9, N, V, np.random.default_rng(1))
    assert _chi_square_p(np.bincount(u, minlength=V), np.full(V, 1 / V)) > P_MIN


def test_neighbours_at_rank_matches_a_full_sort_including_the_exact_fallback():
    voc = make_vocab(n=1500, d=4, seed=3)  # ranks >= 1024 take the exact O(V) path
    idx = NearestNeighbourIndex(voc.vectors)
    centres = np.array([0, 7, 7, 7, 7, 1499, 42])
    ranks = np.array([0, 1, 15, 200, 1100, 1499, 127])
    got = neighbours_at_rank(idx, centres, ranks)
    # precomputed lists (ranks 0..50) give the same answers; longer ranks fall through
    from privembed.text.analysis import neighbour_lists

    lists = neighbour_lists(idx, centres, 50)
    assert np.array_equal(neighbours_at_rank(idx, centres, ranks, lists=lists), got)
    for cen, r, g in zip(centres, ranks, got, strict=True):
        d2 = _sq(voc.vectors[cen][None, :], voc.vectors)[0]
        d2[cen] = -1.0
        assert g == np.argsort(d2, kind="stable")[r]


def test_rank_fix_never_looks_at_the_original_word(vocab, index, monkeypatch):
    """Force the noisy vector of two different words onto the same x*: the rank step must
    give identical outputs (same seed) and follow exp(-eps c rank(x*, x))."""
    xstar, w1, w2 = 3, 10, 250
    target = vocab.vectors[xstar].astype(np.float64)

    def to_xstar(source, n, d, epsilon):
        source.normal(n, d)  # consume randomness like the real sampler
        source.gamma(float(d), n)
        return np.tile(target, (n, 1)) - current[0]

    current = [None]
    monkeypatch.setattr(laplace_module, "sample_l2_laplace", to_xstar)
    eps, c, N = 1.0, 0.25, 20_000
    san = WordSanitizer(vocabulary=vocab, epsilon=eps, post="rank", c=c, index=index)
    outs = []
    for w in (w1, w2):
        current[0] = vocab.vectors[w].astype(np.float64)
        outs.append(san.sanitize_ids(np.full(N, w), rng=99))
    np.testing.assert_array_equal(outs[0], outs[1])
    # the law of the output, in ranks from x* (rank 0 = x* itself)
    d2 = _sq(vocab.vectors[xstar][None, :], vocab.vectors)[0]
    d2[xstar] = -1.0
    rank_of = np.empty(len(vocab), dtype=np.int64)
    rank_of[np.argsort(d2, kind="stable")] = np.arange(len(vocab))
    counts = np.bincount(rank_of[outs[0]], minlength=len(vocab))
    assert _chi_square_p(counts, _truncated_geometric(eps * c, len(vocab))) > P_MIN


def test_post_process_is_a_function_of_xstar_only(vocab, index):
    san = WordSanitizer(vocabulary=vocab, epsilon=2.0, post="rank", c=0.5, index=index)
    xs = np.array([1, 2, 3, 1])
    assert np.array_equal(san.post_process(xs, rng=5), san.post_process(xs, rng=5))
    near = WordSanitizer(vocabulary=vocab, epsilon=2.0, index=index)
    assert near.post_process(xs, rng=5).tolist() == xs.tolist()


def test_rank_fix_output_stays_near_xstar_for_large_eps_c(vocab, index):
    san = WordSanitizer(vocabulary=vocab, epsilon=1e6, post="rank", c=1.0, index=index)
    ids = np.arange(50)
    assert np.array_equal(san.sanitize_ids(ids, rng=0), ids)


@pytest.mark.slow
def test_glove_sentence_round_trips_at_huge_epsilon():
    voc = Vocabulary.glove()
    san = WordSanitizer(vocabulary=voc, epsilon=1e5)
    text = "Maria Gonzalez, a patient at Riverside Hospital, was diagnosed on November 6."
    assert san.sanitize(text, rng=0) == text


def test_progress_counts_in_vocabulary_words_and_changes_nothing(vocab, index):
    san = WordSanitizer(vocabulary=vocab, epsilon=3.0, index=index)
    san.block_words = 3  # several blocks for a small corpus
    texts = ["the cat sat on the mat", "a dog, unknownword!", "the the the"]
    seen: list[int] = []
    out = san.sanitize_many(texts, rng=9, on_progress=seen.append)
    total = san.count_words(texts)
    assert total == 11 and seen == [3, 6, 9, 11]
    assert out == san.sanitize_many(texts, rng=9)
    # the seeded result depends on the block size, never on how the words are grouped in texts
    joined = san.sanitize_many([" ".join(texts)], rng=9)[0]
    assert joined.split() == " ".join(out).split()
