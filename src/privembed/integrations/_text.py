"""Texts in, protected document vectors and treated query vectors out (shared by the wrappers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._validation import DataError
from ..mechanisms import Mechanism
from ._protect import BatchProtector, text_ids
from .query import QueryTreatment, query_treatment

__all__ = ["TextProtector"]

Encode = Callable[[list[str]], Any]


class TextProtector:
    """Embed texts with ``encode`` and protect them; treat queries as the mechanism requires.

    With a ``key`` each document's noise is keyed by the SHA-256 of its text
    (:func:`~privembed.integrations._protect.text_ids`): the same text always yields the same
    protected vector, in any batch, any process.
    """

    def __init__(
        self,
        encode: Encode,
        mechanism: Mechanism,
        *,
        key: bytes | None = None,
        rng: Any = None,
        encode_query: Encode | None = None,
    ) -> None:
        self.encode = encode
        self.encode_query = encode_query or encode
        self.protector = BatchProtector(mechanism, key=key, rng=rng, name="texts")
        self.treatment: QueryTreatment = query_treatment(mechanism)

    @property
    def mechanism(self) -> Mechanism:
        return self.protector.mechanism

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
        if not self.protector.keyed:
            return self.protector(self._embed(self.encode, items))
        # keyed: one release per distinct text (equal texts share an id, hence a vector)
        uniq = list(dict.fromkeys(items))
        Y = self.protector(self._embed(self.encode, uniq), text_ids(uniq))
        pos = {t: i for i, t in enumerate(uniq)}
        return Y[[pos[t] for t in items]]

    def queries(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Query embeddings of ``texts`` after the treatment, shape (n, output_dim)."""
        items = self._check(texts)
        if not items:
            return np.empty((0, 0), dtype=np.float32)
        return np.atleast_2d(self.treatment.apply(self._embed(self.encode_query, items)))
