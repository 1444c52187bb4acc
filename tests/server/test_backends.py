"""The upstream backend's retries, through ``httpx.MockTransport`` with an injected sleep and
clock (nothing waits for real): transient failures are retried with a bounded backoff that
honours Retry-After, within a deadline; other errors are not; the client never sees the
upstream's reply."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest

from privembed.server.backends import MAX_BACKOFF_S, BackendError, UpstreamBackend
from privembed.server.config import BackendConfig

DIM = 8
SECRET = "patient record 4711"


def _ok(request: httpx.Request) -> httpx.Response:
    texts = json.loads(request.content)["input"]
    data = [{"index": i, "embedding": [1.0] + [0.0] * (DIM - 1)} for i in range(len(texts))]
    return httpx.Response(200, json={"data": data, "usage": {"prompt_tokens": len(texts)}})


class Upstream:
    """A scripted upstream: each call takes the next step (a status, an exception, or 'ok')."""

    def __init__(self, steps: list[Any], headers: dict[str, str] | None = None) -> None:
        self.steps = list(steps)
        self.headers = headers or {}
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if step == "ok":
            return _ok(request)
        if isinstance(step, Exception):
            raise step
        # the upstream echoes the input, as some do: it must never reach the client
        return httpx.Response(step, headers=self.headers, json={"error": f"echo {SECRET}"})


class Clock:
    """Monotonic time that only moves when the backend sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def run(upstream: Callable[[httpx.Request], httpx.Response], clock: Clock, **cfg: Any) -> Any:
    config = BackendConfig(
        name="up", type="upstream", base_url="http://upstream.test/v1", model="m", **cfg
    )
    backend = UpstreamBackend(
        config, transport=httpx.MockTransport(upstream), sleep=clock.sleep, clock=clock, rng=0
    )

    async def go() -> Any:
        await backend.start()
        try:
            return await backend.embed([SECRET, "another text"])
        finally:
            await backend.close()

    return asyncio.run(go())


def test_transient_failures_are_retried_until_success():
    up, clock = Upstream([503, 502, httpx.ConnectError("refused"), 504, "ok"]), Clock()
    X, tokens = run(up, clock, max_attempts=5, retry_backoff_s=0.5)
    assert X.shape == (2, DIM) and X.dtype == np.float32 and sum(tokens) == 2
    assert up.calls == 5 and len(clock.sleeps) == 4
    # exponential backoff with jitter in [0.5, 1] of 0.5 * 2^(n-1)
    for n, s in enumerate(clock.sleeps, start=1):
        assert 0.5 * 0.5 * 2 ** (n - 1) <= s <= 0.5 * 2 ** (n - 1)


def test_retries_exhausted_give_one_clear_error_without_the_reply():
    up, clock = Upstream([503]), Clock()
    with pytest.raises(BackendError) as e:
        run(up, clock, max_attempts=3)
    assert up.calls == 3 and len(clock.sleeps) == 2
    msg = str(e.value)
    assert msg == "the upstream embedding service is overloaded (HTTP 503) (3 attempts)"
    assert e.value.status == 503 and e.value.retry_after == 1.0
    assert SECRET not in msg and "echo" not in msg
    up, clock = Upstream([502]), Clock()
    with pytest.raises(BackendError, match=r"returned HTTP 502 \(2 attempts\)") as e:
        run(up, clock, max_attempts=2)
    assert e.value.status == 502
    up, clock = Upstream([httpx.ConnectError("refused")]), Clock()
    with pytest.raises(BackendError, match=r"unreachable \(3 attempts\)"):
        run(up, clock)


@pytest.mark.parametrize("status", [400, 401, 404, 413, 422, 500])
def test_other_errors_are_not_retried(status):
    up, clock = Upstream([status, "ok"]), Clock()
    with pytest.raises(BackendError) as e:
        run(up, clock)
    assert up.calls == 1 and clock.sleeps == []
    assert str(e.value) == f"the upstream embedding service returned HTTP {status}"
    assert e.value.status == 502


def test_timeouts_are_not_retried():
    up, clock = Upstream([httpx.ReadTimeout("slow"), "ok"]), Clock()
    with pytest.raises(BackendError, match="timed out") as e:
        run(up, clock)
    assert up.calls == 1 and e.value.status == 504


def test_retry_after_is_honoured():
    up, clock = Upstream([429, "ok"], headers={"Retry-After": "3"}), Clock()
    X, _ = run(up, clock)
    assert X.shape == (2, DIM) and up.calls == 2
    assert clock.sleeps == [3.0]  # longer than the backoff (0.125 to 0.25 s), so it wins


def test_retry_after_as_an_http_date():
    when = email.utils.formatdate(time.time() + 3600, usegmt=True)
    up, clock = Upstream([503, "ok"], headers={"Retry-After": when}), Clock()
    with pytest.raises(BackendError) as e:  # an hour is past the deadline: no wait at all
        run(up, clock, retry_deadline_s=10.0)
    assert up.calls == 1 and clock.sleeps == []
    assert e.value.status == 503 and e.value.retry_after is not None
    assert 3500 < e.value.retry_after <= 3600


def test_no_attempt_starts_past_the_deadline():
    up, clock = Upstream([503], headers={"Retry-After": "4"}), Clock()
    with pytest.raises(BackendError, match=r"\(3 attempts\)") as e:
        run(up, clock, max_attempts=10, retry_deadline_s=10.0)
    assert clock.sleeps == [4.0, 4.0]  # a third wait would end at 12 s > 10 s
    assert e.value.retry_after == 4.0


def test_backoff_is_bounded():
    config = BackendConfig(name="up", type="upstream", base_url="http://x/v1", model="m")
    b = UpstreamBackend(config, rng=1)
    waits = [b.backoff(n, None) for n in range(1, 40)]
    assert all(0 < w <= MAX_BACKOFF_S for w in waits)
    assert min(waits[-10:]) >= MAX_BACKOFF_S / 2
    assert b.backoff(1, 30.0) == 30.0
