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
            # refused at admission, before any wait: a request that queued behind the locked
            # ledger would only be answered once the lock goes (the mutation's case), so a
            # client deadline far above an admission's time tells the two apart
            try:
                r = _post(handle, {"input": "one more document", "model": "docs"}, timeout=10.0)
            except httpx.ReadTimeout:
                pytest.fail("a document beyond the lane's capacity waited for the ledger")
            assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded"
            assert int(r.headers["Retry-After"]) >= 1
            q = _post(handle, {"input": ["q1", "q2", "q3", "q4"], "model": "queries"})
            assert q.status_code == 200
        finally:
            holder.execute("ROLLBACK")
            holder.close()
            first.join(120)
        assert first.response is not None and first.response.status_code == 200


# ---- issue 39.6: a request's whole wait for the ledger is bounded --------------------------------

LANE_MODELS = {
    **MODELS,
    "queries-protected": {"role": "queries", "documents": "docs", "query": "protect"},
    "proj": {"backend": "up", "mechanism": "projection", "dimensions": [8],
             "params": {"k": 8, "epsilon": 50.0, "delta": 1e-5}},
    "proj-queries": {"role": "queries", "documents": "proj"},
}  # fmt: skip


def test_ledger_bound_requests_wait_one_timeout_in_all_and_queries_are_answered_meanwhile(
    server_key, tmp_path
):
    """The issue: with ``ledger_timeout_s = 2`` ledger-bound requests waited 6.5-8.1 s -- each
    group queued in the ledger lane waited the whole timeout for the lock again when its turn
    came. Here a document and a fresh protected query share one batch (two groups in the lane)
    while another connection holds the ledger's write lock: the first group waits for the lock
    until the deadline; the second, whose turn comes after it, is refused without waiting again
    (one deadline per request); both get 503 ``ledger_busy`` with Retry-After. While the lock is
    still held, clean and projected queries and a repeated protected query (an identical keyed
    re-release, already recorded) are answered."""
    ledger = tmp_path / "ledger.sqlite"
    Ledger(ledger).close()
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "ledger_timeout_s": 1.0, "cache_size": 64},
        backend={"max_concurrency": 1},
        models=LANE_MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, fake, _):
        repeated = {"input": "a repeated query", "model": "queries-protected"}
        first = _post(handle, repeated)
        assert first.status_code == 200
        waits: list[str] = []
        service_of(handle)._ledger.on_wait = lambda path: waits.append(str(path))
        holder = sqlite3.connect(ledger, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the ledger
        try:
            fake.hold()  # one model call in flight: the next two requests share a batch
            blocker = _Call(handle, {"input": "a clean query", "model": "queries"})
            blocker.start()
            assert fake.wait_for_calls(2)
            bound = [
                _Call(handle, {"input": "a new document", "model": "docs"}),
                _Call(handle, {"input": "a new protected query", "model": "queries-protected"}),
            ]
            with queued_texts(handle, 2) as queued:
                for c in bound:
                    c.start()
                assert queued.wait(60)
            fake.release()
            for c in (blocker, *bound):
                c.join(120)
            assert blocker.response is not None and blocker.response.status_code == 200
            for c in bound:
                assert c.response is not None, "a ledger-bound request waited on"
                r = c.response
                assert r.status_code == 503 and r.json()["error"]["code"] == "ledger_busy"
                assert int(r.headers["Retry-After"]) >= 1
            assert len(waits) <= 1, "the second group waited for the lock again"
            for body in (
                {"input": "another clean query", "model": "queries"},
                {"input": "a projected query", "model": "proj-queries"},
                repeated,
            ):
                r = _post(handle, body)
                assert r.status_code == 200, (body, r.text)
            assert r.json()["data"] == first.json()["data"]
        finally:
            fake.release()
            holder.execute("ROLLBACK")
            holder.close()


def test_a_request_behind_a_stuck_ledger_thread_is_answered_at_its_deadline(server_key, tmp_path):
    """However long the work ahead of a group holds the ledger thread, the group's requests
    are answered 503 at the deadline plus the stated margin, and when its turn comes at last it
    is skipped: nothing is charged for it. The work ahead here is a task that waits for the test
    on the ledger thread."""
    ledger = tmp_path / "ledger.sqlite"
    Ledger(ledger).close()
    with proxy(
        server_key[0],
        server={"ledger": str(ledger), "ledger_timeout_s": 1.0},
        models=MODELS,
        api_keys=[API_KEYS[0]],
    ) as (handle, _, _):
        assert _post(handle, {"input": "warm", "model": "docs"}).status_code == 200
        svc = service_of(handle)
        stuck, entered = threading.Event(), threading.Event()

        def ahead() -> None:
            entered.set()
            stuck.wait(120)

        svc._ledger_thread.submit(ahead)
        assert entered.wait(60)
        call = _Call(handle, {"input": "behind the stuck thread", "model": "docs"})
        try:
            call.start()
            call.join(120)
            assert call.response is not None, "the request waited for the ledger thread"
            assert call.response.status_code == 503
            assert call.response.json()["error"]["code"] == "ledger_busy"
            assert not stuck.is_set()  # answered while the work ahead still held the thread
        finally:
            stuck.set()
        svc._ledger_thread.submit(lambda: None).result(60)  # the group's turn came and went
    with Ledger(ledger, readonly=True) as led:
        assert len(led.spent()) == 1  # "warm" only


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
