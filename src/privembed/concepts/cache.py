"""Embed texts once: an on-disk ``.npz`` cache keyed by the embedding model and the texts.

Mask learning trains on precomputed embeddings ([T26] App. G); with the cache, running
``privembed concept learn`` again (another lambda, another seed) does not embed anything.
The key is the SHA-256 of the embedder's metadata (model name, dimension, normalisation) and
the texts, in order. The cache folder is the ``embeddings/`` sub-folder of privembed's cache
root: ``$PRIVEMBED_CACHE``, else ``$XDG_CACHE_HOME/privembed``, else ``~/.cache/privembed``
(the root the ONNX exports use too). ``$PRIVEMBED_CACHE_DIR``, the older variable, still names
the embeddings folder itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError
from ._npz import write_npz

__all__ = ["cache_key", "default_cache_dir", "embed_texts"]


def default_cache_dir() -> Path:
    """``$PRIVEMBED_CACHE_DIR`` (the folder itself), else ``embeddings/`` under the cache root
    of :func:`privembed.data.embedders.onnx_cache_dir`."""
    env = os.environ.get("PRIVEMBED_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if os.environ.get("PRIVEMBED_CACHE"):
        root = Path(os.environ["PRIVEMBED_CACHE"])
    elif os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"]) / "privembed"
    else:
        root = Path.home() / ".cache" / "privembed"
    return root.expanduser() / "embeddings"


def cache_key(texts: Sequence[str], model_metadata: dict[str, Any]) -> str:
    """SHA-256 over the model metadata and the texts (order matters).

    Examples
    --------
    >>> k = cache_key(["a", "b"], {"embedding_model": "m"})
    >>> k == cache_key(["a", "b"], {"embedding_model": "m"}), k == cache_key(["b", "a"], {"embedding_model": "m"})
    (True, False)
    """
    h = hashlib.sha256()
    h.update(json.dumps(model_metadata, sort_keys=True, default=str).encode())
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def embed_texts(
    texts: Sequence[str],
    *,
    embedder: Any = None,
    model: str | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
) -> NDArray[np.float32]:
    """Embeddings of ``texts`` (n, d), from the cache when the same model embedded them before.

    Parameters
    ----------
    texts : sequence of str
    embedder : object, optional
        Anything with ``encode(list[str]) -> (n, d) array`` and ``metadata() -> dict``
        (default: :class:`privembed.data.embedders.Embedder` for ``model``).
    model : str, optional
        Model for the default embedder (offline all-MiniLM-L6-v2 if None).
    cache_dir : path, optional
        Default :func:`default_cache_dir`.
    use_cache : bool, default True
    """
    texts = list(texts)
    if not texts:
        raise DataError("texts must be non-empty.")
    if embedder is None:
        from ..data.embedders import Embedder

        embedder = Embedder(model)
    meta = dict(embedder.metadata())
    path = None
    if use_cache:
        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        path = folder / f"{cache_key(texts, meta)}.npz"
        if path.exists():
            with contextlib.suppress(Exception), np.load(path, allow_pickle=False) as z:
                X = z["embeddings"]
                if X.ndim == 2 and X.shape[0] == len(texts):
                    return np.asarray(X, dtype=np.float32)
    X = np.asarray(embedder.encode(texts), dtype=np.float32)
    if X.ndim != 2 or X.shape[0] != len(texts):
        raise DataError(f"the embedder returned shape {X.shape} for {len(texts)} texts.")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_npz(path, {**meta, "n": len(texts)}, {"embeddings": X})
    return X
