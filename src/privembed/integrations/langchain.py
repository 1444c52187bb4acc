"""LangChain: ``PrivateEmbeddings``, an ``Embeddings`` whose document vectors are protected.

Wrap any LangChain embedding model (or privembed's offline model, the default) and hand the
wrapper to a vector store; documents are protected before the store sees them, queries are
treated as the mechanism requires (:mod:`privembed.integrations.query`)::

    from langchain_core.vectorstores import InMemoryVectorStore
    emb = PrivateEmbeddings(mechanism=get_mechanism("gaussian", epsilon=10, delta=1e-5),
                            key=load_key("release.key"))
    store = InMemoryVectorStore(emb)          # cosine: right for renormalising mechanisms

The vector store must use the similarity in :attr:`PrivateEmbeddings.metric`: cosine for
mechanisms that renormalise their outputs (the default for every noise mechanism), the inner
product for ``PrivateProjection`` (its releases keep raw norms; the inner product is the unbiased
score). The raw texts still reach the wrapped embedding model -- this protects what is stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core._optional import require
from ..mechanisms import Mechanism

require("langchain_core", "integrations", purpose="the LangChain Embeddings wrapper")

from langchain_core.callbacks import CallbackManagerForRetrieverRun  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402 - after the extra check
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from pydantic import ConfigDict  # noqa: E402

from ._text import TextProtector, TextWrapper  # noqa: E402

__all__ = ["PrivateEmbeddings", "PrivateRetriever"]


class PrivateEmbeddings(TextWrapper, Embeddings):
    """A LangChain ``Embeddings`` that protects document embeddings with a privembed mechanism.

    Parameters
    ----------
    embeddings : langchain_core.embeddings.Embeddings, optional
        The model that embeds texts. Default: privembed's :class:`~privembed.data.embedders.Embedder`
        (offline all-MiniLM-L6-v2, or ``model``).
    mechanism : Mechanism
    key : bytes, optional
        Keyed noise per document text (a keyed HMAC of the text is the record id): embedding
        the same document again returns the identical vector, so repeated indexing leaks
        nothing new.
    rng : int, numpy.random.Generator or None
        Randomness without a key; one generator advanced by every call.
    model : str, optional
        Model for the default embedder (whose identity is a digest of the model).
    model_identity : str, optional
        What identifies ``embeddings``' model for keyed noise (default: its ``model`` /
        ``model_name`` attribute). A hosted model cannot be digested here: give a string that
        changes whenever the provider's model does (e.g. its dated version), so a changed model
        gets independent noise instead of noise that cancels between the two releases.

    Examples
    --------
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from privembed import get_mechanism
    >>> emb = PrivateEmbeddings(DeterministicFakeEmbedding(size=8),
    ...                         mechanism=get_mechanism("laplace", epsilon=20.0), key=b"k" * 32)
    >>> docs = emb.embed_documents(["a", "b", "a"])
    >>> len(docs), len(docs[0]), docs[0] == docs[2], len(emb.embed_query("a"))
    (3, 8, True, 8)
    """

    def __init__(
        self,
        embeddings: Embeddings | None = None,
        *,
        mechanism: Mechanism,
        key: bytes | None = None,
        rng: Any = None,
        model: str | None = None,
        model_identity: str | None = None,
    ) -> None:
        if embeddings is None:
            from ..data.embedders import Embedder

            emb = Embedder(model)
            encode: Any = emb.encode
        else:
            if not isinstance(embeddings, Embeddings):
                raise TypeError(
                    "embeddings must be a langchain_core Embeddings, got "
                    f"{type(embeddings).__name__}."
                )
            if model is not None:
                raise ValueError("model applies only to the default embedder (embeddings=None).")
            encode = embeddings.embed_documents
        self.embeddings = embeddings
        if embeddings is None:
            model_id: str | None = emb.identity  # a digest of the local model
        else:
            # a hosted model is known by the name its provider serves; a changed model under
            # that name is the provider's to announce (docs/integrations.md)
            model_id = (
                model_identity
                or getattr(embeddings, "model", None)
                or getattr(embeddings, "model_name", None)
            )
        self._texts = TextProtector(
            encode,
            mechanism,
            key=key,
            rng=rng,
            model_id=str(model_id) if model_id else type(embeddings).__qualname__,
        )

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Protected embeddings of the documents (one list of floats each)."""
        if not texts:
            return []
        return [[float(v) for v in row] for row in self._texts.documents(texts)]

    def embed_query(self, text: str) -> list[float]:
        """The query embedding after the mechanism's query-side treatment (no noise)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}.")
        if self.embeddings is not None:
            # the wrapped model's own query embedding (some models embed queries differently)
            q = np.asarray([self.embeddings.embed_query(text)])
            return [float(v) for v in np.atleast_2d(self._texts.treatment.apply(q))[0]]
        return [float(v) for v in self._texts.queries([text])[0]]


class PrivateRetriever(BaseRetriever):
    """A LangChain retriever over a privembed collection with exact re-ranking.

    The store holds protected vectors and sealed payloads; this retriever, inside the trust
    boundary with the key, fetches ``rerank`` candidates (or the k' that theory gives for
    ``recall``) by protected similarity, opens their payloads and returns the top ``k`` by
    exact cosine as ``Document`` objects (``page_content``: the sealed text; ``metadata``: the
    record id, the exact cosine and the stored metadata).

    On a sealed collection (no vector in the store, :mod:`privembed.search.sealed`) every
    payload is opened once and ranked here: the hits are the exact top ``k`` and ``rerank`` /
    ``recall`` are ignored.

    Examples
    --------
    ``PrivateRetriever(searcher=Searcher("chroma", "db", key="secret.key"), k=4, recall=0.95)``
    """

    searcher: Any
    k: int = 4
    rerank: int | None = None
    recall: float | None = 0.95

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        recall = None if self.rerank is not None else self.recall
        result = self.searcher.search([query], self.k, rerank=self.rerank, recall=recall)[0]
        return [
            Document(
                page_content=h.text or "",
                metadata={
                    "id": h.id,
                    "cosine": h.score,
                    "score_kind": result.score_kind,
                    **h.metadata,
                },
            )
            for h in result.hits
        ]
