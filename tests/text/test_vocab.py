"""Vocabulary loading: arrays, .npy + word lists, word2vec/GloVe text, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privembed import DataError
from privembed.text import Vocabulary


def test_lookup_is_case_insensitive_and_first_occurrence_wins():
    voc = Vocabulary(words=["Paris", "paris", "dog"], vectors=np.eye(3))
    assert voc.index_of("PARIS") == 0 and voc.index_of("Dog") == 2
    assert "DOG" in voc and "cat" not in voc and 3 not in voc
    assert voc.lookup(["paris", "cat", "dog"]).tolist() == [0, -1, 2]
    assert voc.vectors.dtype == np.float32 and not voc.vectors.flags.writeable


def test_subset_keeps_the_first_words():
    voc = Vocabulary(words=list("abcd"), vectors=np.arange(8.0).reshape(4, 2))
    sub = voc.subset(2)
    assert sub.words == ("a", "b") and sub.vectors.tolist() == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match=r"n must be <= 4, got n=5\."):
        voc.subset(5)


@pytest.mark.parametrize(
    "words,vectors,exc,pattern",
    [
        (["a", "b"], np.zeros((3, 2)), DataError, "same length"),
        (["a"], np.array([[np.nan, 1.0]]), DataError, "non-finite values"),
        (["a", " "], np.zeros((2, 2)), DataError, "empty entries"),
        (["a"], np.zeros(2), DataError, r"shape \(V, d\)"),
        (["a"], np.array([["x", "y"]]), TypeError, "real numeric array"),
    ],
)
def test_bad_vocabularies_are_rejected(words, vectors, exc, pattern):
    with pytest.raises(exc, match=pattern):
        Vocabulary(words=words, vectors=vectors)


@pytest.mark.parametrize("fmt", ["txt", "json", "parquet"])
def test_from_npy_with_each_word_list_format(tmp_path, fmt):
    X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "v.npy", X)
    words = ["alpha", "beta", "gamma"]
    wpath = tmp_path / f"w.{fmt}"
    if fmt == "txt":
        wpath.write_text("\n".join(words) + "\n", encoding="utf-8")
    elif fmt == "json":
        wpath.write_text(json.dumps(words), encoding="utf-8")
    else:
        pq.write_table(pa.table({"index": words}), wpath)
    voc = Vocabulary.load(tmp_path / "v.npy", wpath)
    assert voc.words == tuple(words)
    np.testing.assert_array_equal(voc.vectors, X)
    assert Vocabulary.load(tmp_path / "v.npy", wpath, limit=2).words == ("alpha", "beta")


def test_text_format_glove_and_word2vec_header(tmp_path):
    glove = tmp_path / "g.txt"
    glove.write_text("the 0.1 0.2 0.3\nNew York 1 2 3\ncat -1 0 1e-3\n", encoding="utf-8")
    voc = Vocabulary.load(glove)
    assert voc.words == ("the", "New York", "cat") and voc.dim == 3
    np.testing.assert_allclose(voc.vectors[2], [-1, 0, 1e-3])
    w2v = tmp_path / "w.vec"
    w2v.write_text("2 2\nfoo 1 2\nbar 3 4\n", encoding="utf-8")
    assert Vocabulary.from_text(w2v).words == ("foo", "bar")
    assert Vocabulary.from_text(w2v, limit=1).words == ("foo",)


def test_text_format_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("a 1 2\nb 1 x\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.txt:2: vector values must be numbers"):
        Vocabulary.from_text(bad)
    short = tmp_path / "short.txt"
    short.write_text("a 1 2 3\nb 1 2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"short.txt:2: expected a word and 3 values"):
        Vocabulary.from_text(short)


def test_load_argument_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="file not found"):
        Vocabulary.load(tmp_path / "missing.txt")
    np.save(tmp_path / "v.npy", np.zeros((1, 2)))
    with pytest.raises(ValueError, match="needs a word list"):
        Vocabulary.load(tmp_path / "v.npy")
    (tmp_path / "g.txt").write_text("a 1 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"only used with a \.npy"):
        Vocabulary.load(tmp_path / "g.txt", tmp_path / "g.txt")
    with pytest.raises(ValueError, match="words needs vectors"):
        Vocabulary.load(None, tmp_path / "g.txt")


@pytest.mark.slow
def test_glove_6b_50d_loads_offline():
    voc = Vocabulary.glove()
    assert len(voc) == 400_000 and voc.dim == 50
    assert voc.words[:3] == ("the", ",", ".") and voc.index_of("Hospital") is not None
