r"""Sealed payloads: a record's exact vector (and text, metadata) under AES-256-GCM.

Threat
------
A vector store outside the trust boundary holds, for each record, its protected vector (what it
searches) and a *payload*: the record's exact embedding, optionally its text and metadata,
encrypted so that only the holder of the user's privembed key can read it. The key holder
fetches candidates by protected similarity, opens their payloads inside its own process and
re-ranks them exactly ("Private retrieval" in DESIGN.md). The store must learn nothing from a
payload beyond its length, and must not be able to make the key holder accept a payload that
was altered, truncated, or moved from another record or collection.

Construction
------------
* **Keys.** From the user's key ``K`` (the privembed key file, :func:`privembed.keys.keyed.load_key`)
  ``M = HKDF-SHA256(K, salt="privembed/payload", info="privembed/payload/v1")``; per collection
  ``C``, the data key ``K_C = HMAC-SHA256(M, "collection" || 0x00 || C)`` (256 bits). The noise
  keys of :mod:`privembed.keys.keyed` use HMAC(K, "privembed/keyed/...") directly, so payload keys and
  noise keys are independent PRF outputs of ``K`` (different domains). A key per collection
  keeps the 2^32-messages-per-key bound of random 96-bit nonces per collection.
* **Encryption.** AES-256-GCM with a fresh random 96-bit nonce from the OS for every seal (never
  derived from the content: encrypting the same record twice gives unrelated ciphertexts, so
  there is no deterministic encryption to compare). Associated data: a domain string, the
  collection, the canonical typed record id (:func:`privembed.keys.keyed.typed_id`: ``5`` and
  ``"5"`` differ) and the payload's header, so a payload only opens for the record and
  collection it was sealed for.
* **Diagnosis.** GCM's tag failure cannot say *why* it failed. The header therefore carries two
  4-byte checks: ``HMAC(M, "key-check")`` (the same for every payload of a key: says "wrong key"
  with certainty 1 - 2^-32) and ``HMAC(K_C, "binding" || record)`` (says "this payload belongs to
  another record or collection"). Both are keyed PRF outputs: without ``K`` they reveal nothing
  about the record, and the store already knows which record a payload sits beside.

* **Versions.** A payload names the release it belongs to: 128 bits of SHA-256 of the
  protected vector it was sealed beside (:func:`release_digest`; the ledger records the same
  digest of every release), authenticated with the rest of the header. A store that puts an
  old payload back beside a newer vector of the record (a rollback of the payload) is refused
  (:meth:`PayloadCodec.open` ``release=``, cause ``"stale"``); a rollback of both the vector and
  the payload is caught against the key holder's ledger, which knows each record's latest
  release (:class:`privembed.integrations.ProtectedCollection` with a ledger).

Format (version 2, little-endian)::

    offset  size  field
    0       3     magic b"PEP"
    3       1     version = 2
    4       1     flags: bit 0 float16 vector (else float32), bit 1 text, bit 2 metadata,
                  bit 3 zero padding
    5       4     key check
    9       4     binding check
    13      4     plaintext length
    17      12    nonce
    29      16    release (digest of the protected vector; zeros: not bound to one)
    45      n+16  AES-256-GCM(plaintext) || tag
    plaintext = u32 d || vector (d float32/float16) [|| u32 len || UTF-8 text]
                [|| u32 len || metadata as canonical JSON] [|| zero bytes]

Version 1 payloads (no release field) still open; they are reported as unversioned.

Overhead: 61 bytes + 4 per field. The length of a payload is the one thing it shows, and it
would give away the length of the text and metadata; by default every plaintext is therefore
padded with Padmé (:func:`padded_length`: at most 12% larger, and a length of L bytes reveals
only O(log log L) bits), or to a multiple of ``pad_to`` bytes, or not at all (``pad_to=0``).
A 384-d float32 vector alone seals to 1,661 bytes (unpadded: 1,601; float16: 861).

Examples
--------
>>> codec = PayloadCodec(bytes(range(32)))
>>> x = np.array([0.6, 0.8], dtype=np.float32)
>>> blob = codec.seal(x, record_id="doc-1", collection="notes", text="hello")
>>> len(blob), codec.open(blob, record_id="doc-1", collection="notes").text
(83, 'hello')
>>> codec.open(blob, record_id="doc-2", collection="notes")
Traceback (most recent call last):
...
privembed.keys.payload.PayloadError: payload does not belong to record 'doc-2' in collection 'notes' (it was sealed for another record or collection; the store swapped or misplaced it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core import labels
from ..core._optional import require
from ..core._validation import DataError, check_choice, check_int
from .keyed import load_key, typed_id

__all__ = [
    "FORMAT_VERSION",
    "OpenedBatch",
    "Payload",
    "PayloadCodec",
    "PayloadError",
    "open",
    "padded_length",
    "payload_size",
    "release_digest",
    "seal",
]

FORMAT_VERSION = 2
_MAGIC = b"PEP"
# magic, version, flags, key check, binding, length, nonce (version 1 ends here), release
_HEADER_V1 = struct.Struct("<3sBB4s4sI12s")
_HEADER = struct.Struct("<3sBB4s4sI12s16s")
_NO_RELEASE = bytes(16)
_TAG = 16
_F16, _TEXT, _META, _PAD = 1, 2, 4, 8
_KNOWN_FLAGS = _F16 | _TEXT | _META | _PAD
_AD_DOMAIN = labels.PAYLOAD_AD
_U32 = struct.Struct("<I")
_DTYPES: dict[str, np.dtype[Any]] = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2")}


class PayloadError(DataError):
    """A payload that cannot be opened; ``cause`` says why.

    ``cause`` is one of ``"format"`` (not a privembed payload, or an unknown version),
    ``"truncated"``, ``"wrong-key"``, ``"wrong-record"`` (sealed for another record or
    collection), ``"tampered"`` (the authentication tag does not verify) and ``"stale"`` (it
    belongs to another release of the record than the one expected: a rollback).
    """

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class Payload:
    """An opened payload.

    Attributes
    ----------
    vector : ndarray of float32, shape (d,)
        The exact embedding (float16 payloads are widened to float32).
    text : str or None
    metadata : dict or None
    release : bytes or None
        The 16-byte :func:`release_digest` of the protected vector it was sealed beside
        (``None``: a version-1 payload, or one sealed without a release).
    """

    vector: NDArray[np.float32]
    text: str | None = None
    metadata: dict[str, Any] | None = None
    release: bytes | None = None


def release_digest(protected: Any) -> bytes:
    """128 bits of SHA-256 of a protected vector's bytes (C order, its own dtype): the release a
    payload belongs to -- the same digest the ledger records as each release's output digest.

    Examples
    --------
    >>> release_digest(np.array([0.6, 0.8], dtype=np.float32)).hex()[:8]
    '9d2c143d'
    """
    row = np.ascontiguousarray(protected)
    if row.ndim != 1:
        raise DataError(f"a protected vector must be 1-D, got shape {row.shape}.")
    return hashlib.sha256(row.data.cast("B")).digest()[:16]


def padded_length(n: int, pad_to: int | str = "padme") -> int:
    """The plaintext length ``n`` after padding.

    ``"padme"`` (Nikitin et al., PETS 2019, "Reducing metadata leakage from encrypted files and
    communication with PURBs"): keep the top ``floor(log2 floor(log2 n)) + 1`` bits of ``n`` and
    round the rest up, so at most 11.7% is added and ``n`` shows only O(log log n) bits. An int
    ``m > 0``: the next multiple of ``m``. ``0``: no padding.

    Examples
    --------
    >>> [padded_length(n) for n in (100, 1540, 1700, 4000)]
    [104, 1600, 1728, 4096]
    >>> padded_length(1541, 512), padded_length(1541, 0)
    (2048, 1541)
    """
    if isinstance(pad_to, str):
        if pad_to != "padme":
            raise ValueError(f"pad_to must be 'padme' or an int >= 0, got pad_to={pad_to!r}.")
        if n < 2:
            return n
        e = n.bit_length() - 1
        s = e.bit_length()  # floor(log2 e) + 1
        mask = (1 << max(e - s, 0)) - 1
        return (n + mask) & ~mask
    m = check_int("pad_to", pad_to, ge=0)
    return n if m == 0 or n % m == 0 else n + m - n % m


def payload_size(
    d: int,
    *,
    dtype: str = "float32",
    text: str | None = None,
    metadata: Any = None,
    pad_to: int | str = "padme",
) -> int:
    """Bytes of a sealed payload for a ``d``-dimensional vector (and the given text/metadata).

    Examples
    --------
    >>> payload_size(384), payload_size(384, dtype="float16"), payload_size(384, pad_to=0)
    (1661, 861, 1601)
    """
    n = 4 + d * _DTYPES[check_choice("dtype", dtype, tuple(_DTYPES))].itemsize
    if text is not None:
        n += 4 + len(text.encode("utf-8"))
    if metadata is not None:
        n += 4 + len(_canonical_json(metadata))
    return _HEADER.size + _TAG + padded_length(n, pad_to)


def _canonical_json(metadata: Any) -> bytes:
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a dict, got metadata of type {type(metadata).__name__}.")
    try:
        return json.dumps(
            dict(metadata),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        ).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise TypeError(f"metadata must be JSON-serialisable: {exc}.") from None


def _describe(record_id: Any, collection: str) -> str:
    return f"record {record_id!r} in collection {collection!r}"


class PayloadCodec:
    """Seal and open payloads under one user key.

    Parameters
    ----------
    key : bytes
        The user's privembed key (at least 16 bytes; :func:`privembed.keys.keyed.load_key`). Only
        derived keys are kept.
    dtype : {"float32", "float16"}, default "float32"
        How :meth:`seal` stores vectors. :meth:`open` reads either.
    pad_to : "padme" or int, default "padme"
        How plaintexts are padded with zeros so that payload lengths do not reveal text or
        metadata lengths (:func:`padded_length`): Padmé (at most 12% larger, O(log log L)
        bits of the length shown), a multiple of this many bytes, or 0 for no padding.

    Notes
    -----
    Needs the ``cryptography`` package (extra ``secure``). Thread-safe: the only state is the
    derived keys and a cache of AES-GCM objects per collection.
    """

    def __init__(self, key: bytes, *, dtype: str = "float32", pad_to: int | str = "padme") -> None:
        if not isinstance(key, bytes | bytearray):
            raise TypeError(f"key must be bytes, got key of type {type(key).__name__}.")
        if len(key) < 16:
            raise ValueError(f"key must be at least 16 bytes, got {len(key)} bytes.")
        self.dtype = check_choice("dtype", dtype, tuple(_DTYPES))
        padded_length(1, pad_to)  # checks pad_to
        self.pad_to: int | str = pad_to
        aead = require("cryptography.hazmat.primitives.ciphers.aead", "secure", purpose="payloads")
        hkdf = require("cryptography.hazmat.primitives.kdf.hkdf", "secure", purpose="payloads")
        hashes = require("cryptography.hazmat.primitives.hashes", "secure", purpose="payloads")
        self._aesgcm = aead.AESGCM
        self._master = hkdf.HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=labels.PAYLOAD_HKDF_SALT,
            info=labels.PAYLOAD_HKDF_INFO,
        ).derive(bytes(key))
        self._key_check = hmac.digest(self._master, b"key-check", "sha256")[:4]
        self._collections: dict[str, tuple[Any, bytes]] = {}

    @classmethod
    def from_key_file(
        cls, path: str | Path, *, dtype: str = "float32", pad_to: int | str = "padme"
    ) -> PayloadCodec:
        """A codec for the key in a privembed key file (:func:`privembed.keys.keyed.keygen`)."""
        return cls(load_key(path), dtype=dtype, pad_to=pad_to)

    @property
    def key_check(self) -> str:
        """Hex of the 4-byte key check every payload of this key carries."""
        return self._key_check.hex()

    def __repr__(self) -> str:
        return f"PayloadCodec(key_check={self.key_check!r}, dtype={self.dtype!r})"

    # ---- keys ------------------------------------------------------------------------------

    def _collection(self, collection: str) -> tuple[Any, bytes]:
        got = self._collections.get(collection)
        if got is None:
            if not isinstance(collection, str) or not collection:
                raise TypeError(
                    f"collection must be a non-empty str, got collection={collection!r}."
                )
            k = hmac.digest(self._master, b"collection\x00" + collection.encode("utf-8"), "sha256")
            got = (self._aesgcm(k), k)
            self._collections[collection] = got
        return got

    @staticmethod
    def _ad_collection(collection: str) -> bytes:
        """The first part of a payload's associated data: the domain and the collection."""
        c = collection.encode("utf-8")
        return _AD_DOMAIN + _U32.pack(len(c)) + c

    @staticmethod
    def _ad_record(record_id: Any, collection: str, *, prefix: bytes | None = None) -> bytes:
        """A payload's associated data without its header: domain, collection, typed record id
        (``prefix``: :meth:`_ad_collection` of ``collection``, when the caller has it)."""
        r = typed_id(record_id)
        if prefix is None:
            prefix = PayloadCodec._ad_collection(collection)
        return prefix + _U32.pack(len(r)) + r

    # ---- seal ------------------------------------------------------------------------------

    def seal(
        self,
        vector: Any,
        *,
        record_id: Any,
        collection: str,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        release: bytes | None = None,
    ) -> bytes:
        """Encrypt one record's exact vector (and text, metadata) for ``(collection, record_id)``.

        Parameters
        ----------
        vector : array_like, shape (d,)
            Finite values (float16 payloads: within float16's range).
        record_id : int or str
            The id the record has in the store (typed: ``5`` and ``"5"`` differ).
        collection : str
        text : str, optional
        metadata : dict, optional
            JSON-serialisable (stored as canonical JSON).
        release : bytes, optional
            The 16-byte :func:`release_digest` of the protected vector this payload is stored
            beside: the release it belongs to.

        Returns
        -------
        bytes
            The payload (:func:`payload_size` bytes). Fresh random nonce: sealing the same
            record twice gives different bytes.
        """
        aes, ck = self._collection(collection)
        v = np.asarray(vector)
        if v.ndim != 1 or v.size == 0 or not np.issubdtype(v.dtype, np.number):
            raise DataError(f"vector must be a non-empty 1-D numeric array, got shape {v.shape}.")
        with np.errstate(over="ignore", invalid="ignore"):  # reported just below
            stored = v.astype(_DTYPES[self.dtype])
        if not np.isfinite(stored).all():
            what = " (outside float16's range?)" if np.isfinite(v).all() else ""
            raise DataError(
                f"vector of {_describe(record_id, collection)} has non-finite values{what}."
            )
        flags = _F16 if self.dtype == "float16" else 0
        parts = [_U32.pack(v.size), stored.tobytes()]
        if text is not None:
            if not isinstance(text, str):
                raise TypeError(f"text must be a str, got text of type {type(text).__name__}.")
            b = text.encode("utf-8")
            parts += [_U32.pack(len(b)), b]
            flags |= _TEXT
        if metadata is not None:
            b = _canonical_json(metadata)
            parts += [_U32.pack(len(b)), b]
            flags |= _META
        plaintext = b"".join(parts)
        target = padded_length(len(plaintext), self.pad_to)
        if target > len(plaintext):
            plaintext += bytes(target - len(plaintext))
            flags |= _PAD
        if release is None:
            release = _NO_RELEASE
        elif not isinstance(release, bytes | bytearray) or len(release) != 16:
            raise TypeError(f"release must be 16 bytes (release_digest), got {release!r}.")
        ad_record = self._ad_record(record_id, collection)
        binding = hmac.digest(ck, b"binding\x00" + ad_record, "sha256")[:4]
        nonce = os.urandom(12)
        header = _HEADER.pack(
            _MAGIC,
            FORMAT_VERSION,
            flags,
            self._key_check,
            binding,
            len(plaintext),
            nonce,
            bytes(release),
        )
        return header + aes.encrypt(nonce, plaintext, ad_record + header)

    def seal_many(
        self,
        X: Any,
        *,
        ids: Sequence[Any],
        collection: str,
        texts: Sequence[str | None] | None = None,
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        releases: Sequence[bytes | None] | None = None,
    ) -> list[bytes]:
        """:meth:`seal` for each row of ``X`` (shape (n, d)) with its id, text, metadata and
        release."""
        A = np.asarray(X)
        if A.ndim != 2:
            raise DataError(f"X must be 2-D (n, d), got shape {A.shape}.")
        n = A.shape[0]
        for name, seq in (
            ("ids", ids),
            ("texts", texts),
            ("metadatas", metadatas),
            ("releases", releases),
        ):
            if seq is not None and len(seq) != n:
                raise DataError(f"{name} has {len(seq)} entries but X has {n} rows.")
        return [
            self.seal(
                A[i],
                record_id=ids[i],
                collection=collection,
                text=None if texts is None else texts[i],
                metadata=None if metadatas is None else metadatas[i],
                release=None if releases is None else releases[i],
            )
            for i in range(n)
        ]

    # ---- open ------------------------------------------------------------------------------

    def open(
        self, payload: bytes, *, record_id: Any, collection: str, release: bytes | None = None
    ) -> Payload:
        """Authenticate and decrypt a payload sealed for ``(collection, record_id)``.

        ``release``: the :func:`release_digest` of the protected vector the store returned
        beside this payload (or the record's latest release in the ledger); a payload of
        another release of the record is refused. Unversioned payloads (version 1, or sealed
        without a release) are refused only if a release is asked for.

        Raises
        ------
        PayloadError
            One line naming the cause (:attr:`PayloadError.cause`): not a payload / unknown
            version, truncated, wrong key, sealed for another record or collection, tampered,
            from another release of the record (stale).
        TypeError
            ``payload`` is not bytes.
        """
        where = _describe(record_id, collection)
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise TypeError(f"payload of {where} must be bytes, got {type(payload).__name__}.")
        data = bytes(payload)
        if len(data) < 4 or data[:3] != _MAGIC:
            if not data:
                raise PayloadError(f"payload of {where} is missing (empty).", cause="truncated")
            raise PayloadError(f"payload of {where} is not a privembed payload.", cause="format")
        if data[3] not in (1, FORMAT_VERSION):
            raise PayloadError(
                f"payload of {where} has format version {data[3]}; this privembed reads "
                f"versions 1 and {FORMAT_VERSION}.",
                cause="format",
            )
        header = _HEADER if data[3] == FORMAT_VERSION else _HEADER_V1
        if len(data) < header.size + _TAG:
            raise PayloadError(
                f"payload of {where} is truncated ({len(data)} bytes, a header alone is "
                f"{header.size + _TAG}).",
                cause="truncated",
            )
        fields = header.unpack_from(data)
        _, _, flags, key_check, binding, length, nonce = fields[:7]
        sealed_release = fields[7] if len(fields) > 7 and fields[7] != _NO_RELEASE else None
        if not hmac.compare_digest(key_check, self._key_check):
            raise PayloadError(
                f"payload of {where} was sealed under another key (key check {key_check.hex()}, "
                f"this key {self.key_check}): wrong key file.",
                cause="wrong-key",
            )
        aes, ck = self._collection(collection)
        ad_record = self._ad_record(record_id, collection)
        if not hmac.compare_digest(
            binding, hmac.digest(ck, b"binding\x00" + ad_record, "sha256")[:4]
        ):
            raise PayloadError(
                f"payload does not belong to {where} (it was sealed for another record or "
                "collection; the store swapped or misplaced it).",
                cause="wrong-record",
            )
        expected = header.size + length + _TAG
        if len(data) != expected:
            word = "truncated" if len(data) < expected else "longer than its header says"
            raise PayloadError(
                f"payload of {where} is {word} ({len(data)} bytes, expected {expected}).",
                cause="truncated" if len(data) < expected else "tampered",
            )
        try:
            plaintext = aes.decrypt(nonce, data[header.size :], ad_record + data[: header.size])
        except Exception:  # cryptography.exceptions.InvalidTag
            raise PayloadError(
                f"payload of {where} failed authentication: it was tampered with or corrupted; "
                "refusing to decrypt.",
                cause="tampered",
            ) from None
        # the release field is authenticated (it is part of the header, hence of the AD)
        if release is not None and sealed_release != bytes(release):
            shown = "no release" if sealed_release is None else sealed_release.hex()[:12]
            raise PayloadError(
                f"payload of {where} belongs to another release of the record ({shown}, "
                f"expected {bytes(release).hex()[:12]}): the store holds an old payload "
                "(rolled back or replayed); refusing it.",
                cause="stale",
            )
        opened = self._parse(plaintext, flags, where)
        return Payload(opened.vector, opened.text, opened.metadata, sealed_release)

    @staticmethod
    def _parse(plaintext: bytes | bytearray, flags: int, where: str) -> Payload:
        # authenticated content: a malformed body means a writer bug, not an attack
        if flags & ~_KNOWN_FLAGS:
            raise PayloadError(f"payload of {where} has unknown flags {flags:#x}.", cause="format")
        dt = _DTYPES["float16" if flags & _F16 else "float32"]
        try:
            (d,) = _U32.unpack_from(plaintext, 0)
            pos = 4 + d * dt.itemsize
            vector = np.frombuffer(plaintext, dtype=dt, count=d, offset=4).astype(np.float32)
            text = meta = None
            if flags & _TEXT:
                (n,) = _U32.unpack_from(plaintext, pos)
                text = plaintext[pos + 4 : pos + 4 + n].decode("utf-8")
                pos += 4 + n
            if flags & _META:
                (n,) = _U32.unpack_from(plaintext, pos)
                meta = json.loads(plaintext[pos + 4 : pos + 4 + n].decode("utf-8"))
                pos += 4 + n
        except (struct.error, ValueError) as exc:
            raise PayloadError(
                f"payload of {where} has a malformed body ({exc}).", cause="format"
            ) from None
        if flags & _PAD and not any(plaintext[pos:]):
            pos = len(plaintext)
        if pos != len(plaintext):
            raise PayloadError(
                f"payload of {where} has {len(plaintext) - pos} stray bytes.", cause="format"
            )
        return Payload(vector, text, meta)

    def open_many(
        self,
        payloads: Sequence[bytes],
        *,
        ids: Sequence[Any],
        collection: str,
        releases: Sequence[bytes | None] | None = None,
    ) -> list[Payload]:
        """:meth:`open` for each payload with its id (and expected release; the first failure
        raises)."""
        if len(payloads) != len(ids):
            raise DataError(f"payloads has {len(payloads)} entries but ids has {len(ids)}.")
        if releases is not None and len(releases) != len(ids):
            raise DataError(f"releases has {len(releases)} entries but ids has {len(ids)}.")
        rel = [None] * len(ids) if releases is None else list(releases)
        return [
            self.open(p, record_id=r, collection=collection, release=v)
            for p, r, v in zip(payloads, ids, rel, strict=True)
        ]

    def vectors(
        self, payloads: Sequence[bytes], *, ids: Sequence[Any], collection: str
    ) -> NDArray[np.float32]:
        """The exact vectors of the payloads, stacked (n, d) float32: what a re-rank needs
        (:meth:`open_batch`)."""
        return self.open_batch(payloads, ids=ids, collection=collection).vectors

    def open_batch(
        self, payloads: Sequence[bytes], *, ids: Sequence[Any], collection: str
    ) -> OpenedBatch:
        """Authenticate and decrypt many payloads at once (:meth:`open_block` of the payloads
        joined into one block)."""
        if len(payloads) != len(ids):
            raise DataError(f"payloads has {len(payloads)} entries but ids has {len(ids)}.")
        for p, rid in zip(payloads, ids, strict=True):
            if not isinstance(p, bytes | bytearray | memoryview):
                where = _describe(rid, collection)
                raise TypeError(f"payload of {where} must be bytes, got {type(p).__name__}.")
        offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in payloads], out=offsets[1:])
        return self.open_block(b"".join(payloads), offsets, ids=ids, collection=collection)

    def open_block(
        self, block: Any, offsets: Any, *, ids: Sequence[Any], collection: str
    ) -> OpenedBatch:
        """Authenticate and decrypt the payloads held back to back in one buffer: payload ``i``
        is ``block[offsets[i]:offsets[i + 1]]``, sealed for ``ids[i]`` (what a re-rank reads
        from a store in one go, :meth:`privembed.integrations.stores.VectorStore.payload_block`).

        The same checks as :meth:`open` decide what is accepted, and every payload is decrypted
        and authenticated on its own, under its own nonce and the AES-GCM tag that binds its
        key, record, collection and header. What is done for the batch at once: the headers are
        parsed as one array (magic, version, flags, key check, lengths), the plaintexts are
        decrypted into one buffer (AES-GCM ``decrypt_into``: no object per payload; the AEAD
        has no batch call, so that call is the one step taken per payload) and the vectors are
        read out of it as one array. The record binding is left to the tag (a payload of
        another record fails authentication), and a payload that fails any check is handed to
        :meth:`open`, which raises the one-line error it raises alone (or opens it: a version-1
        payload). Texts and metadata are parsed only when asked for
        (:meth:`OpenedBatch.payload`). The expected release is not checked here: compare
        :attr:`OpenedBatch.releases`.

        Parameters
        ----------
        block : bytes-like
            The payloads, back to back (an empty slice: the record has no payload).
        offsets : array_like of int, shape (n + 1,)
            Non-decreasing, from 0 to at most ``len(block)``.
        ids : sequence, length n
            The id each payload was sealed for (typed: :func:`~privembed.keys.keyed.typed_id`).
        collection : str

        Raises
        ------
        PayloadError, TypeError
            As :meth:`open`, for the first payload that fails.
        privembed.DataError
            ``offsets`` and ``ids`` do not match, there are no payloads, or they hold vectors
            of different dimensions.
        """
        n = len(ids)
        off = np.asarray(offsets, dtype=np.int64)
        if off.ndim != 1 or off.size != n + 1:
            raise DataError(f"offsets has {off.size} entries but ids has {n} (n + 1 needed).")
        if n == 0:
            raise DataError("payloads must be non-empty.")
        raw = memoryview(block).cast("B")
        if off[0] != 0 or off[-1] > len(raw) or (np.diff(off) < 0).any():
            raise DataError(
                f"offsets must rise from 0 to at most the block's {len(raw)} bytes, got "
                f"{off[0]}..{off[-1]}."
            )
        aes, _ = self._collection(collection)
        ad_prefix = self._ad_collection(collection)
        size = _HEADER.size
        buf = np.frombuffer(raw, dtype=np.uint8)
        start, lens = off[:-1], np.diff(off)
        # every header at once (zeros for a payload too short to hold one: it fails below)
        whole = lens >= size + _TAG
        H = np.zeros((n, size), dtype=np.uint8)
        if whole.any():  # rows of a sliding window: one copy per header, not per byte
            H[whole] = _windows(buf, size)[start[whole]]
        flags = H[:, 4]
        length = np.ascontiguousarray(H[:, 13:17]).view("<u4").ravel().astype(np.int64)
        fast = (
            whole
            & (H[:, :4] == np.frombuffer(_HEADER_PREFIX_V2, np.uint8)).all(axis=1)
            & (H[:, 5:9] == np.frombuffer(self._key_check, np.uint8)).all(axis=1)
            & (lens == size + length + _TAG)
            & (flags & (0xFF ^ _KNOWN_FLAGS) == 0)
        )
        plen = np.where(fast, length, 0)
        pt_off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(plen, out=pt_off[1:])
        plain = bytearray(int(pt_off[-1]))
        out = memoryview(plain)
        decrypt, u32 = aes.decrypt_into, _U32.pack
        rows = np.flatnonzero(fast)
        bounds = np.stack([start, start + size, start + lens, pt_off[:-1], pt_off[1:]], axis=1)
        slow: list[int] = []
        for j, (s, h, e, a, b) in zip(rows.tolist(), bounds[rows].tolist(), strict=True):
            r = typed_id(ids[j])  # a bad id raises open()'s TypeError here as there
            try:  # the ciphertext read in place, the plaintext written in place
                decrypt(raw[s + 17 : s + 29], raw[h:e], ad_prefix + u32(len(r)) + r + raw[s:h],
                        out[a:b])  # fmt: skip
            except Exception:  # InvalidTag: open() below says which check failed
                slow.append(j)
        if slow:
            fast[slow] = False
        # the vector's dimension at the head of each plaintext, read for all at once
        P = np.frombuffer(plain, dtype=np.uint8)
        dims = np.zeros(n, dtype=np.int64)
        has4 = fast & (plen >= 4)
        if has4.any():
            dims[has4] = _windows(P, 4)[pt_off[:-1][has4]].view("<u4").ravel()
        width = np.where(flags & _F16, 2, 4)
        fast &= (dims > 0) & (4 + dims * width <= plen)
        opened: dict[int, Payload] = {}
        for j in np.flatnonzero(~fast).tolist():  # anything unusual goes the one-by-one way
            opened[j] = self.open(bytes(raw[start[j] : start[j] + lens[j]]), record_id=ids[j],
                                  collection=collection)  # fmt: skip
            dims[j] = opened[j].vector.size
        found = np.unique(dims)
        if found.size != 1:
            raise DataError(f"payloads hold vectors of different dimensions {found.tolist()}.")
        dim = int(found[0])
        V = np.empty((n, dim), dtype=np.float32)
        for w, kind in ((4, "<f4"), (2, "<f2")):  # one gather per vector type
            rows = np.flatnonzero(fast & (width == w))
            if rows.size:
                V[rows] = _windows(P, dim * w)[pt_off[:-1][rows] + 4].view(kind)
        for j, got in opened.items():
            V[j] = got.vector
        return OpenedBatch(V, list(ids), collection, plain, pt_off, flags.copy(),
                           np.ascontiguousarray(H[:, 29:45]), opened)  # fmt: skip


