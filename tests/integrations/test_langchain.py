"""``PrivateEmbeddings`` against LangChain's ``Embeddings`` interface.

* LangChain's standard test suites (``langchain-tests``: ``EmbeddingsUnitTests``,
  ``EmbeddingsIntegrationTests``) run in their own environment and pytest invocation:
  ``tests_langchain/test_standard.py`` (``make langchain-tests``, part of ``make test``).
* Here: the interface assertions made explicitly, plus what the standard suites do not cover:
  keyed determinism, use inside a LangChain vector store, the query-side treatment and errors.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from privembed import get_mechanism
from privembed.integrations.langchain import PrivateEmbeddings

from .conftest import KEY


def _model(**kw):
    kw.setdefault("mechanism", get_mechanism("gaussian", epsilon=10.0, delta=1e-5))
    return PrivateEmbeddings(DeterministicFakeEmbedding(size=16), **kw)


# ---- the same interface checks, explicitly ----------------------------------------------------
def test_is_an_embeddings():
    assert isinstance(_model(), Embeddings)


def test_embed_query_and_documents_shapes_and_types():
    m = _model(key=KEY)
    e1, e2 = m.embed_query("foo"), m.embed_query("bar")
    assert isinstance(e1, list) and isinstance(e1[0], float) and len(e1) == len(e2) == 16
    docs = m.embed_documents(["foo", "bar", "baz"])
    assert len(docs) == 3 and all(isinstance(d, list) and isinstance(d[0], float) for d in docs)
    assert {len(d) for d in docs} == {16}
    assert m.embed_documents([]) == []


def test_async_variants_match_sync_with_a_key():
    m = _model(key=KEY)
    docs = asyncio.run(m.aembed_documents(["foo", "bar"]))
    assert docs == m.embed_documents(["foo", "bar"])
    assert asyncio.run(m.aembed_query("foo")) == m.embed_query("foo")


def test_documents_are_protected_queries_are_not():
    base = DeterministicFakeEmbedding(size=16)
    m = PrivateEmbeddings(base, mechanism=get_mechanism("gaussian", epsilon=2.0, delta=1e-5))
    plain = np.asarray(base.embed_documents(["foo"])[0])
    plain /= np.linalg.norm(plain)
    doc = np.asarray(m.embed_documents(["foo"])[0])
    assert np.isclose(np.linalg.norm(doc), 1.0) and float(doc @ plain) < 0.9  # noised
    np.testing.assert_allclose(m.embed_query("foo"), plain, rtol=1e-6)  # plain, unit length


def test_keyed_documents_are_deterministic_per_text():
    a, b = _model(key=KEY), _model(key=KEY)
    d1 = a.embed_documents(["x", "y", "x"])
    assert d1[0] == d1[2] and d1[0] != d1[1]
    assert b.embed_documents(["y", "x"]) == [d1[1], d1[0]]  # any batch, any instance
    assert _model(key=b"z" * 32).embed_documents(["x"])[0] != d1[0]  # another key
    fresh = _model()
    assert fresh.embed_documents(["x"]) != fresh.embed_documents(["x"])  # unkeyed: fresh noise


def test_inside_a_langchain_vector_store():
    m = _model(mechanism=get_mechanism("gaussian", epsilon=1e6, delta=1e-5), key=KEY)
    assert m.metric == "cosine"  # InMemoryVectorStore uses cosine
    store = InMemoryVectorStore(m)
    texts = [f"note {i}" for i in range(30)]
    store.add_texts(texts, ids=[str(i) for i in range(30)])
    hits = store.similarity_search("note 7", k=2)
    assert hits[0].page_content == "note 7"


def test_projection_queries_use_the_public_projection():
    mech = get_mechanism("projection", k=6, epsilon=5.0, delta=1e-5)
    m = _model(mechanism=mech, key=KEY)
    q = m.embed_query("foo")
    base = np.asarray(DeterministicFakeEmbedding(size=16).embed_query("foo"))
    np.testing.assert_allclose(q, mech.project(base), rtol=1e-5)
    assert len(m.embed_documents(["foo"])[0]) == 6


def test_errors():
    with pytest.raises(TypeError, match="must be a langchain_core Embeddings"):
        PrivateEmbeddings(object(), mechanism=get_mechanism("laplace", epsilon=5.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        _model(key=KEY, rng=1)
    with pytest.raises(TypeError, match="texts must be strings"):
        _model().embed_documents(["a", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="text must be a string"):
        _model().embed_query(3)  # type: ignore[arg-type]
