"""Bounded load test of ``privembed serve`` on loopback: throughput, p50/p99, errors, memory.

The server runs as its own process through the real command line (``privembed serve --config``)
with the offline all-MiniLM-L6-v2 on a local backend, once per embedding *runtime* named in
``--runtimes``: ``torch`` (sentence-transformers on PyTorch), ``onnx`` (the same model on ONNX
Runtime: what ``runtime = "auto"`` picks where onnxruntime is installed) or ``onnx-int8`` (the
int8-quantised graph: faster, vectors measurably different, so its own model identity). A
runtime may carry its model thread count, ``torch:default`` for torch's own choice; otherwise
``--threads`` applies. The runtimes are measured in the same run, interleaved (forward, then
backward, ...) ``--repeats`` times, and the summary gives medians over the repeats with their
min-max and each runtime's requests/s relative to the first, paired by repeat: the machine is
shared and its load moves between runs. ``--backend fake`` instead puts an OpenAI-compatible
fake model (hash-seeded vectors, in a third process on loopback) behind an upstream backend,
so the table shows the proxy's own overhead.

Each server gets a warm-up, then a *fixed* number of requests at each concurrency level (1, 8,
32 and again 32 clients by default: the rerun shows whether memory keeps growing), every
request with unique texts (no cache hits); a level that runs past ``--level-timeout`` aborts.
The clients are a lean HTTP/1.1 keep-alive loop on asyncio streams, so the load generator
takes little CPU from the server on a small machine (its CPU per request is reported).

Reported per level: requests/s, p50 and p99 latency as the client saw it and inside the server
(from its request log), errors (any non-200 or malformed body), the mean number of texts per
model call (micro-batching at work), the server's and the client's CPU time per request, and
the server's resident memory. The server's log is checked for every benchmark text (none may
appear), and the server is stopped with SIGTERM (graceful shutdown expected).

``--compare-ledger`` measures the cost of the privacy ledger instead (issue 27): servers with
one runtime (``--runtimes``' first, default ``onnx``) and the same model (Gaussian, epsilon 200,
keyed noise), with no ledger, with a ledger, and with a ledger and per-text and per-subject
budgets (large enough never to refuse, so every check runs), interleaved ``--repeats`` times.
Each server gets *time-bounded* phases (``--phase-seconds``, 30 by default) at 1, 8 and 32
clients; each phase reports requests/s, p50/p99, errors and the server's RSS at its end, and
the summary gives each ledger configuration's requests/s relative to no ledger, paired by
repeat.

``--ledger-records N`` times the ledger's per-record composition alone, in fresh processes:
two fresh Gaussian releases of N records through :class:`privembed.keys.ledger.Ledger` (what
``privembed protect --ledger`` stages), with a per-record budget, so the second commit
composes every record's history; reported: commit seconds and peak RSS. Run it with
``PYTHONPATH`` pointing at another checkout to compare versions.

Run (under ``nice``: the machine is shared)::

    nice -n 10 python benchmarks/bench_server.py        # torch, onnx, onnx-int8; 3 repeats
    nice -n 10 python benchmarks/bench_server.py --runtimes torch,onnx,onnx-int8,torch:default
    nice -n 10 python benchmarks/bench_server.py --runtimes onnx --max-batch 64 --max-wait-ms 5
    nice -n 10 python benchmarks/bench_server.py --backend fake      # proxy overhead only
    nice -n 10 python benchmarks/bench_server.py --compare-ledger --repeats 2
    nice -n 10 python benchmarks/bench_server.py --ledger-records 1000000
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
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from privembed.keys.keyed import keygen
from privembed.server import hash_api_key

KEY = "pe-bench-key"
WARMUP = 16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (and its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def _wait_until_up(proc: subprocess.Popen[bytes], probe: Any, what: str, limit: float) -> None:
    t0 = time.monotonic()
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if probe():
                return
        if proc.poll() is not None or time.monotonic() - t0 > limit:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.1)


@contextlib.contextmanager
def fake_upstream() -> Iterator[str]:
    """The fake model in its own process on loopback (not sharing the load generator's GIL)."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-fake-upstream", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_up(
            proc, lambda: httpx.post(url + "/embeddings", json={"input": ["x"]}), "fake", 120
        )
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def variant(spec: str, threads: int) -> tuple[str, int | None]:
    """``RUNTIME[:THREADS]`` (``THREADS``: a number or ``default``) -> (runtime, threads).

    ``default`` is every core (what torch picks on its own; the server's torch default is 1).
    """
    runtime, _, th = spec.partition(":")
    if not th:
        return runtime, threads or None
    return runtime, (os.cpu_count() or 1) if th == "default" else int(th)


