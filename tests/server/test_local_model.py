"""The local backend: the offline all-MiniLM-L6-v2 behind the proxy, through the openai client."""

from __future__ import annotations

import numpy as np
import openai
import pytest

from privembed import get_mechanism
from privembed.server import config_from_dict, create_app, hash_api_key, running_server

pytestmark = pytest.mark.slow

KEY = "pe-local-test-key"
PARAMS = {"epsilon": 400.0, "delta": 1e-5}  # E[cos] ~ 0.53 at d = 384


@pytest.fixture(scope="module")
def local_server(server_key):
    raw = {
        "server": {"key_file": str(server_key[0]), "max_inputs": 64},
        "models": {
            "docs": {"mechanism": "gaussian", "params": PARAMS},
            "queries": {"role": "queries", "documents": "docs"},
        },
        "api_keys": [{"name": "t", "sha256": hash_api_key(KEY)}],
    }
    with running_server(create_app(config_from_dict(raw))) as handle:
        yield handle


def test_local_minilm_protected_by_the_gaussian_law(local_server):
    from privembed.data.datasets import synthetic_clinical_notes

    texts = [n.text for n in synthetic_clinical_notes(48, seed=11)]
    with openai.OpenAI(
        base_url=local_server.base_url, api_key=KEY, max_retries=0, timeout=120
    ) as c:
        check(c, texts)


def check(c: openai.OpenAI, texts: list[str]) -> None:
    from privembed.data.embedders import Embedder

    r = c.embeddings.create(model="docs", input=texts)
    Y = np.array([d.embedding for d in r.data])
    assert Y.shape == (48, 384) and r.usage.prompt_tokens > 48
    X = Embedder().encode(texts).astype(np.float64)
    cos = np.sum(X * Y, axis=1) / (np.linalg.norm(X, axis=1) * np.linalg.norm(Y, axis=1))
    expected = get_mechanism("gaussian", **PARAMS).expected_cosine(384)
    se = cos.std(ddof=1) / np.sqrt(len(cos))
    assert abs(cos.mean() - expected) < 4.4 * se, (cos.mean(), expected, se)
    # the same text again (alone, another batch): the identical vector (keyed noise + cache)
    again = c.embeddings.create(model="docs", input=texts[3])
    np.testing.assert_array_equal(np.array(again.data[0].embedding), Y[3])
    # queries of a noise-in-place mechanism are the clean model output
    q = c.embeddings.create(model="queries", input=texts[:4], dimensions=384)
    Q = np.array([d.embedding for d in q.data])
    np.testing.assert_allclose(Q, X[:4], atol=2e-6)
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        c.embeddings.create(model="docs", input="x", dimensions=128)


def test_runtimes_agree_on_vectors_and_token_counts():
    """``runtime = "torch"`` and ``"onnx"`` give the same vectors (cosine >= 0.99999, the
    export's own check) and the same token counts, and say which one ran."""
    import asyncio

    from privembed.server.backends import LocalBackend
    from privembed.server.config import BackendConfig

    texts = ["a short note", "the patient reports chest pain after exercise " * 3, "ok"]

    async def embed(runtime: str):
        b = LocalBackend(BackendConfig(name="local", type="local", runtime=runtime, threads=1))
        await b.start()
        try:
            X, counts = await b.embed(texts)
            return X, counts, b.engine, b.dim
        finally:
            await b.close()

    Xt, ct, et, dt = asyncio.run(embed("torch"))
    Xo, co, eo, do = asyncio.run(embed("onnx"))
    assert (et, eo) == ("torch", "onnx") and dt == do == 384
    assert ct == co and all(c > 2 for c in ct)
    assert np.min(np.sum(Xt * Xo, axis=1)) >= 0.99999
