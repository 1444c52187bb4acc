"""Small synthetic vocabularies for the text tests (no GloVe unless marked slow)."""

from __future__ import annotations

import numpy as np
import pytest

from privembed.text import NearestNeighbourIndex, Vocabulary

REAL_WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "a", "hospital", "patient"]


def make_vocab(n: int = 400, d: int = 8, seed: int = 0) -> Vocabulary:
    """``n`` words: a few English ones first, then ``w10``, ``w11``, ... with Gaussian vectors."""
    X = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    words = REAL_WORDS + [f"w{i}" for i in range(len(REAL_WORDS), n)]
    return Vocabulary(words=words[:n], vectors=X, name="toy")


@pytest.fixture(scope="session")
def vocab() -> Vocabulary:
    return make_vocab()


@pytest.fixture(scope="session")
def index(vocab: Vocabulary) -> NearestNeighbourIndex:
    return NearestNeighbourIndex(vocab.vectors)
