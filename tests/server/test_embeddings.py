"""The proxy through the real ``openai`` client on loopback: shapes, the mechanism's law, keyed
identity, query roles, batching, models/health/metrics, logs without plaintext."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading

import httpx
import numpy as np
import openai
import pytest

from privembed import get_mechanism
from privembed.keys.keyed import text_digests
from privembed.release import Release
from privembed.server import backend_key, text_record_id
from privembed.server.logs import JsonFormatter

from ._fake_upstream import DIM, clean_vector
from .conftest import FULL_KEY, LIMITED_KEY, queued_texts

_CLIENTS: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def client(handle, key: str = FULL_KEY) -> openai.OpenAI:
    c = openai.OpenAI(base_url=handle.base_url, api_key=key, max_retries=0, timeout=30)
    _CLIENTS.append(c)
    return c


def vectors(resp) -> np.ndarray:
    return np.array([d.embedding for d in resp.data], dtype=np.float64)


def test_shape_dtype_and_both_encodings(served):
    handle, _, _ = served
    c = client(handle)
    texts = ["the patient has diabetes", "stock markets fell", "a third note"]
    r = c.embeddings.create(model="docs", input=texts)  # the client asks for base64
    assert r.object == "list" and r.model == "docs" and len(r.data) == 3
    assert [d.index for d in r.data] == [0, 1, 2]
    Y = vectors(r)
    assert Y.shape == (3, DIM)
    assert r.usage.prompt_tokens == r.usage.total_tokens == sum(len(t.split()) for t in texts)
    # float32 values, unit length (the Gaussian mechanism renormalises)
    np.testing.assert_array_equal(Y.astype(np.float32).astype(np.float64), Y)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=1), 1.0, rtol=1e-5)
    # encoding_format="float" gives the same numbers; base64 is little-endian float32
    f = vectors(c.embeddings.create(model="docs", input=texts, encoding_format="float"))
    np.testing.assert_array_equal(f, Y)
    raw = httpx.post(
        handle.base_url + "/embeddings",
        headers={"Authorization": f"Bearer {FULL_KEY}"},
        json={"model": "docs", "input": texts[0], "encoding_format": "base64"},
    ).json()
    b = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert b.shape == (DIM,)
    np.testing.assert_array_equal(b.astype(np.float64), Y[0])


@pytest.mark.parametrize("model", ["docs", "docs-laplace"])
def test_vectors_follow_the_mechanism_law(served, model):
    """Mean cosine to the clean vector = the mechanism's expected cosine, within 4.4 SE."""
    handle, _, raw = served
    c = client(handle)
    texts = [f"record {i}: note about condition {i % 7}" for i in range(160)]
    Y = np.concatenate(
        [
            vectors(c.embeddings.create(model=model, input=texts[i : i + 8]))
            for i in range(0, 160, 8)
        ]
    )
    X = np.stack([clean_vector(t) for t in texts]).astype(np.float64)
    cos = np.sum(X * Y, axis=1) / np.linalg.norm(Y, axis=1)
    spec = raw["models"][model]
    mech = get_mechanism(spec["mechanism"], **spec["params"])
    expected = mech.expected_cosine(DIM)
    se = cos.std(ddof=1) / np.sqrt(len(cos))
    assert abs(cos.mean() - expected) < 4.4 * se, (cos.mean(), expected, se)
    assert cos.max() < 0.999  # every vector is actually perturbed


def test_identical_text_identical_vector_and_reproducible(served, server_key):
    handle, _, raw = served
    c = client(handle)
    a = vectors(c.embeddings.create(model="docs", input=["alpha", "beta", "alpha"]))
    np.testing.assert_array_equal(a[0], a[2])
    assert not np.array_equal(a[0], a[1])
    # a different request, a different batch composition: the same vector (cache is off)
    b = vectors(c.embeddings.create(model="docs", input=["gamma", "alpha"]))
    np.testing.assert_array_equal(b[1], a[0])
    # exactly the library's keyed release: id = HMAC(key, canonical text), content = the exact
    # text and the backend, per-backend noise key
    key = server_key[1]
    spec = raw["models"]["docs"]
    mech = get_mechanism(spec["mechanism"], **spec["params"])
    identity = f"upstream|{raw['backends']['up']['base_url']}|fake-embed|None"
    with Release(mech, key=backend_key(key, identity), model=identity) as rel:
        expected = rel.protect(
            clean_vector("alpha")[None, :].astype(np.float32),
            [text_record_id(key, "alpha")],
            digests=text_digests(["alpha"], identity),
        )[0]
    np.testing.assert_array_equal(a[0], expected.astype(np.float64))
    # another mechanism on the same text: independent noise
    lap = vectors(c.embeddings.create(model="docs-laplace", input=["alpha"]))[0]
    assert not np.allclose(lap, a[0], atol=1e-3)


