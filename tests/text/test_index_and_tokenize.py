"""Nearest-neighbour index (exact vs brute force, HNSW recall) and the lossless tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError
from privembed.text import NearestNeighbourIndex, detokenize, restore_case, tokenize


def _sq(Q, X):
    """Reference squared distances, straight from the differences."""
    Q, X = np.asarray(Q, np.float64), np.asarray(X, np.float64)
    return ((Q[:, None, :] - X[None, :, :]) ** 2).sum(axis=-1)


def test_exact_index_matches_brute_force(vocab, index):
    Q = np.random.default_rng(1).standard_normal((50, vocab.dim))
    D, ids = index.search(Q, k=5)
    ref = _sq(Q, vocab.vectors)
    np.testing.assert_array_equal(ids, np.argsort(ref, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(D, np.sort(ref, axis=1)[:, :5], rtol=1e-4, atol=1e-4)
    assert index.nearest(Q).tolist() == ids[:, 0].tolist()
    np.testing.assert_allclose(index.distance_rows(Q), ref, rtol=1e-9, atol=1e-9)


def test_hnsw_index_has_high_recall(vocab):
    hnsw = NearestNeighbourIndex(vocab.vectors, method="hnsw", ef_search=64)
    Q = np.random.default_rng(2).standard_normal((200, vocab.dim))
    exact = _sq(Q, vocab.vectors).argmin(axis=1)
    # 400 points in 8 dimensions: HNSW with ef_search=64 is essentially exact here
    assert (hnsw.nearest(Q) == exact).mean() >= 0.97


def test_index_rejects_bad_input(index):
    with pytest.raises(DataError, match="dimension mismatch"):
        index.search(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"k must be <= 400, got k=401\."):
        index.search(np.zeros((1, 8)), k=401)
    with pytest.raises(ValueError, match="method must be one of 'exact', 'hnsw'"):
        NearestNeighbourIndex(np.eye(2), method="ivf")
    empty = index.search(np.zeros((0, 8)), k=3)
    assert empty[0].shape == (0, 3) and empty[1].shape == (0, 3)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Hello, World!",
        "  leading and trailing  \n",
        "tabs\tand\r\nnewlines\n\n",
        "Café déjà-vu — naïve «quotes» 3.14 e-mail@x.org",
        "don't stop_me now!!!",
        "...,;:",
    ],
)
def test_tokenizer_round_trip(text):
    toks = tokenize(text)
    assert detokenize(toks) == text
    assert all(t.text for t in toks)
    assert [t.start for t in toks] == [sum(len(u.text) for u in toks[:i]) for i in range(len(toks))]


def test_token_kinds():
    kinds = [(t.text, t.kind) for t in tokenize("Hi, you 2!")]
    assert kinds == [
        ("Hi", "word"),
        (",", "punct"),
        (" ", "space"),
        ("you", "word"),
        (" ", "space"),
        ("2", "word"),
        ("!", "punct"),
    ]
    with pytest.raises(TypeError, match="text must be a str"):
        tokenize(b"bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "template,word,expected",
    [
        ("NASA", "agency", "AGENCY"),
        ("Paris", "london", "London"),
        ("paris", "london", "london"),
        ("I", "you", "You"),
        ("A1", "b2", "B2"),
        ("2023", "1999", "1999"),
        ("McDonald", "burger", "Burger"),
    ],
)
def test_restore_case(template, word, expected):
    assert restore_case(template, word) == expected


def test_exact_search_restores_the_faiss_blas_setting(vocab, index):
    import faiss

    before = faiss.cvar.distance_compute_blas_threshold
    Q = np.random.default_rng(3).standard_normal((64, vocab.dim))
    assert np.array_equal(index.nearest(Q), _sq(Q, vocab.vectors).argmin(axis=1))
    assert faiss.cvar.distance_compute_blas_threshold == before


def test_hnsw_cache_is_reused_and_rebuilt_when_the_vectors_change(vocab, tmp_path):
    path = tmp_path / "glove.hnsw"
    a = NearestNeighbourIndex(vocab.vectors, method="hnsw", cache=path)
    assert path.is_file() and (tmp_path / "glove.hnsw.sha256").is_file()
    stamp = path.stat().st_mtime_ns
    b = NearestNeighbourIndex(vocab.vectors, method="hnsw", cache=path)
    assert path.stat().st_mtime_ns == stamp  # read, not rebuilt
    Q = np.random.default_rng(4).standard_normal((30, vocab.dim))
    assert np.array_equal(a.nearest(Q), b.nearest(Q))
    other = vocab.vectors[::-1].copy()
    c = NearestNeighbourIndex(other, method="hnsw", cache=path)
    assert (c.nearest(Q) == _sq(Q, other).argmin(axis=1)).mean() >= 0.9
    with pytest.raises(ValueError, match="cache only applies to method='hnsw'"):
        NearestNeighbourIndex(vocab.vectors, cache=path)
