"""A synthetic corpus of unit vectors with the similarity structure of sentence embeddings.

Used by the store benchmarks (``bench_rerank.py``, ``bench_integrations.py``) for memory,
size and latency figures at 100k+ records, where embedding real text on two shared cores would
take hours. Not for quality figures: those use GCIDE (``docs/retrieval.md``).

Structure (all-MiniLM-L6-v2 on GCIDE definitions, measured for comparison: mean cosine between
random documents about 0.07, a document's 10th nearest neighbour at about 0.6):

- a shared direction (the anisotropy of real embeddings: every pair shares some cosine);
- ``topics`` topic directions with Zipf-distributed sizes (near neighbours share a topic);
- isotropic noise for the rest.

Queries are paraphrases: a document's vector plus noise, cosine about 0.8 to it.
"""

from __future__ import annotations

import numpy as np


def corpus(
    n: int, dim: int = 384, *, topics: int = 2000, seed: int = 0, chunk: int = 65536
) -> np.ndarray:
    """``n`` unit float32 vectors (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal(dim)
    shared /= np.linalg.norm(shared)
    centers = rng.standard_normal((topics, dim))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    weights = 1.0 / np.arange(1, topics + 1)  # Zipf: a few large topics, many small ones
    weights /= weights.sum()
    X = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        t = rng.choice(topics, size=m, p=weights)
        noise = rng.standard_normal((m, dim)) / np.sqrt(dim)
        V = 0.27 * shared + 0.75 * centers[t] + 0.62 * noise
        X[s : s + m] = V / np.linalg.norm(V, axis=1, keepdims=True)
    return X


def queries(X: np.ndarray, n: int, *, seed: int = 1) -> np.ndarray:
    """``n`` paraphrase-like queries near random documents of ``X`` (float32, unit)."""
    rng = np.random.default_rng(seed)
    docs = X[rng.integers(0, X.shape[0], size=n)].astype(np.float64)
    Q = docs + 0.75 * rng.standard_normal(docs.shape) / np.sqrt(X.shape[1])
    return (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)


def describe(X: np.ndarray, *, sample: int = 1000, seed: int = 2) -> str:
    """Mean cosine between random documents and the mean cosine of the 10th neighbour."""
    rng = np.random.default_rng(seed)
    S = X[rng.integers(0, X.shape[0], size=sample)] @ X.T
    tenth = -np.partition(-S, 10, axis=1)[:, 10]  # index 0 is the document itself
    return f"mean cosine {S.mean():.3f}, mean 10th-neighbour cosine {tenth.mean():.3f}"


def spectral(X: np.ndarray, n: int, *, seed: int = 3, chunk: int = 65536) -> np.ndarray:
    """``n`` unit float32 vectors drawn to the spectrum of the real embeddings ``X``.

    A Gaussian with ``X``'s mean and covariance (its eigenvalues and eigenvectors: the
    "spectrum"), each draw normalised to unit length. It keeps what the second moments fix --
    the shared direction, how the variance spreads over the 384 axes, hence the bulk of the
    similarity distribution a query sees -- and not the clusters and near-duplicates of real
    text (a draw has no close neighbour of its own): rows added this way make the corpus
    larger without making a true neighbour's rivals denser. Stated as synthetic wherever used
    (``bench_law.py``'s 1M rows).
    """
    A = np.asarray(X, dtype=np.float64)
    mu = A.mean(axis=0)
    C = np.cov(A, rowvar=False)
    w, V = np.linalg.eigh(C)
    root = V * np.sqrt(np.clip(w, 0.0, None))  # C = root @ root.T
    rng = np.random.default_rng(seed)
    out = np.empty((n, A.shape[1]), dtype=np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        Z = mu + rng.standard_normal((m, A.shape[1])) @ root.T
        out[s : s + m] = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    return out
