"""Several ``privembed serve`` replicas on one PostgreSQL ledger (issue 29).

Four server processes share a ledger in a real PostgreSQL (tests/_postgres.py); 1,000 concurrent
requests, round-robin over the replicas, spend one subject's budget. Then the same with the
ledger's connections cut mid-run: the database stops accepting connections and every backend is
terminated after a fixed number of answers (a count, not a time).

Nothing here measures a duration. The assertions are on the ledger's totals and the responses:
the subject's charge never passes its budget, every 200 names a text the ledger charged to the
subject (no release without its ledger record), and a replica that cannot reach the ledger
answers 503 ``ledger_unavailable``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from privembed.keys.ledger import Ledger
from privembed.server import hash_api_key
from privembed.server.service import text_record_id

from .._postgres import allow_connections, terminate
from ._fake_upstream import UPSTREAM_KEY, FakeUpstream, serve_app
from .conftest import FULL_KEY

SECOND_KEY = "pe-second-key-for-the-replica-tests"
REPLICAS = 4
REQUESTS = 1000
#: Laplace epsilon 1 on unit vectors: 2 per text; a subject budget of 50 admits 25 texts
PER_TEXT, BUDGET = 2.0, 50.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp_path: Path, key_file: Path, upstream: str, ledger: str) -> Path:
    cfg = tmp_path / "serve.toml"
    cfg.write_text(
        f'[server]\nkey_file = "{key_file}"\nledger = "{ledger}"\n'
        f"subject_budget_epsilon = {BUDGET}\nledger_timeout_s = 120.0\ncache_size = 0\n"
        'request_timeout_s = 600.0\nlog_level = "warning"\n'
        f'[backends.up]\ntype = "upstream"\nbase_url = "{upstream}/v1"\nmodel = "fake"\n'
        'api_key_env = "FAKE_UPSTREAM_KEY"\nretry_backoff_s = 0.0\n'
        '[models.docs]\nbackend = "up"\nmechanism = "laplace"\nparams = { epsilon = 1.0 }\n'
        f'[[api_keys]]\nname = "full"\nsha256 = "{hash_api_key(FULL_KEY)}"\n'
        f'[[api_keys]]\nname = "second"\nsha256 = "{hash_api_key(SECOND_KEY)}"\n'
    )
    return cfg


class _Replicas:
    """``privembed serve`` processes on free ports; their logs go to files (never a full pipe)."""

    def __init__(self, cfg: Path, tmp_path: Path, n: int) -> None:
        env = {**os.environ, "FAKE_UPSTREAM_KEY": UPSTREAM_KEY, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
        self.ports = [_free_port() for _ in range(n)]
        self.logs = [tmp_path / f"replica{i}.log" for i in range(n)]
        self.procs = []
        for port, log in zip(self.ports, self.logs, strict=True):
            with log.open("wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "privembed.cli",
                            "serve",
                            "--config",
                            str(cfg),
                            "--port",
                            str(port),
                        ],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                )

    def wait_ready(self) -> None:
        """Poll each replica's /healthz until it answers 200 (or its process ended)."""
        with httpx.Client(timeout=5.0) as client:
            for port, proc, log in zip(self.ports, self.procs, self.logs, strict=True):
                for _ in range(2400):  # a bound on polls, not a timing assertion
                    if proc.poll() is not None:
                        pytest.fail(f"replica on {port} exited: {log.read_text()[-2000:]}")
                    try:
                        if client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    proc_wait(proc, 0.25)
                else:
                    pytest.fail(f"replica on {port} did not start: {log.read_text()[-2000:]}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(30)


def proc_wait(proc: subprocess.Popen[bytes], seconds: float) -> None:
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        pass


async def _send(
    ports: list[int],
    key: str,
    texts: list[str],
    *,
    after: int | None = None,
    then: Any = None,
) -> list[tuple[str, int, str]]:
    """POST each text once, round-robin over ``ports``, 64 at a time; ``then()`` runs once,
    right after the ``after``-th answer arrived. Returns (text, status, error code)."""
    out: list[tuple[str, int, str]] = []
    gate = asyncio.Semaphore(64)
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=900.0, limits=limits) as client:

        async def one(i: int, text: str) -> None:
            url = f"http://127.0.0.1:{ports[i % len(ports)]}/v1/embeddings"
            async with gate:
                r = await client.post(url, json={"input": text, "model": "docs"}, headers=headers)
            code = "" if r.status_code == 200 else r.json()["error"]["code"]
            out.append((text, r.status_code, code))
            if after is not None and len(out) == after:
                then()

        await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))
    return out