def _windows(buf: NDArray[np.uint8], width: int) -> NDArray[np.uint8]:
    """Every ``width``-byte window of ``buf`` as a read-only (len - width + 1, width) view:
    indexing its rows copies ``width`` bytes a row (a gather of byte indices costs one index a
    byte, about 30 times slower for a 1,536-byte vector)."""
    return np.lib.stride_tricks.sliding_window_view(buf, width)


#: the first 4 header bytes of every version-2 payload: magic and version (flags follow)
_HEADER_PREFIX_V2 = _MAGIC + bytes([FORMAT_VERSION])


@dataclass(frozen=True)
class OpenedBatch:
    """Payloads opened by :meth:`PayloadCodec.open_block` (or :meth:`~PayloadCodec.open_batch`).

    Attributes
    ----------
    vectors : ndarray of float32, shape (n, d)
        The exact vectors, in the order given (float16 payloads widened).
    """

    vectors: NDArray[np.float32]
    ids: list[Any] = field(repr=False)
    collection: str
    #: the plaintexts back to back (never changed after opening), their offsets (n + 1) and
    #: each payload's flags
    _plain: bytearray = field(repr=False)
    _pt_off: NDArray[np.int64] = field(repr=False)
    _flags: NDArray[np.uint8] = field(repr=False)
    #: each payload's 16-byte release field, as its header holds it
    _release_rows: NDArray[np.uint8] = field(repr=False)
    #: the payloads open() opened on their own (a version-1 payload ...), by position
    _opened: dict[int, Payload] = field(repr=False)

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def releases(self) -> list[bytes | None]:
        """Each payload's sealed :func:`release_digest` (``None``: sealed without one)."""
        rows = [None if r == _NO_RELEASE else r for r in map(bytes, self._release_rows)]
        for j, got in self._opened.items():
            rows[j] = got.release
        return rows

    def payload(self, i: int) -> Payload:
        """The whole :class:`Payload` of entry ``i``: its text and metadata parsed now, the
        body checked as :meth:`PayloadCodec.open` checks it (a malformed body raises
        :class:`PayloadError`)."""
        got = self._opened.get(i)
        if got is not None:
            return got
        a, b = int(self._pt_off[i]), int(self._pt_off[i + 1])
        where = _describe(self.ids[i], self.collection)
        body = PayloadCodec._parse(self._plain[a:b], int(self._flags[i]), where)
        rel = bytes(self._release_rows[i])
        return Payload(body.vector, body.text, body.metadata, None if rel == _NO_RELEASE else rel)


def seal(
    key: bytes,
    vector: Any,
    *,
    record_id: Any,
    collection: str,
    text: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    dtype: str = "float32",
) -> bytes:
    """One-off :meth:`PayloadCodec.seal` (build a :class:`PayloadCodec` for many records)."""
    return PayloadCodec(key, dtype=dtype).seal(
        vector, record_id=record_id, collection=collection, text=text, metadata=metadata
    )


def open(key: bytes, payload: bytes, *, record_id: Any, collection: str) -> Payload:
    """One-off :meth:`PayloadCodec.open` (build a :class:`PayloadCodec` for many records).

    Named like the builtin on purpose (``payload.open``); import it qualified.
    """
    return PayloadCodec(key).open(payload, record_id=record_id, collection=collection)
