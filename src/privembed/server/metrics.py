"""In-process metrics in the Prometheus text format (and JSON): no client library needed.

Counted: requests per (route, status), request latency (a cumulative histogram per route and
p50/p90/p99 over the last :data:`WINDOW` embeddings requests), inputs, vectors released per
(model, treatment), micro-batches and their sizes, cache hits, refusals per reason, queue depth.
Labels take only bounded values (configured model names, fixed route names), so a client cannot
grow the metric set.

Examples
--------
>>> m = Metrics()
>>> m.observe_request("/v1/embeddings", 200, 0.012)
>>> m.count_vectors("docs", "protect", 3)
>>> snap = m.snapshot()
>>> snap["requests"], snap["vectors"]
({'/v1/embeddings 200': 1}, {'docs protect': 3})
>>> 'privembed_vectors_total{model="docs",treatment="protect"} 3' in m.prometheus()
True
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, deque
from typing import Any

import numpy as np

__all__ = ["BUCKETS", "WINDOW", "Metrics"]

#: latency histogram bucket upper bounds, seconds
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: number of recent embeddings requests the percentiles are computed over
WINDOW = 4096
_BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, v)] += 1
        self.total += v
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, cum = [], 0
        sep = "," if labels else ""
        for b, c in zip(self.bounds, self.counts, strict=False):
            cum += c
            out.append(f'{name}_bucket{{{labels}{sep}le="{b:g}"}} {cum}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.n}')
        lab = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{lab} {self.total:.6f}")
        out.append(f"{name}_count{lab} {self.n}")
        return out


class Metrics:
    """Counters and histograms of one server process (event-loop thread only)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.requests: Counter[tuple[str, int]] = Counter()
        self.latency: dict[str, _Histogram] = {}
        self.recent: deque[float] = deque(maxlen=WINDOW)
        self.inputs = 0
        self.vectors: Counter[tuple[str, str]] = Counter()
        self.cache_hits = 0
        self.refused: Counter[str] = Counter()
        self.batches = 0
        self.batch_sizes = _Histogram(_BATCH_BUCKETS)
        self.queue_depth = 0
        self.in_flight = 0

    # ---- recording ---------------------------------------------------------------------------
    def observe_request(self, route: str, status: int, seconds: float) -> None:
        self.requests[(route, status)] += 1
        self.latency.setdefault(route, _Histogram(BUCKETS)).observe(seconds)
        if route == "/v1/embeddings" and status == 200:
            self.recent.append(seconds)

    def count_vectors(self, model: str, treatment: str, n: int) -> None:
        self.vectors[(model, treatment)] += n

    def observe_batch(self, texts: int) -> None:
        self.batches += 1
        self.batch_sizes.observe(texts)

    # ---- reading -----------------------------------------------------------------------------
    def percentiles(self) -> dict[str, float | None]:
        """p50/p90/p99 latency (seconds) of recent successful embeddings requests."""
        if not self.recent:
            return {"p50": None, "p90": None, "p99": None}
        arr = np.fromiter(self.recent, dtype=np.float64)
        p50, p90, p99 = np.percentile(arr, [50, 90, 99])
        return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}

    def snapshot(self) -> dict[str, Any]:
        """Everything as JSON-safe data (the ``/metrics?format=json`` body)."""
        return {
            "uptime_s": time.time() - self.started,
            "requests": {f"{r} {s}": n for (r, s), n in sorted(self.requests.items())},
            "latency_s": self.percentiles(),
            "inputs": self.inputs,
            "vectors": {f"{m} {t}": n for (m, t), n in sorted(self.vectors.items())},
            "vectors_protected": sum(n for (_, t), n in self.vectors.items() if t == "protect"),
            "cache_hits": self.cache_hits,
            "refused": dict(sorted(self.refused.items())),
            "batches": self.batches,
            "mean_batch_size": self.batch_sizes.total / self.batches if self.batches else None,
            "queue_depth": self.queue_depth,
            "in_flight": self.in_flight,
        }

    def prometheus(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        L: list[str] = []

        def head(name: str, kind: str, help_: str) -> None:
            L.append(f"# HELP {name} {help_}")
            L.append(f"# TYPE {name} {kind}")

        head("privembed_requests_total", "counter", "HTTP requests by route and status.")
        for (route, status), n in sorted(self.requests.items()):
            L.append(f'privembed_requests_total{{route="{_esc(route)}",status="{status}"}} {n}')
        head("privembed_request_seconds", "histogram", "Request latency by route.")
        for route, h in sorted(self.latency.items()):
            L.extend(h.lines("privembed_request_seconds", f'route="{_esc(route)}"'))
        head(
            "privembed_embeddings_latency_seconds",
            "summary",
            f"Latency quantiles of the last {WINDOW} successful embeddings requests.",
        )
        for q, v in zip(("0.5", "0.9", "0.99"), self.percentiles().values(), strict=True):
            if v is not None:
                L.append(f'privembed_embeddings_latency_seconds{{quantile="{q}"}} {v:.6f}')
        head("privembed_inputs_total", "counter", "Input texts received in valid requests.")
        L.append(f"privembed_inputs_total {self.inputs}")
        head("privembed_vectors_total", "counter", "Vectors returned, by model and treatment.")
        for (model, t), n in sorted(self.vectors.items()):
            L.append(f'privembed_vectors_total{{model="{_esc(model)}",treatment="{t}"}} {n}')
        head("privembed_cache_hits_total", "counter", "Vectors served from the release cache.")
        L.append(f"privembed_cache_hits_total {self.cache_hits}")
        head("privembed_refused_total", "counter", "Requests refused, by reason.")
        for reason, n in sorted(self.refused.items()):
            L.append(f'privembed_refused_total{{reason="{_esc(reason)}"}} {n}')
        head("privembed_batch_texts", "histogram", "Texts per model call (micro-batch size).")
        L.extend(self.batch_sizes.lines("privembed_batch_texts", ""))
        head("privembed_queue_texts", "gauge", "Texts waiting for a model call.")
        L.append(f"privembed_queue_texts {self.queue_depth}")
        head("privembed_in_flight_requests", "gauge", "Requests being handled.")
        L.append(f"privembed_in_flight_requests {self.in_flight}")
        return "\n".join(L) + "\n"
