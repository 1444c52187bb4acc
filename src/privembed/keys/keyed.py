"""Keyed noise: the same record with the same content always gets the same noise.

Threat
------
Fresh noise per release is what repeated-release attacks feed on: averaging N releases divides
the noise by sqrt(N), and the variance fingerprint of [F26] reads the concept a Mahalanobis
mechanism protects from the spread of repeated releases. Keyed noise makes a re-release of the
same content bit-identical, so an observer of many releases learns nothing beyond the first.

But noise that repeats across *different* contents is worse than fresh noise: it cancels in
the difference of the two releases, which then reveals the clean difference exactly (whoever
knows one text recovers the other's clean embedding). So the noise is bound to the content
too: an edited note, a different text at the same line number of another file, or a new
embedding model gets independent noise -- and :mod:`privembed.release` charges it as a new
release of that record.

Construction
------------
For secret key ``K`` (>= 128 bits; 256 recommended), a release *context* ``C`` (the mechanism's
:attr:`~privembed.Mechanism.fingerprint`, the embedding model id, the input dimension and the
bit generator), a record id ``r`` typed canonically (:func:`typed_id`: ``int 5`` and ``"5"``
are different records, ``numpy.int64(5)`` and ``5`` the same) and the record's content --
the canonical float32 bytes of its clean vector (:func:`vector_tags`), or for text inputs the
SHA-256 of the exact text and the model id (:func:`text_digests`, :func:`record_tags`)::

    T = HMAC-SHA256(K, "privembed/keyed/v2" || 0x00 || C || 0x00 || typed(r) || 0x00 ||
                       ("v" || float32 bytes  |  "t" || text digest))

HMAC-SHA256 is a PRF, so tags of distinct (context, id, content) triples are independent and
uniform to anyone without ``K``. The ledger stores only :func:`tag_commitment` (SHA-256 of the
tag), which reveals nothing about the content but tells a re-release of the same
(context, id, content) -- free -- from a new one -- charged.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
import stat
import struct
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core import labels
from ..core._validation import DataError, check_choice
from ..core.rng import CounterSource, _verify_kernels

__all__ = [
    "KEY_BYTES",
    "KeyLike",
    "canonical_text",
    "content_ids",
    "key_id",
    "keyed_source",
    "keygen",
    "load_key",
    "record_tags",
    "release_context",
    "resolve_key",
    "tag_commitment",
    "tag_commitments",
    "text_digests",
    "typed_id",
    "vector_digests",
    "vector_tags",
]

KEY_BYTES = 32
_DOMAIN = labels.NOISE_TAG
_STREAM_DOMAIN = labels.NOISE_STREAM
_VEC_DOMAIN = labels.CONTENT_VECTOR
_TEXT_DOMAIN = labels.CONTENT_TEXT
_CONTENT_ID = labels.CONTENT_ID

KeyLike = bytes | bytearray | str | os.PathLike[str]


def _check_key(key: Any) -> bytes:
    if not isinstance(key, bytes | bytearray):
        raise TypeError(
            f"key must be bytes, got key of type {type(key).__name__} (load a key file with "
            "privembed.keys.keyed.load_key(path), or pass the path to resolve_key)."
        )
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
    if p.is_dir():
        raise IsADirectoryError(f"key file is a directory: {p}")
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


def resolve_key(key: Any) -> bytes:
    """A key given as bytes, or as the path of a key file (:func:`load_key`).

    Examples
    --------
    >>> len(resolve_key(bytes(32)))
    32
    """
    if isinstance(key, str | os.PathLike):
        return load_key(Path(key))
    return _check_key(key)


def key_id(key: bytes) -> str:
    """A public identifier of a key (first 16 hex digits of a domain-separated SHA-256).

    It names the key in metadata and the ledger without revealing it.
    """
    return hashlib.sha256(labels.KEY_ID + _check_key(key)).hexdigest()[:16]


def typed_id(record_id: Any) -> bytes:
    """Canonical bytes for a record id: type-tagged so ``5`` and ``"5"`` differ.

    Integers of any integer type are the same record (``5``, ``numpy.int64(5)``); floats,
    booleans and ``None`` are refused (a JSON id ``1.0`` is not the record ``1``).

    Examples
    --------
    >>> typed_id(5), typed_id("5"), typed_id(np.int64(5))
    (b'i:5', b's:5', b'i:5')
    >>> typed_id(1.0)
    Traceback (most recent call last):
    ...
    TypeError: record id must be an int or a string, got 1.0 (float).
    """
    kind = type(record_id)
    if kind is str:  # the common cases first: isinstance against numpy's types costs more
        return b"s:" + record_id.encode("utf-8", errors="surrogatepass")
    if kind is int:
        return b"i:" + str(record_id).encode()
    if isinstance(record_id, int | np.integer) and not isinstance(record_id, bool | np.bool_):
        return b"i:" + str(int(record_id)).encode()
    if isinstance(record_id, str | np.str_):
        return b"s:" + str(record_id).encode("utf-8", errors="surrogatepass")
    if isinstance(record_id, bytes | np.bytes_):
        return b"b:" + bytes(record_id)
    raise TypeError(
        f"record id must be an int or a string, got {record_id!r} ({type(record_id).__name__})."
    )


def canonical_text(text: str, *, casefold: bool = False) -> str:
    """Unicode NFKC, whitespace runs collapsed to one space, ends stripped (optionally
    case-folded): the form two texts must share to be "the same text".

    Examples
    --------
    >>> canonical_text("  The\\u00a0patient\\t has  Diabetes ")
    'The patient has Diabetes'
    >>> canonical_text("ﬁne", casefold=True)
    'fine'
    """
    s = " ".join(unicodedata.normalize("NFKC", text).split())
    return s.casefold() if casefold else s


def _canonical_rows(X: Any) -> NDArray[Any]:
    """``X`` as the bytes its content is hashed from: C-contiguous float32 little-endian,
    ``-0.0`` as ``0.0`` (-0.0 + 0.0 == +0.0; arithmetic returns native byte order, so the result
    is made little-endian again: a no-op on little-endian hosts)."""
    A = np.ascontiguousarray(np.asarray(X, dtype="<f4")) + np.float32(0.0)
    return A.astype("<f4", copy=False)


def vector_digests(X: NDArray[Any]) -> list[bytes]:
    """SHA-256 of each row's canonical bytes: float32 little-endian, ``-0.0`` as ``0.0``.

    Two rows get the same digest only if their float32 values are identical.
    """
    A = _canonical_rows(X)
    if A.ndim != 2:
        raise DataError(f"X must be 2-D (n, d), got shape {A.shape}.")
    prefix = _VEC_DOMAIN + str(A.shape[1]).encode() + b"\x00"
    return [hashlib.sha256(prefix + row.tobytes()).digest() for row in A]


def text_digests(texts: Sequence[str], model: str) -> list[bytes]:
    """SHA-256 of (model id, exact text) for each text.

    The *exact* text, not a canonical form: a model may embed two texts that differ only in
    whitespace or case differently (byte-pair tokenisers keep spaces), and two different clean
    vectors must never share noise. Canonical forms decide *identity* (budgets), not content.
    """
    prefix = _TEXT_DOMAIN + model.encode("utf-8") + b"\x00"
    return [
        hashlib.sha256(prefix + t.encode("utf-8", errors="surrogatepass")).digest() for t in texts
    ]


def content_ids(key: bytes, *, texts: Sequence[str] | None = None, X: Any = None) -> list[str]:
    """Record ids derived from content under the key: ``"cid:"`` + 128 bits of
    ``HMAC-SHA256(K, "privembed/content-id/v1" || 0x00 || kind || content)``.

    For texts the content is :func:`canonical_text` with ``casefold=True`` (NFKC, whitespace
    collapsed, case-folded: the server's identity of a text), so case, whitespace and
    compatibility variants of one text are one record -- their exact texts still get
    independent noise, and each variant is charged to that record, so averaging variants
    spends its budget (:mod:`privembed.release.identity` adds, with a ledger, the variants
    that only the model cannot tell apart). For vectors it is the row's canonical float32
    bytes and dimension.

    Changed in issue 39: the canonical form of a text is case-folded. A text with capitals
    has another content id than an earlier privembed gave it; a ledger's releases under the
    earlier id stay on that record (see docs/security.md).

    An unkeyed digest would let whoever holds the store and a list of candidate texts (or clean
    vectors) confirm each one exactly, whatever the noise: the HMAC is a PRF, so without ``K``
    the ids are unrelated to the content. Equal contents still get equal ids, which a release
    refuses as duplicates.

    Examples
    --------
    >>> k = bytes(32)
    >>> a, b, c = content_ids(k, texts=["a  note", "a note", "A NOTE"])
    >>> a == b == c, a.startswith("cid:"), len(a)
    (True, True, 36)
    >>> a == content_ids(bytes(range(32)), texts=["a note"])[0]
    False
    """
    k = _check_key(key)
    if texts is not None:
        prefix = _CONTENT_ID + b"t\x00"
        folded = [canonical_text(t, casefold=True) for t in texts]  # the server's identity form
        return [
            "cid:"
            + hmac.digest(
                k, prefix + canonical_text(t).encode("utf-8", errors="surrogatepass"), "sha256"
            )[:16].hex()
            for t in folded
        ]
    if X is None:
        raise ValueError("give texts or X.")
    A = _canonical_rows(np.atleast_2d(np.asarray(X)))
    if A.ndim != 2:
        raise DataError(f"X must be 2-D (n, d), got shape {A.shape}.")
    mac = _HmacPrefix(k, _CONTENT_ID + b"v\x00" + str(A.shape[1]).encode() + b"\x00")
    return ["cid:" + mac.digest(row.tobytes())[:16].hex() for row in A]


def release_context(
    fingerprint: str, *, model: str | None, input_dim: int, generator: str = "philox"
) -> bytes:
    """The context bytes a tag binds: configuration, model, input dimension, bit generator."""
    generator = check_choice("generator", generator, ("philox", "aes"))
    return (
        bytes.fromhex(fingerprint)
        + b"\x00"
        + (model or "").encode("utf-8")
        + b"\x00"
        + str(int(input_dim)).encode()
        + b"\x00"
        + generator.encode()
    )


def _hmac_pads(key: bytes) -> tuple[bytes, bytes]:
    """HMAC-SHA256's keyed pads (RFC 2104): the key (hashed when longer than the 64-byte
    block, then zero-padded) XOR ipad, and XOR opad."""
    k = _check_key(key)
    if len(k) > 64:
        k = hashlib.sha256(k).digest()
    k = k.ljust(64, b"\x00")
    return bytes(b ^ 0x36 for b in k), bytes(b ^ 0x5C for b in k)


class _HmacPrefix:
    """HMAC-SHA256 of many messages that share a prefix, with hashlib objects directly.

    Equal to ``hmac.new(key, prefix + message, "sha256").digest()`` byte for byte (RFC 2104:
    H((k ^ opad) || H((k ^ ipad) || m))); the keyed pads and the prefix are absorbed once, and
    each message costs two copies of a SHA-256 state instead of the ``hmac`` module's Python
    wrapper calls -- the per-record tag is a large share of the cost of keyed noise.
    """

    def __init__(self, key: bytes, prefix: bytes) -> None:
        ipad, opad = _hmac_pads(key)
        self._inner = hashlib.sha256(ipad)
        self._inner.update(prefix)
        self._outer = hashlib.sha256(opad)

    def digest(self, *parts: Any) -> bytes:
        h = self._inner.copy()
        for part in parts:
            h.update(part)
        o = self._outer.copy()
        o.update(h.digest())
        return o.digest()


def record_tags(
    key: bytes, context: bytes, ids: Sequence[Any], digests: Sequence[bytes]
) -> list[bytes]:
    """The 32-byte tag of every (id, content digest) pair (text inputs; module docstring).

    ``ids`` are record ids, or their :func:`typed_id` bytes.
    """
    if len(ids) != len(digests):
        raise ValueError(f"ids has {len(ids)} entries but digests has {len(digests)}.")
    mac = _HmacPrefix(key, _DOMAIN + context + b"\x00")
    return [
        mac.digest((r if isinstance(r, bytes) else typed_id(r)) + b"\x00t", dg)
        for r, dg in zip(ids, digests, strict=True)
    ]


def vector_tags(key: bytes, context: bytes, ids: Sequence[Any], X: NDArray[Any]) -> list[bytes]:
    """The 32-byte tag of every (id, clean vector) pair: the content is the row's canonical
    float32 bytes themselves (little-endian, ``-0.0`` as ``0.0``), hashed inside the HMAC.

    Equal to ``record_tags`` over those bytes in spirit, one pass over each row instead of a
    separate digest (the cost of keyed noise is dominated by such per-row work).
    """
    A = _canonical_rows(X)
    if A.ndim != 2 or A.shape[0] != len(ids):
        raise ValueError(f"X must be (len(ids), d), got shape {A.shape}.")
    if A.shape[1] == 0:
        raise ValueError(f"X must have at least one column, got shape {A.shape}.")
    if A.shape[0] == 0:
        return []
    if A.shape[0] >= _COMPILED_MIN_ROWS and (hm := _compiled_hmac()) is not None:
        return _compiled_vector_tags(hm, key, context, ids, A)
    return _hashlib_vector_tags(key, context, ids, A)


def _hashlib_vector_tags(
    key: bytes, context: bytes, ids: Sequence[Any], A: NDArray[Any]
) -> list[bytes]:
    mac = _HmacPrefix(key, _DOMAIN + context + b"\x00")
    width = A.shape[1] * 4
    mv = A.data.cast("B")
    return [
        mac.digest(r + b"\x00v", mv[i * width : (i + 1) * width])
        for i, r in enumerate(_typed_bytes(ids))
    ]


#: rows from which a batch's tags are computed by the compiled kernel (when it is loaded)
_COMPILED_MIN_ROWS = 64
_hmac_checked: bool | None = None


def _compiled_hmac() -> Any:
    """The compiled kernels if their HMAC (``privembed.core._jit_kernels.hmac_rows``: libcrypto's
    SHA-256 called without the GIL, so tags scale with the sampling threads) is usable, or None.
    Used only once the compiled noise kernels are loaded, and only if it gives hashlib's bytes
    on a check (keys of every length class, empty and long ids, a ``-0.0``)."""
    global _hmac_checked
    from ..core import _jit

    k = _jit.kernels(0, verify=_verify_kernels)
    if k is None or not getattr(k, "HAVE_HMAC", False) or _hmac_checked is False:
        return None
    if _hmac_checked is None:
        try:
            rng = np.random.default_rng(20261126)
            X = rng.standard_normal((_COMPILED_MIN_ROWS, 5)).astype("<f4")
            X[0, 0] = -0.0
            ids = [b"", b"a", b"\xff" * 300, *(str(i).encode() for i in range(61))]
            A = _canonical_rows(X)  # as vector_tags hashes them
            _hmac_checked = all(
                _compiled_vector_tags(k, key, b"check", ids, A)
                == _hashlib_vector_tags(key, b"check", ids, A)
                for key in (bytes(range(16)), bytes(range(64)), bytes(range(100)))
            )
        except Exception:
            _hmac_checked = False
        if not _hmac_checked:
            return None
    return k


def _compiled_vector_tags(
    k: Any, key: bytes, context: bytes, ids: Sequence[Any], A: NDArray[Any]
) -> list[bytes]:
    ipad, opad = _hmac_pads(key)

    def state(pad: bytes, then: bytes) -> NDArray[np.uint8]:
        ctx = np.zeros(k.SHA_CTX_BYTES, dtype=np.uint8)
        k.sha256_state(np.frombuffer(pad, dtype=np.uint8), np.frombuffer(then, dtype=np.uint8), ctx)
        return ctx

    typed = _typed_bytes(ids)
    n, d = A.shape
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, typed), dtype=np.int64, count=n), out=off[1:])
    out = np.empty((n, 32), dtype=np.uint8)
    k.hmac_rows(
        state(ipad, _DOMAIN + context + b"\x00"),
        state(opad, b""),
        np.frombuffer(b"".join(typed) or b"\x00", dtype=np.uint8),
        off,
        np.frombuffer(b"\x00v", dtype=np.uint8),
        A.view(np.uint8).reshape(n, d * 4),
        out,
    )
    return _Tags(out)


def _typed_bytes(ids: Sequence[Any]) -> Sequence[bytes]:
    """``ids`` as :func:`typed_id` bytes (ids already given as bytes are taken as they are)."""
    if set(map(type, ids)) <= {bytes}:
        return ids  # the release passes typed bytes: one C-level type pass instead of n calls
    return [r if isinstance(r, bytes) else typed_id(r) for r in ids]


@functools.lru_cache(maxsize=8)
def _tag_splitter(n: int) -> struct.Struct:
    return struct.Struct("32s" * n)  # "s" keeps every byte (numpy's "S32" drops trailing NULs)


class _Tags(list[bytes]):
    """The 32-byte tags of a block (a ``list[bytes]``) that keep the (n, 32) array they were
    computed in, so :func:`keyed_source` takes its stream keys from the array instead of
    slicing every tag again (per-record Python work holds the GIL: it is what keeps keyed noise
    from scaling on two threads)."""

    __slots__ = ("rows",)

    def __init__(self, rows: NDArray[np.uint8]) -> None:
        super().__init__(_tag_splitter(rows.shape[0]).unpack(rows.tobytes()) if len(rows) else ())
        self.rows = rows


_COMMITMENT = hashlib.sha256(labels.TAG_COMMITMENT)


def tag_commitment(tag: bytes) -> str:
    """Public commitment to a tag (hex SHA-256, 128 bits): equal iff the noise is equal."""
    h = _COMMITMENT.copy()
    h.update(tag)
    return h.hexdigest()[:32]


def tag_commitments(tags: Sequence[bytes]) -> list[str]:
    """:func:`tag_commitment` of every tag."""
    base = _COMMITMENT
    out = []
    for t in tags:
        h = base.copy()
        h.update(t)
        out.append(h.hexdigest()[:32])
    return out


def _stream_key(key: bytes) -> bytes:
    return hmac.digest(_check_key(key), _STREAM_DOMAIN, "sha256")[:16]


def keyed_source(key: bytes, tags: Sequence[bytes], *, generator: str = "philox") -> CounterSource:
    """The :class:`~privembed.core.rng.CounterSource` whose row ``i`` is keyed by ``tags[i]``
    (its first 16 bytes, as two little-endian 64-bit words)."""
    n = len(tags)
    if isinstance(tags, _Tags) and tags.rows.shape == (n, 32):
        rows = np.ascontiguousarray(tags.rows[:, :16]).view("<u8")
    else:
        joined = b"".join(tags)
        if len(joined) == 32 * n:  # 32-byte tags: one join, then every first half
            rows = np.frombuffer(joined, dtype="<u8").reshape(n, 4)[:, :2]
        else:
            rows = np.frombuffer(b"".join(t[:16] for t in tags), dtype="<u8").reshape(n, 2)
    return CounterSource(_stream_key(key), rows, generator=generator)
