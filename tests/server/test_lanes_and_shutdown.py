"""Queries never wait for the ledger (issue 24, finding 7); shutdown drains within its limit,
answers late arrivals 503 and exits 0 (issue 27).

No test here measures a duration: the ledger is held by another connection, the upstream by
its gate, and the tests wait for events (a lock wait begun, a call arrived, a drain begun).
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from privembed.keys.ledger import Ledger

from .. import _signals
from ._fake_upstream import UPSTREAM_KEY, FakeUpstream, serve_app
from .conftest import API_KEYS, FULL_KEY, proxy, queued_texts, service_of

AUTH = {"Authorization": f"Bearer {FULL_KEY}"}
MODELS = {
    "docs": {"backend": "up", "mechanism": "laplace", "params": {"epsilon": 2.0}},
    "queries": {"role": "queries", "documents": "docs"},
}


def _post(handle, body, timeout=120.0) -> httpx.Response:
    return httpx.post(handle.base_url + "/embeddings", json=body, headers=AUTH, timeout=timeout)


class _Call(threading.Thread):
    """A request in a thread; ``response`` once answered."""

    def __init__(self, handle, body) -> None:
        super().__init__(daemon=True)
        self.handle, self.body = handle, body
        self.response: httpx.Response | None = None

    def run(self) -> None:
        self.response = _post(self.handle, self.body, timeout=600)


# ---- finding 7 --------------------------------------------------------------------------------


def test_a_query_completes_while_document_requests_wait_for_a_locked_ledger(server_key, tmp_path):
    """The issue: with two document requests waiting on a locked ledger, queries on the same
    backend waited 2.9-4.0 s behind them (one model worker, held by the ledger wait). Here the
    backend runs one call at a time and the ledger is locked by another connection: a query
    is answered while both document requests are still waiting."""
    ledger = tmp_path / "ledger.sqlite"
    Ledger(ledger).close()
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "ledger_timeout_s": 600.0, "request_timeout_s": 600.0},
        backend={"max_concurrency": 1},
        models=MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, _, _):
        assert _post(handle, {"input": "warm", "model": "docs"}).status_code == 200
        led = service_of(handle)._ledger
        waiting = threading.Event()
        led.on_wait = lambda path: waiting.set()  # called when a write has to wait for a lock
        holder = sqlite3.connect(ledger, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the ledger
        docs = [_Call(handle, {"input": f"document {i}", "model": "docs"}) for i in range(2)]
        query = _Call(handle, {"input": "a query", "model": "queries"})
        try:
            docs[0].start()
            assert waiting.wait(120), "the first document never reached the ledger"
            docs[1].start()
            query.start()
            query.join(120)
            assert query.response is not None, "the query waited for the ledger"
            assert query.response.status_code == 200
            assert all(d.is_alive() and d.response is None for d in docs)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
            for d in docs:
                d.join(120)
        assert [d.response.status_code for d in docs if d.response] == [200, 200]


def test_ledger_bound_work_is_admitted_apart_and_refused_when_its_lane_is_full(
    server_key, tmp_path
):
    """Documents waiting for the ledger hold texts of their own lane (bounded by
    ``max_queue``), not the model's queue: once it is full a document request is refused at
    once (503 overloaded) and a query still gets through."""
    ledger = tmp_path / "ledger.sqlite"
    Ledger(ledger).close()
    with proxy(
        server_key[0],
        server={
            "ledger": str(ledger),
            "ledger_timeout_s": 600.0,
            "request_timeout_s": 600.0,
            "max_inputs": 4,
            "max_queue": 4,
            "max_batch": 4,
        },
        models=MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, _, _):
        assert _post(handle, {"input": "warm", "model": "docs"}).status_code == 200
        led = service_of(handle)._ledger
        waiting = threading.Event()
        led.on_wait = lambda path: waiting.set()
        holder = sqlite3.connect(ledger, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        first = _Call(handle, {"input": [f"doc {i}" for i in range(4)], "model": "docs"})
        try:
            first.start()
            assert waiting.wait(120)
            r = _post(handle, {"input": "one more document", "model": "docs"})
            assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded"
            assert int(r.headers["Retry-After"]) >= 1
            q = _post(handle, {"input": ["q1", "q2", "q3", "q4"], "model": "queries"})
            assert q.status_code == 200
        finally:
            holder.execute("ROLLBACK")
            holder.close()
            first.join(120)
        assert first.response is not None and first.response.status_code == 200


# ---- shutdown ---------------------------------------------------------------------------------


def test_late_arrivals_get_503_while_in_flight_requests_finish(server_key):
    """The issue: after SIGTERM new connections were refused. While the server drains, a late
    request gets 503 ``shutting_down`` (with Retry-After and Connection: close); the request
    in flight still completes; then the server stops."""
    with proxy(server_key[0], models=MODELS, api_keys=[API_KEYS[0]]) as (handle, fake, _):
        fake.hold()
        inflight = _Call(handle, {"input": "in flight during shutdown", "model": "docs"})
        try:
            inflight.start()
            assert fake.wait_for_calls(1)
            handle.server.handle_exit(signal.SIGTERM, None)  # what SIGTERM does
            assert handle.stopping.wait(60)
            late = httpx.post(handle.base_url + "/embeddings", headers=AUTH, timeout=60,
                              json={"input": "too late", "model": "docs"})  # fmt: skip
            assert late.status_code == 503
            assert late.json()["error"]["code"] == "shutting_down"
            assert late.headers["connection"] == "close" and int(late.headers["retry-after"]) >= 1
            assert httpx.get(handle.url + "/healthz", timeout=60).status_code == 503
        finally:
            fake.release()
            inflight.join(60)
        assert inflight.response is not None and inflight.response.status_code == 200
        handle.thread.join(60)
        assert not handle.thread.is_alive() and handle.server.clean


def test_work_still_queued_at_the_drain_limit_is_refused_not_cut_off(server_key):
    """At ``graceful_shutdown_s`` whatever has not finished is answered 503 ``shutting_down``
    (never charged if it had not started), so the drain never outlasts its limit: here a
    request queued behind a model call that does not return."""
    with proxy(
        server_key[0],
        server={"graceful_shutdown_s": 0.5, "max_batch": 1},
        backend={"max_concurrency": 1},
        models=MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, fake, _):
        fake.hold()
        running = _Call(handle, {"input": "in the model", "model": "docs"})
        queued = _Call(handle, {"input": "behind it", "model": "docs"})
        try:
            running.start()
            assert fake.wait_for_calls(1)
            with queued_texts(handle, 1) as behind:
                queued.start()
                assert behind.wait(60)
            handle.server.handle_exit(signal.SIGTERM, None)
            queued.join(120)
            running.join(120)
            assert queued.response is not None and running.response is not None
            for r in (queued.response, running.response):
                assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down"
        finally:
            fake.release()
        handle.thread.join(60)
        assert not handle.thread.is_alive()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_sigterm_ends_the_process_with_status_0_after_a_clean_shutdown(server_key, tmp_path):
    """``privembed serve`` as a process: SIGTERM drains, shuts down and exits 0 (the issue:
    143 after a shutdown it logged as complete)."""
    fake = FakeUpstream()
    with serve_app(fake.app) as up:
        port = _free_port()
        cfg = tmp_path / "serve.toml"
        cfg.write_text(
            f'[server]\nkey_file = "{server_key[0]}"\nport = {port}\n'
            f'[backends.up]\ntype = "upstream"\nbase_url = "{up}/v1"\nmodel = "fake"\n'
            'api_key_env = "FAKE_UPSTREAM_KEY"\n'
            '[models.docs]\nbackend = "up"\nmechanism = "laplace"\nparams = { epsilon = 2.0 }\n'
            f'[[api_keys]]\nname = "t"\nsha256 = "{API_KEYS[0]["sha256"]}"\n'
        )
        env = {**os.environ, "FAKE_UPSTREAM_KEY": UPSTREAM_KEY, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
        with _signals.popen(  # the signals' defaults, whatever the runner inherited
            [sys.executable, "-m", "privembed.cli", "serve", "--config", str(cfg)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        ) as proc:
            code, rest = _serve_then_sigterm(proc, port)
    assert code == 0, rest[-2000:]
    assert b'"stopped"' in rest


def _serve_then_sigterm(proc: subprocess.Popen[bytes], port: int) -> tuple[int, bytes]:
    """Wait for the server to start, serve one request, SIGTERM it: (status, rest of log)."""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # wait for the server's "started" log line
            if b'"event":"started"' in line.replace(b" ", b""):
                break
        else:
            pytest.fail("the server did not start")
        url = f"http://127.0.0.1:{port}/v1/embeddings"
        r = httpx.post(url, headers=AUTH, json={"input": "x", "model": "docs"}, timeout=60)
        assert r.status_code == 200
        proc.send_signal(signal.SIGTERM)
        rest = proc.stdout.read()
        return proc.wait(120), rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_a_ledger_bound_batch_is_one_write_transaction(server_key, tmp_path):
    """Issue 27: each synced commit costs milliseconds, and a request used three (alias
    claims, the release, its publication). Now the aliases are looked up by a read and
    claimed, recorded and marked published in the release's one transaction."""
    ledger = tmp_path / "ledger.sqlite"
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "budget_epsilon": 100.0, "subject_budget_epsilon": 1e6},
        models=MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, _, _):
        assert _post(handle, {"input": "warm", "model": "docs"}).status_code == 200
        svc = service_of(handle)
        writes: list[str] = []

        def trace(cb):  # on the thread that owns the ledger's connection
            svc._ledger_thread.submit(svc._ledger._db.set_trace_callback, cb).result()

        trace(lambda sql: writes.append(sql) if "BEGIN" in sql else None)
        try:
            r = _post(handle, {"input": ["one", "two", "three"], "model": "docs"})
        finally:
            trace(None)
        assert r.status_code == 200
        # "BEGIN" stages the rows in the connection's TEMP table (never synced); the ledger
        # file itself is written once
        assert writes.count("BEGIN IMMEDIATE") == 1 and set(writes) <= {"BEGIN", "BEGIN IMMEDIATE"}
    with Ledger(ledger, readonly=True) as led:
        assert led.unpublished() == []
        (aliases,) = led._db.execute("SELECT COUNT(*) FROM aliases").fetchone()
        assert aliases == 4