def write_config(folder: Path, args: argparse.Namespace, spec: str, upstream: str | None) -> Path:
    if not (folder / "serve.key").exists():
        keygen(folder / "serve.key")
    lines = [
        "[server]",
        'key_file = "serve.key"',
        "max_inputs = 64",
        f"max_batch = {args.max_batch}",
        f"max_wait_ms = {args.max_wait_ms}",
        "max_queue = 4096",
        "cache_size = 4096",
        'log_level = "info"',
    ]
    ledger = getattr(args, "ledger_mode", "ledger" if args.ledger else "none")
    if ledger != "none":
        lines.append(f'ledger = "ledger-{spec.replace(":", "-")}-{ledger}.sqlite"')
    if ledger == "budgets":  # every check runs; nothing is refused
        lines += ["budget_epsilon = 1e6", "subject_budget_epsilon = 1e12"]
    if args.backend == "fake":
        lines += [
            "[backends.up]",
            'type = "upstream"',
            f'base_url = "{upstream}"',
            'model = "fake"',
            "max_concurrency = 1",
        ]
    else:
        runtime, threads = variant(spec, args.threads)
        lines += ["[backends.local]", 'type = "local"', f'runtime = "{runtime}"']
        if threads is not None:
            lines.append(f"threads = {threads}")
    lines += [
        "[models.docs]",
        f'backend = "{"up" if args.backend == "fake" else "local"}"',
        'mechanism = "gaussian"',
        "params = { epsilon = 200.0, delta = 1e-5 }",
        "[[api_keys]]",
        'name = "bench"',
        f'sha256 = "{hash_api_key(KEY)}"',
    ]
    path = folder / f"serve-{spec.replace(':', '-')}-{ledger}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _texts(n: int, start: int, i: int) -> list[str]:
    return [
        f"note {start + i}-{j}: patient reports symptom {(start + i) * 7 + j} "
        "after starting the prescribed medication"
        for j in range(n)
    ]


async def _post(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    """One HTTP/1.1 request on a kept-alive connection: (status, body)."""
    writer.write(request)
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def run_level(
    url: str, clients: int, requests: int, texts: int, start: int, timeout: float
) -> dict[str, Any]:
    """``requests`` requests from ``clients`` concurrent clients; each request has fresh texts.

    The clients are a lean HTTP/1.1 keep-alive loop on asyncio streams (one connection each),
    so that on a small machine the load generator takes as little CPU from the server as it
    can; every response is parsed and checked.
    """
    lat: list[float] = []
    errors = 0
    counter = iter(range(requests))
    host, port = url.removeprefix("http://").split(":")

    def request(i: int) -> bytes:
        body = json.dumps(
            {"model": "docs", "input": _texts(texts, start, i), "encoding_format": "base64"}
        ).encode()
        return (
            f"POST /v1/embeddings HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def client() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for i in counter:
                req = request(i)
                t0 = time.perf_counter()
                try:
                    status, body = await _post(reader, writer, req)
                    ok = status == 200 and len(json.loads(body)["data"]) == texts
                    why = f"HTTP {status} {body[:300]!r}"
                except (OSError, ValueError, KeyError, asyncio.IncompleteReadError) as exc:
                    ok, why = False, f"{type(exc).__name__}: {exc}"
                lat.append(time.perf_counter() - t0)
                if not ok:
                    errors += 1
                    if errors == 1:
                        print(f"first error at {clients} clients: {why}", file=sys.stderr)
                    if not isinstance(why, str) or not why.startswith("HTTP"):
                        writer.close()
                        reader, writer = await asyncio.open_connection(host, int(port))
        finally:
            writer.close()

    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(client() for _ in range(clients))), timeout)
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
        "client_cpu_ms_per_req": (time.process_time() - c0) * 1000.0 / requests,
    }