def test_query_roles(served, server_key):
    handle, _, raw = served
    c = client(handle)
    texts = [f"query about topic {i}" for i in range(40)]
    X = np.stack([clean_vector(t) for t in texts]).astype(np.float64)
    # noise-in-place mechanism: queries are the clean vectors (query = "auto" -> "none")
    q = vectors(c.embeddings.create(model="queries", input=texts[:8]))
    np.testing.assert_array_equal(q, X[:8])
    # query = "protect": the documents' keyed release itself
    qp = vectors(c.embeddings.create(model="queries-protected", input=texts[:3]))
    d = vectors(c.embeddings.create(model="docs", input=texts[:3]))
    np.testing.assert_array_equal(qp, d)
    # projection: queries get the same public projection, no noise
    spec = raw["models"]["proj"]
    mech = get_mechanism("projection", **spec["params"])
    for dims, k in ((None, 16), (8, 8)):
        extra = {} if dims is None else {"dimensions": dims}
        Q = vectors(c.embeddings.create(model="proj-queries", input=texts[:8], **extra))
        m = mech if dims is None else get_mechanism("projection", **{**spec["params"], "k": k})
        np.testing.assert_allclose(Q, m.project(X[:8]), rtol=1e-5, atol=1e-6)
        assert Q.shape == (8, k)
    # ... and documents are that projection plus N(0, sigma^2 I_k) noise
    D = np.concatenate(
        [
            vectors(c.embeddings.create(model="proj", input=texts[i : i + 8]))
            for i in range(0, 40, 8)
        ]
    )
    resid = D - mech.project(X)
    sigma2 = mech.sigma_for(DIM) ** 2
    per_row = np.sum(resid**2, axis=1) / 16  # mean sigma^2 * chi2_16 / 16
    se = sigma2 * np.sqrt(2 / 16) / np.sqrt(len(per_row))
    assert abs(per_row.mean() - sigma2) < 4.4 * se


def test_concurrent_requests_share_model_calls(served):
    handle, fake, _ = served
    out: list[np.ndarray] = []

    async def run() -> None:
        ac = openai.AsyncOpenAI(base_url=handle.base_url, api_key=FULL_KEY, max_retries=0)
        try:
            rs = await asyncio.gather(
                *(ac.embeddings.create(model="docs", input=[f"batch {i}"]) for i in range(24))
            )
        finally:
            await ac.close()
        out.extend(vectors(r) for r in rs)

    before = len(fake.calls)
    fake.hold()  # a busy model: requests pile up behind the calls in progress
    t = threading.Thread(target=lambda: asyncio.run(run()))
    try:
        with queued_texts(handle, 24) as all_in:
            t.start()
            assert all_in.wait(60), fake.calls[before:]  # every request reached the server
    finally:
        fake.release()
        t.join(60)
    calls = fake.calls[before:]
    assert len(out) == 24 and all(v.shape == (1, DIM) for v in out)
    # at most 4 calls were in progress (max_concurrency); the rest waited and shared calls
    assert sum(calls) == 24 and len(calls) <= 8, calls


def test_models_health_and_metrics(served):
    handle, _, _ = served
    ids = {m.id for m in client(handle).models.list()}
    assert ids == {"docs", "docs-laplace", "queries", "queries-protected", "proj", "proj-queries"}
    assert {m.id for m in client(handle, LIMITED_KEY).models.list()} == {"docs"}
    card = client(handle).models.retrieve("proj")
    extra = card.model_extra["privembed"]
    assert extra["role"] == "documents" and extra["dimensions"] == [8, 16]
    assert "LDP" in extra["guarantee"]
    assert httpx.get(handle.url + "/healthz").json()["status"] == "ok"
    assert httpx.get(handle.url + "/metrics").status_code == 401
    # a request of its own: the test may run alone (the claims check selects it by name)
    client(handle).embeddings.create(model="docs", input=["metrics need one protected vector"])
    auth = {"Authorization": f"Bearer {FULL_KEY}"}
    text = httpx.get(handle.url + "/metrics", headers=auth).text
    assert 'privembed_vectors_total{model="docs",treatment="protect"}' in text
    assert "privembed_request_seconds_bucket" in text
    snap = httpx.get(handle.url + "/metrics", params={"format": "json"}, headers=auth).json()
    assert snap["vectors_protected"] > 0 and snap["latency_s"]["p99"] is not None
    assert snap["batches"] > 0


def test_logs_hold_no_text_and_no_vectors(served, caplog):
    handle, _, _ = served
    secret = "SECRET-DIAGNOSIS-hemophilia-carrier"
    c = client(handle)
    # the 400's request line is written after its response; this handler sits on the root
    # logger after caplog's, so the record is in caplog.records once the event is set
    refused = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "fields", {}).get("status") == 400:
                refused.set()

    watch = Watch()
    logging.getLogger().addHandler(watch)
    try:
        with caplog.at_level(logging.INFO, logger="privembed.server"):
            r = c.embeddings.create(model="docs", input=[secret, "other"], encoding_format="float")
            with pytest.raises(openai.BadRequestError):
                c.embeddings.create(model="docs", input=[secret, ""])
            assert refused.wait(60)
    finally:
        logging.getLogger().removeHandler(watch)
    lines = [JsonFormatter().format(rec) for rec in caplog.records]
    assert any('"status":200' in ln for ln in lines) and any('"status":400' in ln for ln in lines)
    blob = "\n".join(lines)
    assert secret not in blob and "hemophilia" not in blob
    value = f"{r.data[0].embedding[0]!r}"[:8]
    assert value not in blob
    for ln in lines:
        rec = json.loads(ln)
        if rec.get("route") != "/v1/embeddings":
            continue  # a line of an earlier test's request
        assert rec["event"] == "request" and rec["key"] == "full" and len(rec["request_id"]) == 16
        if rec["status"] == 200:
            assert rec["n_inputs"] == 2 and rec["chars"] == len(secret) + 5
