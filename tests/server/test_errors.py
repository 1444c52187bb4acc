"""The bad-request suite: every malformed body, auth failure, forbidden model and over-limit
request gets its status code and an OpenAI-format error body (no stack trace); overload, upstream
failure, budget refusal and graceful shutdown."""

from __future__ import annotations

import sqlite3
import threading

import httpx
import openai
import pytest

from privembed.server import text_record_id

from .conftest import API_KEYS, FULL_KEY, LIMITED_KEY, RATE_CLOCK, SLOW_KEY, proxy, queued_texts

AUTH = {"Authorization": f"Bearer {FULL_KEY}"}


def assert_openai_error(r: httpx.Response, status: int, code: str | None, param: str | None = None):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    extra = {"budget"} if code == "privacy_budget_exceeded" else set()  # spent and left
    assert set(err) == {"message", "type", "param", "code"} | extra
    assert isinstance(err["message"], str) and err["message"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    assert err["code"] == code
    if param is not None:
        assert err["param"] == param
    return err


def post(handle, body=None, *, content=None, headers=AUTH, **kw) -> httpx.Response:
    return httpx.post(
        handle.base_url + "/embeddings",
        json=body,
        content=content,
        headers=headers,
        timeout=30,
        **kw,
    )


BAD_BODIES = [
    # (id, body or raw bytes, status, code, param)
    ("not-json", b"{not json", 400, "invalid_json", None),
    ("deeply-nested", b"[" * 50_000 + b"]" * 50_000, 413, "request_too_large", None),
    ("nesting-under-limit", b"[" * 9000 + b"]" * 9000, 400, "invalid_json", None),
    ("array-body", [1, 2], 400, "invalid_body", None),
    ("string-body", "hello", 400, "invalid_body", None),
    ("missing-input", {"model": "docs"}, 400, "missing_parameter", "input"),
    ("missing-model", {"input": "x"}, 400, "missing_parameter", "model"),
    ("model-not-string", {"input": "x", "model": 5}, 400, "invalid_type", "model"),
    ("empty-string", {"input": "", "model": "docs"}, 400, "empty_input", "input"),
    ("whitespace", {"input": " \n\t", "model": "docs"}, 400, "empty_input", "input"),
    ("empty-list", {"input": [], "model": "docs"}, 400, "empty_input", "input"),
    ("empty-item", {"input": ["ok", "  "], "model": "docs"}, 400, "empty_input", "input[1]"),
    ("number", {"input": 5, "model": "docs"}, 400, "invalid_type", "input"),
    ("null", {"input": None, "model": "docs"}, 400, "invalid_type", "input"),
    ("object", {"input": {"a": "b"}, "model": "docs"}, 400, "invalid_type", "input"),
    ("mixed", {"input": ["a", 3], "model": "docs"}, 400, "invalid_type", "input[1]"),
    ("tokens", {"input": [1, 2, 3], "model": "docs"}, 400, "token_input_not_supported", "input"),
    ("token-lists", {"input": [[1, 2], [3]], "model": "docs"}, 400, "token_input_not_supported", None),
    ("too-many", {"input": ["x"] * 9, "model": "docs"}, 400, "too_many_inputs", "input"),
    ("too-long", {"input": ["ok", "y" * 201], "model": "docs"}, 400, "input_too_long", "input[1]"),
    ("surrogate", b'{"model": "docs", "input": "a\\ud800b"}', 400, "invalid_text", "input"),
    ("bad-format", {"input": "x", "model": "docs", "encoding_format": "int8"}, 400, "invalid_value", "encoding_format"),
    ("dims-zero", {"input": "x", "model": "docs", "dimensions": 0}, 400, "invalid_value", "dimensions"),
    ("dims-string", {"input": "x", "model": "docs", "dimensions": "8"}, 400, "invalid_value", "dimensions"),
    ("dims-bool", {"input": "x", "model": "docs", "dimensions": True}, 400, "invalid_value", "dimensions"),
    ("dims-gaussian", {"input": "x", "model": "docs", "dimensions": 8}, 400, "unsupported_dimensions", "dimensions"),
    ("dims-projection", {"input": "x", "model": "proj", "dimensions": 12}, 400, "unsupported_dimensions", "dimensions"),
    ("dims-clean-queries", {"input": "x", "model": "queries", "dimensions": 8}, 400, "unsupported_dimensions", "dimensions"),
    ("user-empty", {"input": "x", "model": "docs", "user": ""}, 400, "invalid_value", "user"),
    ("user-number", {"input": "x", "model": "docs", "user": 7}, 400, "invalid_value", "user"),
    ("model-empty", {"input": "x", "model": ""}, 400, "invalid_type", "model"),
    ("unknown-model", {"input": "x", "model": "text-embedding-3-small"}, 404, "model_not_found", "model"),
    ("too-large", {"input": ["z" * 190] * 8, "model": "docs", "pad": "p" * 20_000}, 413, "request_too_large", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [b[1:] for b in BAD_BODIES],
    ids=[b[0] for b in BAD_BODIES],
)
def test_bad_bodies(served, body, status, code, param):
    handle, _, _ = served
    if isinstance(body, bytes):
        r = post(handle, content=body, headers={**AUTH, "Content-Type": "application/json"})
    else:
        r = post(handle, body)
    assert_openai_error(r, status, code, param)


def test_openapi_describes_the_request_model_with_its_limits(served):
    handle, _, raw = served
    doc = httpx.get(handle.url + "/openapi.json").json()
    op = doc["paths"]["/v1/embeddings"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["model", "input"]
    text, texts = schema["properties"]["input"]["anyOf"]
    assert text["maxLength"] == raw["server"]["max_input_chars"] and text["minLength"] == 1
    assert texts["maxItems"] == raw["server"]["max_inputs"] and texts["minItems"] == 1
    assert schema["properties"]["encoding_format"]["enum"] == ["float", "base64"]
    assert {"200", "400", "401", "413", "429", "503"} <= set(op["responses"])
    assert "ErrorResponse" in doc["components"]["schemas"]


def test_encoding_format_null_means_float(served):
    handle, _, _ = served
    r = post(handle, {"input": "x", "model": "docs", "encoding_format": None, "extra": 1})
    assert r.status_code == 200 and isinstance(r.json()["data"][0]["embedding"], list)


def test_chunked_body_over_the_limit(served):
    handle, _, _ = served

    def chunks():
        yield b'{"model": "docs", "input": "'
        for _ in range(30):
            yield b"x" * 1000
        yield b'"}'

    r = post(handle, content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    assert_openai_error(r, 413, "request_too_large")


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_api_key"),
        ({"Authorization": "Bearer pe-wrong"}, "invalid_api_key"),
        ({"Authorization": f"Basic {FULL_KEY}"}, "invalid_api_key"),
        ({"Authorization": "Bearer"}, "invalid_api_key"),
    ],
    ids=["missing", "wrong", "basic-scheme", "empty"],
)
def test_auth_failures(served, headers, code):
    handle, _, _ = served
    r = post(handle, {"input": "x", "model": "docs"}, headers=headers)
    assert_openai_error(r, 401, code)
    r = httpx.get(handle.base_url + "/models", headers=headers)
    assert_openai_error(r, 401, code)


def test_auth_failures_through_openai_client(served):
    handle, _, _ = served
    with openai.OpenAI(base_url=handle.base_url, api_key="pe-nope", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError) as e:
            bad.embeddings.create(model="docs", input="x")
    assert e.value.code == "invalid_api_key"
    with openai.OpenAI(base_url=handle.base_url, api_key=LIMITED_KEY, max_retries=0) as limited:
        with pytest.raises(openai.PermissionDeniedError) as e2:
            limited.embeddings.create(model="proj", input="x")
        assert e2.value.code == "model_not_allowed"
        assert limited.embeddings.create(model="docs", input="x").data  # its own model works


def test_forbidden_model(served):
    handle, _, _ = served
    r = post(
        handle, {"input": "x", "model": "proj"}, headers={"Authorization": f"Bearer {LIMITED_KEY}"}
    )
    assert_openai_error(r, 403, "model_not_allowed", "model")
    r = httpx.get(
        handle.base_url + "/models/proj", headers={"Authorization": f"Bearer {LIMITED_KEY}"}
    )
    assert_openai_error(r, 403, "model_not_allowed")
    r = httpx.get(handle.base_url + "/models/nope", headers=AUTH)
    assert_openai_error(r, 404, "model_not_found")


def test_rate_limit(served):
    """6 requests per minute, bursts of 2, on the server's rate clock (moved by hand)."""
    handle, _, _ = served
    h = {"Authorization": f"Bearer {SLOW_KEY}"}
    codes = [post(handle, {"input": "x", "model": "docs"}, headers=h) for _ in range(3)]
    assert [r.status_code for r in codes[:2]] == [200, 200]
    err = assert_openai_error(codes[2], 429, "rate_limit_exceeded")
    assert err["type"] == "rate_limit_error"
    assert codes[2].headers["retry-after"] == "10"  # one token every 10 s
    RATE_CLOCK.now += 10.0
    assert post(handle, {"input": "x", "model": "docs"}, headers=h).status_code == 200
    r = post(handle, {"input": "x", "model": "docs"}, headers=h)
    assert_openai_error(r, 429, "rate_limit_exceeded")
    # other keys have no limit
    assert post(handle, {"input": "x", "model": "docs"}).status_code == 200


def test_unknown_routes_and_methods(served):
    handle, _, _ = served
    assert_openai_error(httpx.get(handle.base_url + "/embeddings", headers=AUTH), 405, None)
    assert_openai_error(httpx.get(handle.url + "/v1/nothing", headers=AUTH), 404, None)
    r = httpx.get(handle.url + "/metrics", params={"format": "xml"}, headers=AUTH)
    assert_openai_error(r, 400, "invalid_value", "format")


def test_upstream_failure_is_502_without_echo(served):
    handle, fake, _ = served
    fake.fail_status = 500
    try:
        r = post(handle, {"input": "private text 123", "model": "docs"})
    finally:
        fake.fail_status = None
    err = assert_openai_error(r, 502, "upstream_error")
    assert "private text" not in r.text and "HTTP 500" in err["message"]
    fake.fail_status = 429
    try:
        r = post(handle, {"input": "private text 456", "model": "docs"})
    finally:
        fake.fail_status = None
    assert_openai_error(r, 503, "upstream_error")
    assert "retry-after" in r.headers


def test_queue_full_is_503_with_retry_after(server_key):
    with proxy(
        server_key[0],
        server={"max_inputs": 4, "max_queue": 4, "max_batch": 4, "max_wait_ms": 0.0},
        backend={"max_concurrency": 1},
    ) as (handle, fake, _):
        fake.hold()  # the model is busy until released
        results: dict[int, httpx.Response] = {}

        def send(i: int) -> None:
            body = {"model": "docs", "input": [f"q{i}-{j}" for j in range(4)]}
            results[i] = post(handle, body)

        first = threading.Thread(target=send, args=(1,))
        second = threading.Thread(target=send, args=(2,))
        try:
            first.start()
            assert fake.wait_for_calls(1)  # in the model call, off the queue
            with queued_texts(handle, 4) as full:
                second.start()
                assert full.wait(60)  # the queue is full
            send(3)
        finally:
            fake.release()
            first.join(30)
            second.join(30)
        err = assert_openai_error(results[3], 503, "overloaded")
        assert "overloaded" in err["message"] and int(results[3].headers["retry-after"]) >= 1
        assert results[1].status_code == 200 and results[2].status_code == 200


@pytest.mark.slow  # composing the projection's Gaussian release (PLD accountant) takes seconds
def test_budget_refusal_and_ledger_holds_no_text(server_key, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    models = {
        # metric DP: epsilon per unit l2 -> pure LDP 2*epsilon on unit vectors (40 and 42)
        "lap-a": {"backend": "up", "mechanism": "laplace", "params": {"epsilon": 20.0}},
        "lap-b": {"backend": "up", "mechanism": "laplace", "params": {"epsilon": 21.0}},
        "proj": {
            "backend": "up",
            "mechanism": "projection",
            "params": {"k": 8, "epsilon": 5.0, "delta": 1e-6},
        },
    }
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "budget_epsilon": 60.0, "budget_delta": 1e-5},
        models=models,
        api_keys=[API_KEYS[0]],
    ) as (handle, _, _):
        text = "Jane Roe, diagnosis: rare disease X"
        assert post(handle, {"input": text, "model": "lap-a"}).status_code == 200
        # a keyed re-release is free, any number of times
        assert post(handle, {"input": [text, text], "model": "lap-a"}).status_code == 200
        # a fresh release of the same text under another configuration would pass the budget
        r = post(handle, {"input": ["unrelated text", text], "model": "lap-b"})
        assert_openai_error(r, 403, "privacy_budget_exceeded")
        assert post(handle, {"input": "unrelated text", "model": "lap-b"}).status_code == 200
        # the projection (Gaussian, d-dependent sigma) is accounted too
        assert post(handle, {"input": "a projected text", "model": "proj"}).status_code == 200
    db = sqlite3.connect(ledger)
    rows = db.execute("SELECT record_id, free FROM releases ORDER BY seq").fetchall()
    db.close()
    rid = "s:" + text_record_id(server_key[1], text)
    assert [f for r, f in rows if r == rid] == [0, 1]  # one fresh release, one free
    assert len(rows) == 4
    blob = ledger.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("ledger.sqlite-*"))
    assert b"Jane Roe" not in blob and b"rare disease" not in blob


def test_graceful_shutdown_finishes_in_flight_requests(server_key):
    with proxy(server_key[0]) as (handle, fake, _):
        fake.hold()
        result: dict[str, httpx.Response] = {}

        def call() -> None:
            result["r"] = post(handle, {"input": "in flight during shutdown", "model": "docs"})

        t = threading.Thread(target=call)
        stopper = threading.Thread(target=handle.stop)
        try:
            t.start()
            assert fake.wait_for_calls(1), "the request never reached the upstream"
            stopper.start()
            assert handle.stopping.wait(60)  # stopping, with the request in flight
        finally:
            fake.release()
            t.join(30)
            stopper.join(30)
        assert result["r"].status_code == 200
        assert len(result["r"].json()["data"]) == 1
        assert not handle.thread.is_alive()
        with pytest.raises(httpx.ConnectError):
            httpx.get(handle.url + "/healthz", timeout=2)