async def run_phase(
    url: str, clients: int, seconds: float, texts: int, start: int
) -> dict[str, Any]:
    """``clients`` concurrent clients sending requests (fresh texts each) for ``seconds``.

    The same lean keep-alive loop as :func:`run_level`, bounded by time instead of a count:
    a request that is in flight when the time is up still counts when it completes.
    """
    lat: list[float] = []
    errors = 0
    counter = iter(range(10**9))
    host, port = url.removeprefix("http://").split(":")
    deadline = time.perf_counter() + seconds

    def request(i: int) -> bytes:
        body = json.dumps(
            {"model": "docs", "input": _texts(texts, start, i), "encoding_format": "base64"}
        ).encode()
        return (
            f"POST /v1/embeddings HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def client() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.perf_counter() < deadline:
                req = request(next(counter))
                t0 = time.perf_counter()
                try:
                    status, body = await _post(reader, writer, req)
                    ok = status == 200 and len(json.loads(body)["data"]) == texts
                    why = f"HTTP {status} {body[:300]!r}"
                except (OSError, ValueError, KeyError, asyncio.IncompleteReadError) as exc:
                    ok, why = False, f"{type(exc).__name__}: {exc}"
                lat.append(time.perf_counter() - t0)
                if not ok:
                    errors += 1
                    if errors == 1:
                        print(f"first error at {clients} clients: {why}", file=sys.stderr)
                    if not why.startswith("HTTP"):
                        writer.close()
                        reader, writer = await asyncio.open_connection(host, int(port))
        finally:
            writer.close()

    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - t0
    a = np.array(lat) if lat else np.array([float("nan")])
    return {
        "clients": clients,
        "requests": len(lat),
        "texts": texts,
        "wall_s": wall,
        "req_s": len(lat) / wall,
        "p50_ms": float(np.percentile(a, 50) * 1000),
        "p99_ms": float(np.percentile(a, 99) * 1000),
        "errors": errors,
        "client_cpu_ms_per_req": (time.process_time() - c0) * 1000.0 / max(1, len(lat)),
    }


def model_baseline(runtime: str, threads: int | None) -> dict[str, float]:
    """The model alone, in a fresh process: texts/s one at a time and in batches of 16."""
    code = (
        "import json, sys, time\n"
        "from privembed.data.embedders import Embedder\n"
        "rt, th = sys.argv[1], (int(sys.argv[2]) or None)\n"
        "if rt == 'torch' and th:\n"
        "    import torch; torch.set_num_threads(th)\n"
        "e = Embedder(backend=rt, threads=th)\n"
        "t = [f'baseline {i}: patient reports symptom {i} after the medication' for i in range(96)]\n"
        "e.encode(t[:8]); out = {}\n"
        "for bs, n in ((1, 32), (16, 96)):\n"
        "    t0 = time.perf_counter()\n"
        "    for i in range(0, n, bs): e.encode(t[i:i + bs])\n"
        "    out[f'batch {bs}'] = n / (time.perf_counter() - t0)\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, runtime, str(threads or 0)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


@dataclass
class Run:
    """One server's measurements."""

    runtime: str
    repeat: int
    engine: str = "?"
    ready_s: float = float("nan")
    rows: list[dict[str, Any]] = field(default_factory=list)
    rss_start: float = float("nan")
    rss_end: float = float("nan")
    load: tuple[float, float] = (float("nan"), float("nan"))
    graceful: bool = False
    exit_code: int | None = None
    leaked: int = 0


def _metrics(url: str) -> dict[str, Any]:
    r = httpx.get(url + "/metrics?format=json", headers={"Authorization": f"Bearer {KEY}"})
    return dict(r.json())


def one_run(
    args: argparse.Namespace,
    folder: Path,
    runtime: str,
    repeat: int,
    upstream: str | None,
    start: int,
) -> Run:
    """Start a server for ``runtime``, warm it up, run every level, stop it; check its log."""
    run = Run(runtime, repeat)
    levels = [int(x) for x in args.clients.split(",")]
    counts = [int(x) for x in args.requests.split(",")]
    cfg = write_config(folder, args, runtime, upstream)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    logpath = folder / f"server-{runtime.replace(':', '-')}-{repeat}.log"
    load0 = os.getloadavg()[0]
    with logpath.open("w") as log:
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
        t0 = time.perf_counter()
        try:
            _wait_until_up(
                proc,
                lambda: httpx.get(url + "/healthz", timeout=2).status_code == 200,
                "server",
                600,
            )
            run.ready_s = time.perf_counter() - t0
            # warm-up (not measured): first calls allocate kernels and buffers
            asyncio.run(run_level(url, 4, WARMUP, args.texts, 10**7 + start, args.level_timeout))
            run.rss_start = _rss_mib(proc.pid)
            pos = start
            for clients, n in zip(levels, counts, strict=True):
                m0, c0 = _metrics(url), _cpu_s(proc.pid)
                row = asyncio.run(run_level(url, clients, n, args.texts, pos, args.level_timeout))
                m1, c1 = _metrics(url), _cpu_s(proc.pid)
                pos += n
                calls = m1["batches"] - m0["batches"]
                row["texts_per_call"] = n * args.texts / calls if calls else float("nan")
                row["cpu_ms_per_req"] = (c1 - c0) * 1000.0 / n
                row["rss_mib"] = _rss_mib(proc.pid)
                run.rows.append(row)
                print(json.dumps({"runtime": runtime, "repeat": repeat, **row}), file=sys.stderr)
            run.rss_end = _rss_mib(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                run.exit_code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                run.exit_code = -9
    run.load = (load0, os.getloadavg()[0])
    logtext = logpath.read_text()
    served: list[float] = []
    for ln in logtext.splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(ln)
            if rec.get("event") == "started":
                run.engine = ",".join(rec.get("backends", {}).values())
            if rec.get("route") == "/v1/embeddings" and rec.get("event") == "request":
                served.append(float(rec["latency_ms"]))
    at = WARMUP  # the warm-up requests come first
    for r in run.rows:
        part = np.array(served[at : at + r["requests"]])
        at += r["requests"]
        r["srv_p50_ms"], r["srv_p99_ms"] = (
            (float(np.percentile(part, 50)), float(np.percentile(part, 99)))
            if part.size
            else (float("nan"), float("nan"))
        )
    if any(r["errors"] for r in run.rows):
        errs = [ln for ln in logtext.splitlines() if '"status":2' not in ln]
        print("server log (non-2xx lines, last 20):\n" + "\n".join(errs[-20:]), file=sys.stderr)
    run.leaked = sum(f"note {i}-" in logtext for i in range(start, start + sum(counts)))
    # after a clean shutdown the process ends with the SIGTERM (status 143 or -15); the app
    # logs "stopped" last
    sigterm = (0, 128 + signal.SIGTERM, -signal.SIGTERM)
    run.graceful = '"event":"stopped"' in logtext and run.exit_code in sigterm
    if not run.graceful:
        print(
            f"{runtime}: exit status {run.exit_code}; log tail:\n{logtext[-1500:]}", file=sys.stderr
        )
    return run


def _label(levels: list[int], i: int) -> str:
    return f"{levels[i]} (again)" if levels[i] in levels[:i] else str(levels[i])


def _spread(xs: list[float], fmt: str = ".1f") -> str:
    med = statistics.median(xs)
    if len(xs) == 1:
        return f"{med:{fmt}}"
    return f"{med:{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def report(args: argparse.Namespace, runs: list[Run], baselines: dict[str, Any]) -> None:
    levels = [int(x) for x in args.clients.split(",")]
    runtimes = list(dict.fromkeys(r.runtime for r in runs))
    loads = [x for r in runs for x in r.load]
    print(
        f"\nbackend: {args.backend}{' + ledger' if args.ledger else ''}; runtimes: "
        f"{', '.join(runtimes)} (RUNTIME:THREADS; model threads otherwise "
        f"{args.threads or 'default'}); {args.repeats} repeat(s), interleaved; texts per "
        f"request: {args.texts}; max_batch = {args.max_batch}, max_wait_ms = {args.max_wait_ms}"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores shared with other work (1-min "
        f"load average {min(loads):.1f} to {max(loads):.1f} during the runs), "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"niceness {os.nice(0)}"
    )
    pkgs = ["privembed", "numpy", "torch", "sentence-transformers", "onnxruntime", "fastapi"]
    pkgs += ["uvicorn", "httpx", "pydantic"]
    print("versions: " + ", ".join(f"{p} {version(p)}" for p in pkgs))
    for rt, b in baselines.items():
        print(
            f"the model alone ({rt}, in a fresh process): "
            + ", ".join(f"{v:.1f} texts/s at {k}" for k, v in b.items())
        )
    print("\nevery run (in the order run):\n")
    print(
        "| runtime[:threads] | repeat | clients | requests/s | p50 ms | p99 ms | server p50 / p99 ms "
        "| errors | texts per model call | server / client CPU ms/req | RSS MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run in runs:
        for i, r in enumerate(run.rows):
            print(
                f"| {run.runtime} | {run.repeat} | {_label(levels, i)} | {r['req_s']:.1f} | "
                f"{r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['srv_p50_ms']:.0f} / "
                f"{r['srv_p99_ms']:.0f} | {r['errors']} | {r['texts_per_call']:.1f} | "
                f"{r['cpu_ms_per_req']:.1f} / {r['client_cpu_ms_per_req']:.1f} | "
                f"{r['rss_mib']:.0f} |"
            )
    print(
        "\nsummary: median over the repeats (min-max); RSS after warm-up -> after the last level\n"
    )
    print(
        "| runtime[:threads] | clients | requests/s | p50 ms | p99 ms | errors | texts per model call "
        "| server CPU ms/req | RSS MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rt in runtimes:
        mine = [r for r in runs if r.runtime == rt]
        for i in range(len(levels)):
            rows = [r.rows[i] for r in mine]
            rss = (
                f"{statistics.median(r.rss_start for r in mine):.0f} -> "
                f"{statistics.median(r.rss_end for r in mine):.0f}"
                if i == len(levels) - 1
                else ""
            )
            print(
                f"| {rt} | {_label(levels, i)} | {_spread([r['req_s'] for r in rows])} | "
                f"{_spread([r['p50_ms'] for r in rows], '.0f')} | "
                f"{_spread([r['p99_ms'] for r in rows], '.0f')} | "
                f"{sum(r['errors'] for r in rows)} | "
                f"{statistics.median(r['texts_per_call'] for r in rows):.1f} | "
                f"{statistics.median(r['cpu_ms_per_req'] for r in rows):.1f} | {rss} |"
            )
    if len(runtimes) > 1:
        base = runtimes[0]
        print(f"\nrequests/s relative to {base}, per repeat (paired, interleaved runs):\n")
        head = " | ".join(f"repeat {k}" for k in range(args.repeats))
        print(f"| runtime[:threads] | clients | {head} | median |")
        print("|---|---:|" + "---:|" * (args.repeats + 1))
        for rt in runtimes[1:]:
            for i in range(len(levels)):
                ratios = []
                for k in range(args.repeats):
                    ra = next(r for r in runs if r.runtime == base and r.repeat == k)
                    rb = next(r for r in runs if r.runtime == rt and r.repeat == k)
                    ratios.append(rb.rows[i]["req_s"] / ra.rows[i]["req_s"])
                print(
                    f"| {rt} | {_label(levels, i)} | "
                    + " | ".join(f"{x:.2f}" for x in ratios)
                    + f" | {statistics.median(ratios):.2f} |"
                )
    grow = [r.rows[-1]["rss_mib"] - r.rows[-2]["rss_mib"] for r in runs if len(r.rows) > 1]
    print(
        f"\nmemory: RSS change over the last level (a rerun of the one before) "
        f"{min(grow):+.0f} to {max(grow):+.0f} MiB; ready after "
        f"{', '.join(f'{r.runtime} {r.ready_s:.1f} s' for r in runs)}; engines the servers "
        f"reported: {', '.join(sorted({f'{r.runtime}={r.engine}' for r in runs}))}"
    )
    print(
        f"benchmark texts found in the server logs: {sum(r.leaked for r in runs)}; graceful "
        f"SIGTERM shutdowns: {sum(r.graceful for r in runs)}/{len(runs)}"
    )


LEDGER_MODES = ("none", "ledger", "budgets")


def ledger_run(
    args: argparse.Namespace, folder: Path, runtime: str, mode: str, repeat: int, start: int
) -> Run:
    """One server (``mode``: no ledger, a ledger, a ledger with budgets): warm-up, then one
    time-bounded phase per concurrency level; RSS after each phase; SIGTERM at the end."""
    run = Run(f"{mode}", repeat)
    levels = [int(x) for x in args.clients.split(",")]
    args.ledger_mode = mode
    cfg = write_config(folder, args, runtime, None)
    for old in folder.glob(f"ledger-{runtime.replace(':', '-')}-{mode}.sqlite*"):
        old.unlink()  # every run starts with an empty ledger
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    logpath = folder / f"server-{mode}-{repeat}.log"
    load0 = os.getloadavg()[0]
    with logpath.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "privembed.cli", "serve", "--config", str(cfg), "--port",
             str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        t0 = time.perf_counter()
        try:
            _wait_until_up(
                proc,
                lambda: httpx.get(url + "/healthz", timeout=2).status_code == 200,
                "server",
                600,
            )
            run.ready_s = time.perf_counter() - t0
            if args.warmup:
                asyncio.run(
                    run_level(url, 4, args.warmup, args.texts, 10**8 + start, args.level_timeout)
                )
            run.rss_start = _rss_mib(proc.pid)
            pos = start
            for clients in levels:
                m0, c0 = _metrics(url), _cpu_s(proc.pid)
                row = asyncio.run(run_phase(url, clients, args.phase_seconds, args.texts, pos))
                m1, c1 = _metrics(url), _cpu_s(proc.pid)
                pos += 10**6
                calls = m1["batches"] - m0["batches"]
                n = row["requests"]
                row["texts_per_call"] = n * args.texts / calls if calls else float("nan")
                row["cpu_ms_per_req"] = (c1 - c0) * 1000.0 / max(1, n)
                row["rss_mib"] = _rss_mib(proc.pid)
                row["srv_p50_ms"] = row["srv_p99_ms"] = float("nan")
                run.rows.append(row)
                print(json.dumps({"mode": mode, "repeat": repeat, **row}), file=sys.stderr)
            run.rss_end = _rss_mib(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                run.exit_code = proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                run.exit_code = -9
    run.load = (load0, os.getloadavg()[0])
    logtext = logpath.read_text()
    run.leaked = logtext.count("patient reports symptom")
    run.graceful = '"event":"stopped"' in logtext and run.exit_code == 0
    if not run.graceful:
        print(f"{mode}: exit status {run.exit_code}; log tail:\n{logtext[-1500:]}",
              file=sys.stderr)  # fmt: skip
    ledger = folder / f"ledger-{runtime.replace(':', '-')}-{mode}.sqlite"
    if ledger.exists():
        from privembed.keys.ledger import Ledger

        with Ledger(ledger, readonly=True) as led:
            run.engine = f"{led.summary()['records']} records in the ledger"
    return run


def ledger_report(args: argparse.Namespace, runtime: str, runs: list[Run]) -> None:
    levels = [int(x) for x in args.clients.split(",")]
    loads = [x for r in runs for x in r.load]
    print(
        f"\nthe ledger's cost (issue 27): runtime {runtime}, model threads "
        f"{args.threads or 'default'}, Gaussian epsilon 200 with keyed noise, {args.texts} "
        f"text(s) per request, fresh texts only, max_batch = {args.max_batch}; "
        f"{args.phase_seconds:g} s per phase; {args.repeats} repeat(s), interleaved"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores shared with other work (1-min "
        f"load average {min(loads):.1f} to {max(loads):.1f} during the runs), "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"niceness {os.nice(0)}"
    )
    pkgs = ["privembed", "numpy", "onnxruntime", "fastapi", "uvicorn", "pydantic"]
    print("versions: " + ", ".join(f"{p} {version(p)}" for p in pkgs))
    print("\n| ledger | repeat | clients | requests/s | p50 ms | p99 ms | errors | texts per "
          "model call | server CPU ms/req | RSS MiB after the phase |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run in runs:
        for i, r in enumerate(run.rows):
            print(
                f"| {run.runtime} | {run.repeat} | {_label(levels, i)} | {r['req_s']:.1f} | "
                f"{r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['errors']} | "
                f"{r['texts_per_call']:.1f} | {r['cpu_ms_per_req']:.1f} | {r['rss_mib']:.0f} |"
            )
    print(
        "\nthe ledger's cost: requests/s without a ledger / with it (1.00 = free, 1.50 = a "
        "third fewer requests), paired by repeat:\n"
    )
    print("| ledger | clients | " + " | ".join(f"repeat {k}" for k in range(args.repeats))
          + " | worst |")  # fmt: skip
    print("|---|---:|" + "---:|" * (args.repeats + 1))
    for mode in [m for m in LEDGER_MODES[1:] if any(r.runtime == m for r in runs)]:
        if not any(r.runtime == "none" for r in runs):
            break
        for i in range(len(levels)):
            ratios = []
            for k in range(args.repeats):
                base = next(r for r in runs if r.runtime == "none" and r.repeat == k)
                mine = next(r for r in runs if r.runtime == mode and r.repeat == k)
                ratios.append(base.rows[i]["req_s"] / mine.rows[i]["req_s"])
            print(f"| {mode} | {_label(levels, i)} | " + " | ".join(f"{x:.2f}"
                  for x in ratios) + f" | {max(ratios):.2f} |")  # fmt: skip
    print(
        "\nRSS after warm-up -> after each phase: "
        + "; ".join(
            f"{r.runtime} #{r.repeat}: {r.rss_start:.0f} -> "
            + " -> ".join(f"{x['rss_mib']:.0f}" for x in r.rows)
            for r in runs
        )
    )
    print(
        f"ledgers: {'; '.join(f'{r.runtime} #{r.repeat}: {r.engine}' for r in runs if r.engine != '?')}"
        f"\nbenchmark texts in the server logs: {sum(r.leaked for r in runs)}; clean SIGTERM "
        f"shutdowns with exit status 0: {sum(r.graceful for r in runs)}/{len(runs)}"
    )


_LEDGER_CHILD = """
import json, resource, sys, time, tempfile, os
from privembed import GaussianMechanism
from privembed.keys.ledger import Ledger
n = int(sys.argv[1])
mech = GaussianMechanism(epsilon=200.0, delta=1e-5)  # examples/serve.toml's documents model
keys = ["s:r%d" % i for i in range(n)]
out = {}
with tempfile.TemporaryDirectory() as tmp:
    led = Ledger(os.path.join(tmp, "l.sqlite"), budget_epsilon=1e6, budget_delta=1e-5)
    for name in ("first release", "second release"):
        st = led.stage(mech)
        for a in range(0, n, 65536):
            st.add(keys[a:a + 65536])
        t0 = time.perf_counter()
        st.commit()
        out[name + " commit s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    spent = led.spent(["r0"])[0].epsilon
    out["spent of one record s"] = time.perf_counter() - t0
    out["epsilon spent per record"] = spent
out["peak RSS MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def ledger_records(n: int) -> None:
    """Two fresh Gaussian releases of ``n`` records in a fresh process (module docstring)."""
    import privembed

    res = subprocess.run(
        [sys.executable, "-c", _LEDGER_CHILD, str(n)], capture_output=True, text=True, check=True
    )
    out = json.loads(res.stdout.strip().splitlines()[-1])
    print(
        f"ledger per-record composition, {n:,} records, two fresh Gaussian releases (epsilon "
        f"200), per-record budget set; privembed from {Path(privembed.__file__).parent}; "
        f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} shared cores)"
    )
    for k, v in out.items():
        print(f"  {k}: {v:.4g}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-fake-upstream":
        uvicorn.run(fake_app(), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backend", choices=("local", "fake"), default="local")
    ap.add_argument(
        "--runtimes",
        default="torch,onnx,onnx-int8",
        help="local backend runtimes, measured interleaved: auto, torch, onnx or onnx-int8, "
        "each optionally :THREADS or :default (the first is the baseline of the ratios)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs per runtime")
    ap.add_argument(
        "--clients", default="1,8,32,32", help="concurrency levels (32 twice: memory after a rerun)"
    )
    ap.add_argument("--requests", default="48,192,384,384", help="requests per level")
    ap.add_argument("--texts", type=int, default=1, help="texts per request")
    ap.add_argument(
        "--max-batch",
        type=int,
        default=16,
        help="server max_batch (16: a batch computes while the next one fills; see docs)",
    )
    ap.add_argument("--max-wait-ms", type=float, default=2.0, help="server max_wait_ms")
    ap.add_argument("--ledger", action="store_true", help="record releases in a ledger")
    ap.add_argument(
        "--threads", type=int, default=1, help="model threads (torch or ONNX Runtime; 0: default)"
    )
    ap.add_argument("--no-baseline", action="store_true", help="skip the model-alone timing")
    ap.add_argument("--level-timeout", type=float, default=600.0)
    ap.add_argument(
        "--compare-ledger",
        action="store_true",
        help="servers without a ledger, with one, and with budgets (time-bounded phases)",
    )
    ap.add_argument("--phase-seconds", type=float, default=30.0, help="--compare-ledger phases")
    ap.add_argument(
        "--ledger-modes",
        default=",".join(LEDGER_MODES),
        help="--compare-ledger: which of none, ledger, budgets (default all)",
    )
    ap.add_argument("--warmup", type=int, default=WARMUP, help="--compare-ledger warm-up requests")
    ap.add_argument(
        "--ledger-records", type=int, default=0, help="time the per-record composition alone"
    )
    args = ap.parse_args()
    if args.ledger_records:
        ledger_records(args.ledger_records)
        return 0
    if args.compare_ledger:
        runtime = args.runtimes.split(",")[0] if args.runtimes != "torch,onnx,onnx-int8" else "onnx"
        if args.clients == "1,8,32,32":
            args.clients = "1,8,32"
        runs: list[Run] = []
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            start = 0
            modes = [m for m in LEDGER_MODES if m in args.ledger_modes.split(",")]
            for k in range(args.repeats):
                order = modes if k % 2 == 0 else modes[::-1]
                for mode in order:
                    runs.append(ledger_run(args, folder, runtime, mode, k, start))
                    start += 10**7
        runs.sort(key=lambda r: (r.repeat, LEDGER_MODES.index(r.runtime)))
        ledger_report(args, runtime, runs)
        bad = sum(r["errors"] for run in runs for r in run.rows)
        return 1 if bad or sum(r.leaked for r in runs) or not all(r.graceful for r in runs) else 0
    if len(args.clients.split(",")) != len(args.requests.split(",")):
        ap.error("--clients and --requests need the same number of values")
    runtimes = ["fake"] if args.backend == "fake" else args.runtimes.split(",")

    baselines = (
        {}
        if args.backend == "fake" or args.no_baseline
        else {rt: model_baseline(*variant(rt, args.threads)) for rt in runtimes}
    )
    runs = []
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(fake_upstream()) if args.backend == "fake" else None
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        start = 0
        per_run = sum(int(x) for x in args.requests.split(","))
        for k in range(args.repeats):
            order = runtimes if k % 2 == 0 else runtimes[::-1]
            for rt in order:
                runs.append(one_run(args, folder, rt, k, upstream, start))
                start += per_run
    runs.sort(key=lambda r: (r.repeat, runtimes.index(r.runtime)))
    report(args, runs, baselines)
    bad = sum(r["errors"] for run in runs for r in run.rows)
    bad += sum(r.leaked for r in runs) + sum(not r.graceful for r in runs)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
