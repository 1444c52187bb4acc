"""Shared data and warning filters for the integration tests.

Third-party warnings are filtered here, narrowly (by message and category), and only for the
tests in this folder -- never globally. Each entry names the library that emits it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from privembed.data.io import write_embeddings

# Telemetry off and no token file in ~/.ray for the local test clusters.
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

THIRD_PARTY_WARNINGS = (
    # ray 2.60: Ray Data's own DataContext defaults trip its deprecation checks
    # (ray/data/context.py, emitted whenever a DataContext is created)
    "ignore:`use_push_based_shuffle` is deprecated:DeprecationWarning",
    "ignore:`use_polars` is deprecated:DeprecationWarning",
    "ignore:`use_arrow_tensor_v2` is deprecated:DeprecationWarning",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            for flt in THIRD_PARTY_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(flt))


KEY = bytes(range(32))


def clustered(n: int = 200, d: int = 32, seed: int = 0) -> np.ndarray:
    """Unit-free float32 embeddings: random directions (distinct, well separated in d=32)."""
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def near_copies(X: np.ndarray, scale: float = 0.05, seed: int = 1) -> np.ndarray:
    """Queries close to each record (a paraphrase): x + small isotropic noise."""
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    noise = np.random.default_rng(seed).standard_normal(X.shape) * scale / np.sqrt(X.shape[1])
    return (Xn + noise).astype(np.float32)


def cosines(X: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """Cosine of every query (rows of Q) with every record (rows of X), float64."""
    Xn = X / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    Qn = Q / np.linalg.norm(Q.astype(np.float64), axis=1, keepdims=True)
    return np.asarray(Qn @ Xn.T)


def brute_topk(X: np.ndarray, Q: np.ndarray, k: int) -> list[list[int]]:
    """Exact cosine top-k (row indices) of queries Q against X."""
    return [[int(i) for i in np.argsort(-s, kind="stable")[:k]] for s in cosines(X, Q)]


@pytest.fixture
def key() -> bytes:
    return KEY


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    p = tmp_path / "release.key"
    p.write_text(KEY.hex() + "\n")
    p.chmod(0o600)
    return p


@pytest.fixture
def emb_file(tmp_path: Path) -> tuple[Path, np.ndarray]:
    X = clustered()
    p = tmp_path / "emb.parquet"
    write_embeddings(
        p, X, ids=[f"r{i}" for i in range(X.shape[0])], metadata={"embedding_model": "toy"}
    )
    return p, X