def _charged(url: str, key: bytes, subject: str, texts: list[str]) -> tuple[Any, set[str]]:
    """(the subject's spend, the texts whose identities the ledger charged to it)."""
    with Ledger(url, readonly=True) as led:
        spent = led.spent_subject(subject)
        rows = led.export()
    ids = {r["record_id"] for r in rows if r["subject"] == subject and not r["free"]}
    by_id = {"s:" + text_record_id(key, t): t for t in texts}
    return spent, {by_id[i] for i in ids}


@pytest.mark.slow
def test_four_replicas_share_one_subject_budget_and_refuse_without_the_ledger(
    server_key, tmp_path, pg_server, pg_database, pg_url
):
    key_file, key = server_key
    fake = FakeUpstream()
    with serve_app(fake.app) as upstream:
        cfg = _config(tmp_path, key_file, upstream, pg_url)
        replicas = _Replicas(cfg, tmp_path, REPLICAS)
        try:
            replicas.wait_ready()
            ports = replicas.ports

            # ---- 1,000 concurrent requests of one subject over four replicas --------------
            texts = [f"clinical note {i} of the first subject" for i in range(REQUESTS)]
            got = asyncio.run(_send(ports, FULL_KEY, texts))
            codes = {(s, c) for _, s, c in got}
            assert codes <= {(200, ""), (403, "privacy_budget_exceeded")}, codes
            ok = {t for t, s, _ in got if s == 200}
            spent, charged = _charged(pg_url, key, "key:full", texts)
            assert ok == charged  # every answer charged; nothing charged without its answer
            assert len(ok) == spent.releases == int(BUDGET / PER_TEXT)  # the budget, exactly
            assert spent.epsilon == pytest.approx(BUDGET)

            # ---- the same with the ledger's connections cut after 100 answers -------------
            cut: list[int] = []

            def cut_the_ledger() -> None:
                allow_connections(pg_server, pg_database, False)
                cut.append(terminate(pg_server, pg_database))

            texts2 = [f"note {i} of the second subject" for i in range(REQUESTS)]
            got2 = asyncio.run(_send(ports, SECOND_KEY, texts2, after=100, then=cut_the_ledger))
            assert cut and cut[0] >= REPLICAS  # every replica had a connection, now ended
            codes2 = {(s, c) for _, s, c in got2}
            assert codes2 <= {
                (200, ""),
                (403, "privacy_budget_exceeded"),
                (503, "ledger_unavailable"),
            }, codes2
            # after the cut, every replica refuses ledger-bound work
            late = [f"a text sent after the cut {i}" for i in range(2 * REPLICAS)]
            got3 = asyncio.run(_send(ports, SECOND_KEY, late))
            assert {(s, c) for _, s, c in got3} == {(503, "ledger_unavailable")}
            with httpx.Client() as client:
                for port in ports:
                    h = client.get(f"http://127.0.0.1:{port}/healthz").json()
                    assert h["status"] == "degraded" and h["ledger"]["state"] == "unreachable"

            allow_connections(pg_server, pg_database, True)
            ok2 = {t for t, s, _ in got2 if s == 200}
            spent2, charged2 = _charged(pg_url, key, "key:second", texts2 + late)
            # no release without its ledger record (a commit cut in flight may be charged
            # without an answer: the conservative direction), never past the budget
            assert ok2 <= charged2
            assert spent2.releases == len(charged2) <= int(BUDGET / PER_TEXT)
            assert spent2.epsilon <= BUDGET * (1 + 1e-12)
            assert not any(t in charged2 for t in late)

            # ---- connections allowed again: each replica reconnects -----------------------
            again = [f"after the repair {i}" for i in range(REPLICAS)]
            got4 = asyncio.run(_send(ports, FULL_KEY, again))
            assert {(s, c) for _, s, c in got4} == {(403, "privacy_budget_exceeded")}
        finally:
            allow_connections(pg_server, pg_database, True)
            replicas.stop()
    for proc in replicas.procs:
        assert proc.returncode == 0, [log.read_text()[-2000:] for log in replicas.logs]
