"""Shared helpers of the reproduction scripts: cached MiniLM embeddings and Markdown tables."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
MODEL = "all-MiniLM-L6-v2"


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "privembed"


def embed_cached(name: str, texts: Sequence[str], *, use_cache: bool = True) -> np.ndarray:
    """MiniLM embeddings (float32, unit rows) of ``texts``, cached by a hash of model + texts.

    The key is the one ``docs/experiments/projection_experiment.py`` uses, so the Lee sentences
    embedded there are reused.
    """
    texts = list(texts)
    key = hashlib.sha256((MODEL + "\n" + "\n".join(texts)).encode()).hexdigest()[:16]
    path = cache_dir() / f"{name}_minilm_{key}.npy"
    if use_cache and path.exists():
        return np.load(path)
    import torch

    torch.set_num_threads(2)
    from privembed.data.embedders import Embedder

    X = Embedder(batch_size=64).encode(texts).astype(np.float32)
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, X)
    return X


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if not np.isfinite(v):
            return "∞" if v > 0 else "–"
        return f"{v:.{digits}f}"
    return str(v)


def markdown(rows: list[dict[str, Any]], cols: Sequence[str], digits: int = 3) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(fmt(r.get(c), digits) for c in cols) + " |")
    return "\n".join(out)
