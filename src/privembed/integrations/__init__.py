"""Where users already are: vector stores, RAG frameworks, scikit-learn and distributed batch jobs.

Nothing heavy is imported until it is used: each name below loads its module (and its optional
dependency: extra ``integrations`` for Chroma, Qdrant, scikit-learn and LangChain, ``text`` for
FAISS, ``distributed`` for Ray, ``embed`` for sentence-transformers) on first access.

* ``VectorStore`` / ``open_store`` -- the adapter interface; ``ChromaStore`` (embedded, the
  default), ``QdrantStore`` (local mode), ``FaissStore`` (one local index file).
* ``ProtectedCollection`` -- protect on the way into a store, treat queries on the way out.
* ``query_treatment`` -- what a plain query needs for each mechanism.
* ``PrivatizeTransformer`` -- scikit-learn transformer.
* ``PrivateSentenceTransformer`` -- sentence-transformers wrapper (``encode`` -> protected).
* ``PrivateEmbeddings`` -- LangChain ``Embeddings``; ``PrivateRetriever`` -- a LangChain retriever
  with exact re-ranking over sealed payloads.
* ``Searcher`` -- a warm search session (model loaded once; re-rank with the key).
* ``protect_shards`` / ``protect_dataset`` -- a folder or glob of Parquet shards, local or Ray.
* ``protect_stream`` -- stdin to stdout (JSONL / NPY).
* ``index_file`` -- an embeddings file into a store (``privembed index``).

Every path protects through :class:`privembed.release.Release`, the one release path.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ChromaStore",
    "FaissStore",
    "Hit",
    "PrivateEmbeddings",
    "PrivateRetriever",
    "PrivateSentenceTransformer",
    "PrivatizeTransformer",
    "ProtectedCollection",
    "QdrantStore",
    "QueryTreatment",
    "SearchResult",
    "Searcher",
    "VectorStore",
    "index_file",
    "open_store",
    "protect_dataset",
    "protect_shards",
    "protect_stream",
    "query_treatment",
]

_WHERE = {
    "ChromaStore": "stores",
    "FaissStore": "stores",
    "Hit": "stores",
    "QdrantStore": "stores",
    "VectorStore": "stores",
    "open_store": "stores",
    "ProtectedCollection": "collection",
    "index_file": "collection",
    "QueryTreatment": "query",
    "query_treatment": "query",
    "PrivatizeTransformer": "sklearn",
    "PrivateSentenceTransformer": "sentence_transformers",
    "PrivateEmbeddings": "langchain",
    "PrivateRetriever": "langchain",
    "Searcher": "collection",
    "SearchResult": "collection",
    "protect_shards": "shards",
    "protect_dataset": "shards",
    "protect_stream": "stream",
}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
