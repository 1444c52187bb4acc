"""Keyed noise: the same record under the same configuration always gets the same noise.

Fresh noise per release is what repeated-release attacks feed on: averaging N releases divides
the noise by sqrt(N), and the variance fingerprint of [F26] reads the concept a Mahalanobis
mechanism protects from the spread of repeated releases. With keyed noise the noise for a record
is a deterministic function of (secret key, mechanism configuration, record id): re-releasing the
record returns a bit-identical vector, so an observer of many releases learns nothing beyond the
first. A different key, configuration or id gives independent noise.

Construction
------------
For record id ``r``, configuration fingerprint ``F`` (:attr:`Mechanism.fingerprint`, SHA-256 of
the canonical parameters) and secret key ``K`` (256 bits)::

    T = HMAC-SHA256(K, "privembed/keyed/v1" || 0x00 || F || 0x00 || typed(r))

``T`` keys a Philox-4x64 counter-based bit generator (key = T[0:16], counter words 0-1 = T[16:32]);
the j-th draw call a mechanism makes for a block uses counter word 2 = j, so every (record, call)
has its own stream and no per-record state is carried between calls. Record ids are typed before
hashing (``int 5`` and ``"5"`` are different records). Output is independent of how records are
batched or partitioned (a Ray shard, a 4096-row block), which is what makes distributed and
streaming protection reproducible.

HMAC-SHA256 is a PRF, so the per-record Philox keys are indistinguishable from independent
uniform keys to anyone without ``K``. Philox is a statistically strong counter-based generator
(it passes BigCrush) but is not a vetted cipher; ``generator="aes"`` uses an AES-128 counter-mode
generator instead (``randomgen``, extra ``secure``; AES key = T[0:16], counter = call index << 64), at a higher
cost per record.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._optional import require
from ._validation import DataError, check_choice
from .mechanisms.base import NoiseSource

__all__ = [
    "KEY_BYTES",
    "KeyedSource",
    "key_id",
    "keygen",
    "load_key",
    "record_tags",
    "typed_id",
]

KEY_BYTES = 32
_DOMAIN = b"privembed/keyed/v1\x00"


def _check_key(key: Any) -> bytes:
    if not isinstance(key, bytes | bytearray):
        raise TypeError(f"key must be bytes, got key of type {type(key).__name__}.")
    if len(key) < 16:
        raise ValueError(
            f"key must be at least 16 bytes (256 bits recommended), got {len(key)} bytes."
        )
    return bytes(key)


def keygen(path: str | Path, *, overwrite: bool = False) -> str:
    """Write a new 256-bit key (hex) to ``path`` with 0600 permissions; return its key id.

    The file is created exclusively (never world-readable, not even briefly).
    """
    p = Path(path)
    if p.exists() and not overwrite:
        raise FileExistsError(f"key file already exists: {p} (refusing to overwrite a key).")
    key = secrets.token_bytes(KEY_BYTES)
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(key.hex() + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, p)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise
    return key_id(key)


def load_key(path: str | Path) -> bytes:
    """Read a key file written by :func:`keygen`; refuse one readable by group or others."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"key file not found: {p}")
    mode = stat.S_IMODE(p.stat().st_mode)
    if mode & 0o077:
        raise PermissionError(
            f"key file {p} has permissions {oct(mode)}; it must not be readable by group or "
            f"others (run: chmod 600 {p})."
        )
    text = p.read_text(encoding="ascii", errors="replace").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise DataError(f"key file {p} is not a hex-encoded key.") from None
    return _check_key(key)


def key_id(key: bytes) -> str:
    """A public identifier of a key (first 16 hex digits of a domain-separated SHA-256).

    It names the key in metadata and the ledger without revealing it.
    """
    return hashlib.sha256(b"privembed/key-id\x00" + _check_key(key)).hexdigest()[:16]


