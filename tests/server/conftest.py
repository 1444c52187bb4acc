"""Fixtures for the embeddings proxy: a fake upstream, a key, configurations and servers."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from privembed.keys.keyed import keygen, load_key
from privembed.server import config_from_dict, create_app, hash_api_key, running_server

from ._fake_upstream import UPSTREAM_KEY, FakeUpstream, serve_app

FULL_KEY = "pe-full-access-key-for-tests"
LIMITED_KEY = "pe-limited-key-docs-only"
SLOW_KEY = "pe-rate-limited-key"

API_KEYS = [
    {"name": "full", "sha256": hash_api_key(FULL_KEY), "models": ["*"]},
    {"name": "limited", "sha256": hash_api_key(LIMITED_KEY), "models": ["docs"]},
    {
        "name": "slow",
        "sha256": hash_api_key(SLOW_KEY),
        "models": ["docs"],
        "rate_limit": 6,
        "burst": 2,
    },
]

#: d = 64 (the fake upstream); Gaussian at epsilon 60 gives E[cos] ~ 0.43, Laplace at 100 ~ 0.84
MODELS: dict[str, Any] = {
    "docs": {
        "backend": "up",
        "mechanism": "gaussian",
        "params": {"epsilon": 60.0, "delta": 1e-5},
    },
    "docs-laplace": {"backend": "up", "mechanism": "laplace", "params": {"epsilon": 100.0}},
    "queries": {"role": "queries", "documents": "docs"},
    "queries-protected": {"role": "queries", "documents": "docs", "query": "protect"},
    "proj": {
        "backend": "up",
        "mechanism": "projection",
        "params": {"k": 16, "epsilon": 50.0, "delta": 1e-5},
        "dimensions": [8, 16],
    },
    "proj-queries": {"role": "queries", "documents": "proj"},
}


def service_of(handle: Any) -> Any:
    """The running :class:`privembed.server.service.Service` behind a server handle."""
    return handle.server.config.app.state.privembed.service


@pytest.fixture(scope="session")
def server_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    path = tmp_path_factory.mktemp("key") / "serve.key"
    keygen(path)
    return path, load_key(path)


@pytest.fixture(scope="session", autouse=True)
def _upstream_env() -> Iterator[None]:
    old = os.environ.get("FAKE_UPSTREAM_KEY")
    os.environ["FAKE_UPSTREAM_KEY"] = UPSTREAM_KEY
    yield
    if old is None:
        os.environ.pop("FAKE_UPSTREAM_KEY", None)
    else:
        os.environ["FAKE_UPSTREAM_KEY"] = old


def make_config(
    upstream_url: str,
    key_file: Path,
    *,
    server: dict[str, Any] | None = None,
    models: dict[str, Any] | None = None,
    api_keys: list[dict[str, Any]] | None = None,
    backend: dict[str, Any] | None = None,
) -> dict[str, Any]:
    base_server = {
        "key_file": str(key_file),
        "cache_size": 0,  # test the keyed noise itself, not the cache
        "max_inputs": 8,
        "max_input_chars": 200,
        "max_body_bytes": 20_000,
        "max_batch": 32,
        "max_wait_ms": 20.0,
        "max_queue": 256,
        "request_timeout_s": 20.0,
    }
    return {
        "server": {**base_server, **(server or {})},
        "backends": {
            "up": {
                "type": "upstream",
                "base_url": upstream_url + "/v1",
                "model": "fake-embed",
                "api_key_env": "FAKE_UPSTREAM_KEY",
                "timeout_s": 10.0,
                "retry_backoff_s": 0.0,  # retried failures (429, 502-504) wait for nothing
                **(backend or {}),
            }
        },
        "models": MODELS if models is None else models,
        "api_keys": API_KEYS if api_keys is None else api_keys,
    }


class ManualClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


#: the clock of the ``served`` servers' rate limiter (only test_rate_limit moves it)
RATE_CLOCK = ManualClock()


@contextlib.contextmanager
def proxy(
    key_file: Path, *, clock: Any = None, fake: FakeUpstream | None = None, **overrides: Any
) -> Iterator[tuple[Any, FakeUpstream, dict[str, Any]]]:
    """A fake upstream and a privembed server in front of it; yields (handle, fake, raw config)."""
    fake = fake if fake is not None else FakeUpstream()
    with serve_app(fake.app) as up_url:
        raw = make_config(up_url, key_file, **overrides)
        app = create_app(config_from_dict(raw), clock=clock)
        with running_server(app) as handle:
            yield handle, fake, raw


@pytest.fixture(scope="module")
def served(server_key: tuple[Path, bytes]) -> Iterator[tuple[Any, FakeUpstream, dict[str, Any]]]:
    with proxy(server_key[0], clock=RATE_CLOCK) as s:
        yield s


@contextlib.contextmanager
def queued_texts(handle: Any, n: int, backend: str = "up") -> Iterator[threading.Event]:
    """An event set once ``n`` more texts have been queued for ``backend`` by the server.

    Wraps the running batcher's ``enqueue`` (which runs on the server's event loop) while the
    block runs, so a test can wait for requests to be inside the server without polling.
    """
    batcher = handle.server.config.app.state.privembed.service.batchers[backend]
    original = batcher.enqueue
    event, count = threading.Event(), [0]

    def enqueue(payload: Any, size: int | None = None) -> Any:
        future = original(payload, size)
        count[0] += len(payload) if size is None else size
        if count[0] >= n:
            event.set()
        return future

    batcher.enqueue = enqueue
    try:
        yield event
    finally:
        del batcher.enqueue
