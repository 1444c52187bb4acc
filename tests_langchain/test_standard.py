"""LangChain's own standard test suites for ``PrivateEmbeddings`` (``langchain-tests``).

They run in their own virtual environment and pytest invocation (``make langchain-tests``,
part of ``make test``): ``langchain-tests`` brings pytest plugins (pytest-asyncio,
pytest-socket, syrupy, ...) that must not change how the main suite runs.
"""

from __future__ import annotations

from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from privembed import get_mechanism
from privembed.integrations.langchain import PrivateEmbeddings

KEY = bytes(range(32))


class _Params:
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return PrivateEmbeddings

    @property
    def embedding_model_params(self) -> dict:
        return {
            "embeddings": DeterministicFakeEmbedding(size=16),
            "mechanism": get_mechanism("laplace", epsilon=20.0),
            "key": KEY,
        }


class TestStandardUnit(_Params, EmbeddingsUnitTests):
    pass


class TestStandardIntegration(_Params, EmbeddingsIntegrationTests):
    pass