@pytest.mark.slow
def test_undelivered_releases_are_recorded_and_unstarted_ones_are_not(server_key, tmp_path):
    """What docs/server.md says about rows for requests that were not delivered: a release
    already waiting on the ledger when its request times out is still recorded (conservative);
    one whose turn had not come is skipped and never charged. The ledger is held by another
    connection; the lane is first-in first-out, so a last request flushes it."""
    ledger = tmp_path / "ledger.sqlite"
    Ledger(ledger).close()
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "ledger_timeout_s": 600.0, "request_timeout_s": 20.0},
        models=MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, _, _):
        assert _post(handle, {"input": "warm", "model": "docs"}).status_code == 200
        svc = service_of(handle)
        waiting = threading.Event()
        svc._ledger.on_wait = lambda path: waiting.set()
        holder = sqlite3.connect(ledger, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        started = _Call(handle, {"input": "started, then timed out", "model": "docs"})
        queued = _Call(handle, {"input": "queued, then timed out", "model": "docs"})
        try:
            started.start()
            assert waiting.wait(120)  # its release waits for the lock
            queued.start()
            started.join(120)
            queued.join(120)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        for call in (started, queued):
            assert call.response is not None and call.response.status_code == 503
            assert call.response.json()["error"]["code"] == "timeout"
        assert _post(handle, {"input": "flush", "model": "docs"}).status_code == 200
        ids = {t: "s:" + svc.record_ids([t])[0] for t in
               ("started, then timed out", "queued, then timed out", "flush")}  # fmt: skip
    with Ledger(ledger, readonly=True) as led:
        recorded = {s.record_id for s in led.spent()}
    assert ids["started, then timed out"] in recorded  # committed, never delivered
    assert ids["queued, then timed out"] not in recorded  # skipped: never charged
    assert ids["flush"] in recorded