def typed_id(record_id: Any) -> bytes:
    """Canonical bytes for a record id: type-tagged so ``5`` and ``"5"`` differ.

    Examples
    --------
    >>> typed_id(5), typed_id("5"), typed_id(np.int64(5))
    (b'i:5', b's:5', b'i:5')
    """
    if isinstance(record_id, bool | np.bool_):
        raise TypeError(f"record id must be an int, str or bytes, got {record_id!r}.")
    if isinstance(record_id, int | np.integer):
        return b"i:" + str(int(record_id)).encode()
    if isinstance(record_id, str | np.str_):
        return b"s:" + str(record_id).encode("utf-8")
    if isinstance(record_id, bytes | np.bytes_):
        return b"b:" + bytes(record_id)
    raise TypeError(f"record id must be an int, str or bytes, got {record_id!r}.")


def record_tags(key: bytes, fingerprint: str, ids: Sequence[Any]) -> list[bytes]:
    """The 32-byte HMAC tag of every record (see the module docstring)."""
    k = _check_key(key)
    prefix = _DOMAIN + bytes.fromhex(fingerprint) + b"\x00"
    return [hmac.digest(k, prefix + typed_id(r), "sha256") for r in ids]


class KeyedSource(NoiseSource):
    """A :class:`NoiseSource` whose row ``i`` is a deterministic function of ``tags[i]``.

    Each call (normal / uniform / gamma) is the next call index ``j``; row ``i`` of call ``j``
    is drawn from the generator keyed by ``tags[i]`` with counter word 2 set to ``j``.
    """

    def __init__(self, tags: Sequence[bytes], *, generator: str = "philox") -> None:
        self.generator = check_choice("generator", generator, ("philox", "aes"))
        self._n = len(tags)
        self._tags = list(tags)
        self._call = 0
        if self.generator == "philox":
            raw = np.frombuffer(b"".join(tags), dtype="<u8").reshape(len(tags), 4)
            self._key_arr = np.ascontiguousarray(raw[:, :2]).astype(np.uint64)
            self._ctr_arr = np.zeros((len(tags), 4), dtype=np.uint64)
            self._ctr_arr[:, :2] = raw[:, 2:]
            self._bg = np.random.Philox(key=0)
            self._gen = np.random.Generator(self._bg)
            self._state = self._bg.state
        else:
            self._rg = require("randomgen", "secure", purpose="AES counter-mode keyed noise")

    def _rows(self) -> Any:
        """Yield a generator positioned at (row, call) for each row in order."""
        j = self._call
        self._call += 1
        if self.generator == "philox":
            st = self._state
            inner = st["state"]
            st["buffer_pos"] = 4
            st["has_uint32"] = 0
            self._ctr_arr[:, 2] = j
            for key_row, ctr_row in zip(self._key_arr, self._ctr_arr, strict=True):
                inner["key"] = key_row
                inner["counter"] = ctr_row
                self._bg.state = st
                yield self._gen
        else:
            for t in self._tags:
                # AES-128 key from the tag; the 128-bit counter's high word is the call index
                bg = self._rg.AESCounter(key=int.from_bytes(t[:16], "little"), counter=j << 64)
                yield np.random.Generator(bg)

    def normal(self, n: int, k: int) -> NDArray[np.float64]:
        self._check_n(n)
        out = np.empty((n, k))
        for i, g in enumerate(self._rows()):
            out[i] = g.standard_normal(k)
        return out

    def uniform(self, n: int, k: int) -> NDArray[np.float64]:
        self._check_n(n)
        out = np.empty((n, k))
        for i, g in enumerate(self._rows()):
            out[i] = g.random(k)
        return out

    def gamma(self, shape: float, n: int) -> NDArray[np.float64]:
        self._check_n(n)
        out = np.empty(n)
        for i, g in enumerate(self._rows()):
            out[i] = g.standard_gamma(shape)
        return out

    def _check_n(self, n: int) -> None:
        if n != self._n:
            raise ValueError(f"keyed source has {self._n} rows, asked for n={n}.")
