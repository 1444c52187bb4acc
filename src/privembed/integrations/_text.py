"""Texts in, protected document vectors and treated query vectors out (shared by the wrappers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypedDict, Unpack

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_keywords
from ..core.rng import as_generator
from ..keys.keyed import resolve_key, text_digests
from ..mechanisms import Mechanism
from ..release import Release, check_randomness, content_ids
from ..release.identity import rounds
from .query import QueryTreatment, query_treatment

__all__ = ["TextOptions", "TextProtector", "TextWrapper"]

Encode = Callable[[list[str]], Any]


class TextOptions(TypedDict, total=False):
    """What a :class:`TextProtector` takes besides the model's ``encode`` and the mechanism
    (what the wrappers pass on).

    Attributes
    ----------
    key : bytes or key file, optional
        Keyed noise per text (content ids); without it ``rng``.
    rng : seed or Generator, optional
        Randomness without a key; one generator advanced by every call.
    encode_query : callable, optional
        The model's query embedding (default ``encode``).
    model_id : str, optional
        The model's identity in the content digests (default ``"unknown"``).
    """

    key: Any
    rng: Any
    encode_query: Encode | None
    model_id: str | None


class TextProtector:
    """Embed texts with ``encode`` and protect them; treat queries as the mechanism requires.

    With a ``key`` each document is a record whose id is a keyed HMAC of its text
    (:func:`privembed.release.content_ids`) and whose content digest is the canonical text and
    ``model_id`` (:func:`privembed.keys.keyed.text_digests`): the same text always gets the same
    noise, in any batch, any process, and the ledger counts its re-release as free. The model's
    own float output may jitter with the batch (padding: about 1e-7 for all-MiniLM-L6-v2), and
    the released vector then differs by that jitter only -- the difference of two releases is
    the model's rounding, not information about the text. Every call to :meth:`documents` is one
    release (:class:`~privembed.release.Release`), or one per round where variants of one text
    (equal up to case, whitespace and compatibility forms: one id) are given together.
    """

    def __init__(
        self, encode: Encode, mechanism: Mechanism, **options: Unpack[TextOptions]
    ) -> None:
        check_keywords("TextProtector.__init__", options, TextOptions)
        key, rng = options.get("key"), options.get("rng")
        self.encode = encode
        self.encode_query = options.get("encode_query") or encode
        check_randomness(key, rng, key_name="a key", rng_name="a seed")
        self.mechanism = mechanism
        self.key = None if key is None else resolve_key(key)
        self.model_id = options.get("model_id") or "unknown"
        # one generator across calls: a seed gives a reproducible sequence of releases whose
        # noise never repeats between calls
        self._rng = None if rng is None else as_generator(rng)
        self.treatment: QueryTreatment = query_treatment(mechanism)

    @staticmethod
    def _check(texts: Sequence[str]) -> list[str]:
        items = list(texts)
        bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
        if bad:
            raise TypeError(
                f"texts must be strings, got {type(items[bad[0]]).__name__} at {bad[0]}."
            )
        return items

    def _embed(self, fn: Encode, items: list[str]) -> NDArray[np.floating[Any]]:
        X = np.asarray(fn(items))
        if X.ndim != 2 or X.shape[0] != len(items):
            raise DataError(f"the embedding model returned shape {X.shape} for {len(items)} texts.")
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float32)
        return X

    def documents(self, texts: Sequence[str]) -> NDArray[np.floating[Any]]:
        """Protected embeddings of ``texts``, shape (n, output_dim)."""
        items = self._check(texts)
        if not items:
            return np.empty((0, 0), dtype=np.float32)
        if self.key is None:
            with Release(self.mechanism, rng=self._rng, name="texts") as rel:
                return rel.protect(self._embed(self.encode, items))
        # keyed: equal texts share an id, hence a vector; variants of one text (case,
        # whitespace) share the id with noise of their own: one release per round of them
        uniq = list(dict.fromkeys(items))
        ids = content_ids(key=self.key, texts=uniq)
        X = self._embed(self.encode, uniq)
        digests = text_digests(uniq, self.model_id)
        parts, rs = [], rounds(ids)
        for rows in rs:
            with Release(self.mechanism, key=self.key, model=self.model_id, name="texts") as rel:
                parts.append(rel.protect(X[rows], [ids[i] for i in rows],
                                         digests=[digests[i] for i in rows]))  # fmt: skip
        order = [i for rows in rs for i in rows]
        Y = np.concatenate(parts)[np.argsort(order)]
        pos = {t: i for i, t in enumerate(uniq)}
        return Y[[pos[t] for t in items]]

    def queries(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Query embeddings of ``texts`` after the treatment, shape (n, output_dim)."""
        items = self._check(texts)
        if not items:
            return np.empty((0, 0), dtype=np.float32)
        return np.atleast_2d(self.treatment.apply(self._embed(self.encode_query, items)))


class TextWrapper:
    """What a wrapper that protects texts through a :class:`TextProtector` (``self._texts``)
    shows of it."""

    _texts: TextProtector

    @property
    def mechanism(self) -> Mechanism:
        return self._texts.mechanism

    @property
    def metric(self) -> str:
        """The similarity between queries and protected documents, ``"cosine"`` or ``"ip"``
        (the one a vector store must use)."""
        return self._texts.treatment.metric
