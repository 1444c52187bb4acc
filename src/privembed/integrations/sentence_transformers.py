"""A sentence-transformers wrapper whose ``encode`` returns protected vectors.

:class:`PrivateSentenceTransformer` wraps a :class:`sentence_transformers.SentenceTransformer`
(or privembed's offline :class:`~privembed.data.embedders.Embedder`, the default) and follows its
encoding API: ``encode`` / ``encode_document`` return protected embeddings, ``encode_query``
returns queries treated as the mechanism requires (:mod:`privembed.integrations.query`: the plain
query for noise mechanisms, the same public projection without noise for ``PrivateProjection``).
Code that calls ``model.encode(...)`` before writing vectors to a store can swap in the wrapper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core._optional import require
from ..mechanisms import Mechanism
from ._text import TextProtector, TextWrapper

__all__ = ["PrivateSentenceTransformer"]


class PrivateSentenceTransformer(TextWrapper):
    """Encode texts with a sentence-transformers model and protect the vectors.

    Parameters
    ----------
    model : str, SentenceTransformer, Embedder or None
        ``None`` or a name/folder: privembed's :class:`~privembed.data.embedders.Embedder` (offline
        all-MiniLM-L6-v2 by default, L2-normalised). A ``SentenceTransformer`` (or anything with
        its ``encode``) is used as it is; its ``encode_query`` (query prompts) if it has one.
    mechanism : Mechanism
    key : bytes, optional
        Keyed noise per text (SHA-256 of the text is the record id).
    rng : int, numpy.random.Generator or None
        Randomness without a key; one generator advanced by every call.

    Examples
    --------
    >>> from privembed import get_mechanism
    >>> fake = lambda texts: np.eye(4)[: len(texts)]          # stands in for a model
    >>> m = PrivateSentenceTransformer(fake, mechanism=get_mechanism("laplace", epsilon=50.0), rng=0)
    >>> m.encode(["a", "b"]).shape, m.encode("a").shape
    ((2, 4), (4,))
    """

    def __init__(
        self,
        model: Any = None,
        *,
        mechanism: Mechanism,
        key: bytes | None = None,
        rng: Any = None,
    ) -> None:
        if model is None or isinstance(model, str):
            from ..data.embedders import Embedder

            model = Embedder(model)
        self.model = model
        if callable(model) and not hasattr(model, "encode"):
            encode = model
            encode_query = None
        else:
            encode = self._encoder(model, "encode")
            encode_query = (
                self._encoder(model, "encode_query") if hasattr(model, "encode_query") else None
            )
        self._texts = TextProtector(
            encode,
            mechanism,
            key=key,
            rng=rng,
            encode_query=encode_query,
            model_id=_model_id(model),
        )

    @staticmethod
    def _encoder(model: Any, method: str) -> Any:
        fn = getattr(model, method)
        from ..data.embedders import Embedder

        if isinstance(model, Embedder):
            return fn
        return lambda texts: fn(texts, convert_to_numpy=True, show_progress_bar=False)

    @staticmethod
    def _out(Y: np.ndarray, single: bool, convert_to_tensor: bool) -> Any:
        out = Y[0] if single else Y
        if convert_to_tensor:
            torch = require("torch", "learn", purpose="convert_to_tensor=True")
            return torch.from_numpy(np.ascontiguousarray(out))
        return out

    def encode(
        self, sentences: str | Sequence[str], *, convert_to_tensor: bool = False, **_: Any
    ) -> Any:
        """Protected embeddings: (n, output_dim) for a list, (output_dim,) for one string.

        Other keyword arguments of ``SentenceTransformer.encode`` are accepted and ignored
        (the wrapped model is called with its defaults plus ``convert_to_numpy=True``).
        """
        single = isinstance(sentences, str)
        items = [sentences] if isinstance(sentences, str) else list(sentences)
        return self._out(self._texts.documents(items), single, convert_to_tensor)

    encode_document = encode

    def encode_query(
        self, sentences: str | Sequence[str], *, convert_to_tensor: bool = False, **_: Any
    ) -> Any:
        """Query embeddings with the treatment the mechanism requires (never noised)."""
        single = isinstance(sentences, str)
        items = [sentences] if isinstance(sentences, str) else list(sentences)
        return self._out(self._texts.queries(items), single, convert_to_tensor)

    def get_sentence_embedding_dimension(self) -> int | None:
        """Dimension of the protected vectors (``None`` if the model does not say)."""
        fn = getattr(self.model, "get_embedding_dimension", None) or getattr(
            self.model, "get_sentence_embedding_dimension", None
        )  # sentence-transformers 6 renamed it (the old name warns)
        d = getattr(self.model, "dim", None) if fn is None else fn()
        return None if d is None else self.mechanism.output_dim(int(d))

    #: sentence-transformers 6's name for :meth:`get_sentence_embedding_dimension`
    get_embedding_dimension = get_sentence_embedding_dimension


def _model_id(model: Any) -> str:
    """The wrapped model's identity for keyed noise: its name and a digest of what computes
    the vectors (module classes and configurations, every weight tensor, the tokenizer:
    :func:`privembed.data.embedders.loaded_model_digest`), so that two models never share a text's
    noise -- the difference of their releases would otherwise be the exact difference of their
    clean vectors. A privembed :class:`~privembed.data.embedders.Embedder` gives its own
    :attr:`~privembed.data.embedders.Embedder.identity`."""
    from ..data.embedders import loaded_model_digest

    ident = getattr(model, "identity", None)
    if isinstance(ident, str) and ident:
        return ident
    name = type(model).__qualname__
    for attr in ("model_card_data", "name_or_path"):
        v = getattr(model, attr, None)
        found = getattr(v, "base_model", None) or (v if isinstance(v, str) else None)
        if found:
            name = str(found)
            break
    return f"{name}@{loaded_model_digest(model)[:32]}"
