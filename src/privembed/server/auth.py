"""API keys (stored as SHA-256, compared by digest) and per-key token-bucket rate limits.

API keys are random 256-bit tokens (:func:`new_api_key`), so a plain SHA-256 is the right hash:
a slow password hash buys nothing against a key that cannot be guessed, and would hand every
client a way to burn server CPU. The configuration holds only the digest; a request's key is
hashed and looked up by digest, so no comparison ever touches the key itself.

Examples
--------
>>> hash_api_key("pe-test")
'e02d551ff26f938622500e5a2f851483b277e23971ffc9857c4757e0b84845f8'
>>> len(new_api_key()), new_api_key().startswith("pe-")
(46, True)
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from collections.abc import Callable, Iterable

from .config import ApiKeyConfig

__all__ = ["KeyRing", "RateLimiter", "hash_api_key", "new_api_key"]

KEY_PREFIX = "pe-"


def hash_api_key(key: str) -> str:
    """Hex SHA-256 of an API key (what goes in ``[[api_keys]] sha256``)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_api_key() -> str:
    """A fresh random API key: ``pe-`` and 43 URL-safe characters (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


class KeyRing:
    """Look up API keys by the SHA-256 of what the client sent."""

    def __init__(self, keys: Iterable[ApiKeyConfig]) -> None:
        self._by_digest = {k.sha256: k for k in keys}

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, presented: str) -> ApiKeyConfig | None:
        """The key entry for ``presented``, or ``None`` if it is not a configured key."""
        return self._by_digest.get(hash_api_key(presented))


class RateLimiter:
    """Token buckets per API key: ``rate_limit`` requests per minute, bursts up to ``burst``.

    Single-threaded by design (used on the server's event loop only).

    Examples
    --------
    >>> t = [0.0]
    >>> rl = RateLimiter(clock=lambda: t[0])
    >>> key = ApiKeyConfig(name="app", sha256="0" * 64, rate_limit=60, burst=2)
    >>> [rl.acquire(key) for _ in range(3)]
    [0.0, 0.0, 1.0]
    >>> t[0] = 1.0
    >>> rl.acquire(key)
    0.0
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock if clock is not None else time.monotonic
        self._buckets: dict[str, tuple[float, float]] = {}

    def acquire(self, key: ApiKeyConfig) -> float:
        """Take one token: 0.0 if allowed, else the seconds until a token is available."""
        if key.rate_limit is None:
            return 0.0
        rate = key.rate_limit / 60.0
        cap = float(key.burst if key.burst is not None else max(1, math.ceil(key.rate_limit)))
        now = float(self._clock())
        tokens, last = self._buckets.get(key.name, (cap, now))
        tokens = min(cap, tokens + (now - last) * rate)
        if tokens >= 1.0:
            self._buckets[key.name] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key.name] = (tokens, now)
        return (1.0 - tokens) / rate
