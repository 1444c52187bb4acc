"""Small synthetic fixtures for the attack tests (no embedding model: bag-of-words vectors)."""

from __future__ import annotations

import numpy as np
import pytest

WORDS = [f"w{i}" for i in range(24)]


def bow_corpus(n: int, d: int = 48, seed: int = 0, words_per_text: int = 3):
    """Texts of 3 random words and their unit 'embeddings': the sum of fixed random word vectors.

    Unprotected, every word is linearly readable from the vector, so token attacks must beat
    chance by far.
    """
    rng = np.random.default_rng(seed)
    W = np.random.default_rng(12345).standard_normal((len(WORDS), d))
    texts, X = [], np.empty((n, d))
    for i in range(n):
        idx = rng.choice(len(WORDS), size=words_per_text, replace=False)
        texts.append(" ".join(WORDS[j] for j in idx))
        v = W[idx].sum(axis=0) + 0.05 * rng.standard_normal(d)
        X[i] = v / np.linalg.norm(v)
    return texts, X


@pytest.fixture(scope="module")
def bow():
    return bow_corpus(600)
