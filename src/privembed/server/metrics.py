"""In-process metrics, exposed in the Prometheus text format (by ``prometheus_client``) and JSON.

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
>>> 'privembed_vectors_total{model="docs",treatment="protect"} 3.0' in m.prometheus()
True
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["BUCKETS", "WINDOW", "Metrics"]

#: latency histogram bucket upper bounds, seconds
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: number of recent embeddings requests the percentiles are computed over
WINDOW = 4096
_BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


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
        """The Prometheus text exposition format, written by ``prometheus_client`` from these
        counters (one registry per server, so tests and several apps never share state)."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return str(generate_latest(registry).decode("utf-8"))


class _Collector:
    """Turns a :class:`Metrics` into ``prometheus_client`` metric families on each scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    @staticmethod
    def _histogram(fam: Any, labels: list[str], h: _Histogram) -> None:
        buckets, cum = [], 0
        for b, c in zip(h.bounds, h.counts, strict=False):
            cum += c
            buckets.append((f"{b:g}", cum))
        buckets.append(("+Inf", h.n))
        fam.add_metric(labels, buckets, h.total)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        m = self.m
        c = CounterMetricFamily(
            "privembed_requests", "HTTP requests by route and status.", labels=["route", "status"]
        )
        for (route, status), n in sorted(m.requests.items()):
            c.add_metric([route, str(status)], n)
        yield c
        h = HistogramMetricFamily(
            "privembed_request_seconds", "Request latency by route.", labels=["route"]
        )
        for route, hist in sorted(m.latency.items()):
            self._histogram(h, [route], hist)
        yield h
        # quantiles of a sliding window are a gauge per quantile (a Summary would need counts)
        q = GaugeMetricFamily(
            "privembed_embeddings_latency_seconds",
            f"Latency quantiles of the last {WINDOW} successful embeddings requests.",
            labels=["quantile"],
        )
        for name, value in zip(("0.5", "0.9", "0.99"), m.percentiles().values(), strict=True):
            if value is not None:
                q.add_metric([name], value)
        yield q
        yield CounterMetricFamily(
            "privembed_inputs", "Input texts received in valid requests.", value=m.inputs
        )
        v = CounterMetricFamily(
            "privembed_vectors", "Vectors returned, by model and treatment.",
            labels=["model", "treatment"],
        )  # fmt: skip
        for (model, t), n in sorted(m.vectors.items()):
            v.add_metric([model, t], n)
        yield v
        yield CounterMetricFamily(
            "privembed_cache_hits", "Vectors served from the release cache.", value=m.cache_hits
        )
        r = CounterMetricFamily(
            "privembed_refused", "Requests refused, by reason.", labels=["reason"]
        )
        for reason, n in sorted(m.refused.items()):
            r.add_metric([reason], n)
        yield r
        b = HistogramMetricFamily(
            "privembed_batch_texts", "Texts per model call (micro-batch size)."
        )
        self._histogram(b, [], m.batch_sizes)
        yield b
        yield GaugeMetricFamily(
            "privembed_queue_texts", "Texts waiting for a model call.", value=m.queue_depth
        )
        yield GaugeMetricFamily(
            "privembed_in_flight_requests", "Requests being handled.", value=m.in_flight
        )
