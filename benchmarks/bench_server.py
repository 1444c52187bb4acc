"""Bounded load test of ``privembed serve`` on loopback: throughput, p50/p99, errors, memory.

The server runs as its own process through the real command line (``privembed serve --config``),
with the offline all-MiniLM-L6-v2 (``--backend local``, the default) or a fake in-process model
(``--backend fake``: an OpenAI-compatible upstream in a third process on loopback that returns
hash-seeded vectors, so the table shows the proxy's own overhead). The load generator sends a *fixed* number of
requests at each concurrency level (1, 8, 32 and again 32 clients by default, the rerun showing
whether memory keeps growing), each with unique texts (no cache hits), and stops by itself; a level that runs past ``--level-timeout`` aborts the run.

Reported per level: requests/s and texts/s, p50 and p99 latency, errors (any non-200), the mean
number of texts per model call (micro-batching at work) and the server's resident memory after
the level. The server's JSON log is checked for every benchmark text afterwards (none may appear),
and the server is stopped with SIGTERM (graceful shutdown; exit status 0 expected).

Run::

    python benchmarks/bench_server.py                      # local MiniLM, 1/8/32 clients
    python benchmarks/bench_server.py --backend fake       # proxy overhead only
    python benchmarks/bench_server.py --requests 64,256,640 --texts 4
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from privembed.keyed import keygen
from privembed.server import hash_api_key

KEY = "pe-bench-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def fake_app(dim: int = 384) -> FastAPI:
    """An OpenAI-compatible fake model: hash-seeded float32 vectors, no model cost."""
    app = FastAPI()

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> JSONResponse:
        body = await request.json()
        data = []
        for i, t in enumerate(body["input"]):
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(dim).astype("<f4")
            data.append({"index": i, "embedding": base64.b64encode(v.tobytes()).decode()})
        n = len(body["input"])
        return JSONResponse({"data": data, "usage": {"prompt_tokens": n, "total_tokens": n}})

    return app


@contextlib.contextmanager
def fake_upstream() -> Iterator[str]:
    """The fake model in its own process on loopback (not sharing the load generator's GIL)."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-fake-upstream", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(f"http://127.0.0.1:{port}/v1/embeddings", json={"input": ["x"]})
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the fake upstream did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(30)


def write_config(
    folder: Path, *, backend: str, upstream: str | None, ledger: bool, threads: int = 1
) -> Path:
    keygen(folder / "serve.key")
    lines = [
        "[server]",
        'key_file = "serve.key"',
        "max_inputs = 64",
        "max_batch = 64",
        "max_wait_ms = 2.0",
        "max_queue = 4096",
        "cache_size = 4096",
        'log_level = "info"',
    ]
    if ledger:
        lines.append('ledger = "ledger.sqlite"')
    if backend == "fake":
        lines += [
            "[backends.up]",
            'type = "upstream"',
            f'base_url = "{upstream}"',
            'model = "fake"',
            "max_concurrency = 1",
        ]
    else:
        lines += ["[backends.local]", 'type = "local"', f"threads = {threads}"]
    lines += [
        "[models.docs]",
        f'backend = "{"up" if backend == "fake" else "local"}"',
        'mechanism = "gaussian"',
        "params = { epsilon = 200.0, delta = 1e-5 }",
        "[[api_keys]]",
        'name = "bench"',
        f'sha256 = "{hash_api_key(KEY)}"',
    ]
    path = folder / "serve.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


async def run_level(
    url: str, clients: int, requests: int, texts: int, start: int, timeout: float
) -> dict[str, Any]:
    """``requests`` requests from ``clients`` concurrent clients; each request has fresh texts."""
    lat: list[float] = []
    errors = 0
    counter = iter(range(requests))
    headers = {"Authorization": f"Bearer {KEY}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(ac: httpx.AsyncClient) -> None:
        nonlocal errors
        for i in counter:
            body = {
                "model": "docs",
                "input": [
                    f"note {start + i}-{j}: patient reports symptom {(start + i) * 7 + j} "
                    "after starting the prescribed medication"
                    for j in range(texts)
                ],
                "encoding_format": "base64",
            }
            t0 = time.perf_counter()
            try:
                r = await ac.post(url + "/v1/embeddings", json=body, headers=headers)
                ok = r.status_code == 200 and len(r.json()["data"]) == texts
                why = f"HTTP {r.status_code} {r.text[:300]}"
            except httpx.HTTPError as exc:
                ok, why = False, f"{type(exc).__name__}: {exc}"
            lat.append(time.perf_counter() - t0)
            if not ok:
                errors += 1
                if errors == 1:
                    print(f"first error at {clients} clients: {why}", file=sys.stderr)

    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=120, limits=limits) as ac:
        await asyncio.wait_for(asyncio.gather(*(client(ac) for _ in range(clients))), timeout)
    wall = time.perf_counter() - t0
    a = np.array(lat)
    return {
        "clients": clients,
        "requests": requests,
        "texts": texts,
        "wall_s": wall,
        "req_s": requests / wall,
        "texts_s": requests * texts / wall,
        "p50_ms": float(np.percentile(a, 50) * 1000),
        "p99_ms": float(np.percentile(a, 99) * 1000),
        "errors": errors,
    }


def model_baseline(threads: int) -> dict[str, float]:
    """The model alone, in this process, before the server starts: texts/s at batch 1 and 16."""
    import torch

    from privembed.embedders import Embedder

    torch.set_num_threads(threads)
    emb = Embedder()
    texts = [f"baseline {i}: patient reports symptom {i} after the medication" for i in range(64)]
    emb.encode(texts[:4])
    out = {}
    for bs in (1, 16):
        t0 = time.perf_counter()
        for i in range(0, 32, bs):
            emb.encode(texts[i : i + bs])
        out[f"batch {bs}"] = 32 / (time.perf_counter() - t0)
    return out


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-fake-upstream":
        uvicorn.run(fake_app(), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backend", choices=("local", "fake"), default="local")
    ap.add_argument(
        "--clients", default="1,8,32,32", help="concurrency levels (32 twice: memory after a rerun)"
    )
    ap.add_argument("--requests", default="48,192,384,384", help="requests per level")
    ap.add_argument("--texts", type=int, default=1, help="texts per request")
    ap.add_argument("--ledger", action="store_true", help="record releases in a ledger")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the local model")
    ap.add_argument("--level-timeout", type=float, default=300.0)
    args = ap.parse_args()
    levels = [int(x) for x in args.clients.split(",")]
    counts = [int(x) for x in args.requests.split(",")]
    if len(levels) != len(counts):
        ap.error("--clients and --requests need the same number of values")

    baseline = model_baseline(args.threads) if args.backend == "local" else None
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(fake_upstream()) if args.backend == "fake" else None
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        cfg = write_config(
            folder,
            backend=args.backend,
            upstream=upstream,
            ledger=args.ledger,
            threads=args.threads,
        )
        port = _free_port()
        log = (folder / "server.log").open("w")
        proc = subprocess.Popen(
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
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        url = f"http://127.0.0.1:{port}"
        t_start = time.perf_counter()
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"server exited: {(folder / 'server.log').read_text()[-2000:]}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                        break
                if time.perf_counter() - t_start > 600:
                    raise RuntimeError("server did not become ready in 600 s")
                time.sleep(0.2)
            ready_s = time.perf_counter() - t_start
            # warm-up (not measured): first calls allocate kernels and buffers
            asyncio.run(run_level(url, 4, 16, args.texts, 10**6, args.level_timeout))
            rss_start = _rss_mib(proc.pid)
            rows = []
            start = 0
            for clients, n in zip(levels, counts, strict=True):
                m0 = httpx.get(
                    url + "/metrics?format=json", headers={"Authorization": f"Bearer {KEY}"}
                ).json()
                row = asyncio.run(run_level(url, clients, n, args.texts, start, args.level_timeout))
                m1 = httpx.get(
                    url + "/metrics?format=json", headers={"Authorization": f"Bearer {KEY}"}
                ).json()
                start += n
                calls = m1["batches"] - m0["batches"]
                row["texts_per_call"] = n * args.texts / calls if calls else float("nan")
                row["rss_mib"] = _rss_mib(proc.pid)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            rss_end = _rss_mib(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = -9
            log.close()
        logtext = (folder / "server.log").read_text()
        # server-side latency per level, from the server's own request log lines (in order)
        served = []
        for ln in logtext.splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(ln)
                if rec.get("route") == "/v1/embeddings" and rec.get("event") == "request":
                    served.append(float(rec["latency_ms"]))
        pos = 16  # the warm-up requests come first
        for r in rows:
            part = np.array(served[pos : pos + r["requests"]])
            pos += r["requests"]
            r["srv_p50_ms"], r["srv_p99_ms"] = (
                (float(np.percentile(part, 50)), float(np.percentile(part, 99)))
                if part.size
                else (float("nan"), float("nan"))
            )
        if any(r["errors"] for r in rows):
            errs = [ln for ln in logtext.splitlines() if '"status":2' not in ln]
            print("server log (non-2xx lines, last 20):\n" + "\n".join(errs[-20:]), file=sys.stderr)
        leaked = sum(f"note {i}-" in logtext for i in range(start))
        # uvicorn re-raises the SIGTERM after a clean shutdown; the app logs "stopped" last
        graceful = '"event":"stopped"' in logtext and code in (0, -signal.SIGTERM)

    load = os.getloadavg()
    print(
        f"\nbackend: {args.backend}{' + ledger' if args.ledger else ''}; texts per request: "
        f"{args.texts}; server ready after {ready_s:.1f} s; SIGTERM: exit status {code}, "
        f"graceful shutdown {'completed' if graceful else 'NOT completed'}"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores (shared with other work; load "
        f"average at the end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}), {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
    )
    print(
        "versions: "
        + ", ".join(
            f"{p} {version(p)}"
            for p in (
                "privembed",
                "numpy",
                "torch",
                "sentence-transformers",
                "fastapi",
                "uvicorn",
                "httpx",
            )
        )
    )
    if baseline:
        print(
            "the model alone (all-MiniLM-L6-v2 in the load generator's process, before the "
            "server started): " + ", ".join(f"{v:.1f} texts/s at {k}" for k, v in baseline.items())
        )
    print(
        f"server RSS: {rss_start:.0f} MiB after warm-up, {rss_end:.0f} MiB at the end; "
        f"benchmark texts found in the server log: {leaked}\n"
    )
    print(
        "| clients | requests | requests/s | texts/s | p50 ms | p99 ms | server p50 / p99 ms "
        "| errors | texts per model call | RSS MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['clients']} | {r['requests']} | {r['req_s']:.1f} | {r['texts_s']:.1f} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['srv_p50_ms']:.1f} / {r['srv_p99_ms']:.1f} | "
            f"{r['errors']} | {r['texts_per_call']:.1f} | {r['rss_mib']:.0f} |"
        )
    bad = sum(r["errors"] for r in rows) + leaked + (not graceful)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
