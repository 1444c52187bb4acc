r"""Sealed retrieval: the store holds padded AES-GCM payloads and no vector; the client ranks.

Threat
------
The store (and whoever reads it) must learn nothing about the records' content and nothing
about the queries. In the *sealed* mode ("Choosing a deployment" in DESIGN.md) each record is
stored as its id, the constant public vector :data:`PLACEHOLDER` (the same for every record, so
it carries no information; the stores need a vector) and a sealed payload
(:mod:`privembed.keys.payload`: the exact embedding, optionally its text and metadata, under
AES-256-GCM, padded with Padmé). The key holder fetches every payload, opens them in batches
(:meth:`~privembed.keys.payload.PayloadCodec.open_batch`) and ranks by the exact cosine on its
own side (:class:`SealedIndex`); the store is never asked a similarity question.

What the store holder learns: the number of records, each payload's padded size (Padmé: a
length of L bytes shows O(log log L) bits, so the text lengths within about 12%), the record
ids (chosen by the key holder; content-derived ids are keyed), and when the client fetches --
at every query without a cache, once per cache rebuild with it (:meth:`SealedIndex.save`). A
full fetch reads every record whatever the query, so the access pattern reveals nothing about
the query beyond the fact that one was made. The guarantee is therefore not differential
privacy: it is the secrecy of AES-256-GCM under the key, and holds against every attacker
without the key (:data:`SEALED_GUARANTEE`).

The price is the fetch: :func:`sealed_fetch_bytes` gives it for a corpus of ``n`` records of
dimension ``d``. A large corpus would need a client-side compact index (PQ codes, say) that
points each query to a subset of payloads to fetch; that reveals which records each query
fetches, and it is not built here.

The local cache
---------------
The index built from the decrypted payloads can be kept on disk, encrypted, so that a new
process does not fetch the corpus again: AES-256-GCM under ``HMAC-SHA256(K,
SEALED_INDEX || len(C) || C)`` for the user's key ``K`` and collection ``C``
(:data:`privembed.core.labels.SEALED_INDEX`: independent of the payload and noise keys), in
chunks whose associated data binds the header, the chunk's position and whether it is the
last (no chunk can be dropped, reordered or moved from another cache). The header names the
collection and a :func:`stamp` of the store as it was fetched -- its record count, ids and
the collection's write generation -- and a cache whose stamp is not the store's current one
is stale: rebuilt from the store, never used. A cache that fails authentication is refused
(one line; delete it to rebuild). The file is written atomically (temporary file, rename).

Examples
--------
>>> from privembed.keys.payload import PayloadCodec
>>> codec = PayloadCodec(bytes(range(32)))
>>> X = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
>>> ids = ["a", "b", "c"]
>>> stored = dict(zip(ids, codec.seal_many(X, ids=ids, collection="notes"), strict=True))
>>> index = SealedIndex.fetch(ids, lambda chunk: [stored[i] for i in chunk], codec, "notes")
>>> [(index.ids[i], round(s, 2)) for i, s in index.search([[1.0, 0.1]], k=2)[0]]
[('a', 1.0), ('b', 0.68)]
>>> sealed_fetch_bytes(1000, 384), sealed_fetch_bytes(1000, 384, cached=True)
(1677000, 0)
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core import labels
from ..core._optional import require
from ..core._validation import DataError, check_embeddings, check_int
from ..keys.payload import PayloadCodec, PayloadError, payload_size
from .rerank import MAX_QUERY_BATCH, SEARCH_BATCH_BYTES

__all__ = [
    "FETCH_BATCH",
    "ID_BYTES",
    "PLACEHOLDER",
    "SEALED_GUARANTEE",
    "SEALED_GUARANTEE_TEXT",
    "SealedIndex",
    "cache_key",
    "sealed_batch_size",
    "sealed_fetch_bytes",
    "stamp",
]

#: the vector every record of a sealed collection has in the store: public and constant, so it
#: carries no information (the stores need one; a sealed collection is never searched there)
PLACEHOLDER: tuple[float, ...] = (1.0,)
#: payloads fetched and opened per store call
FETCH_BATCH = 1024
#: bytes that name a record in a response (an id and its framing; evaluation.cost counts with it)
ID_BYTES = 16
#: the guarantee of a sealed collection, as data: not differential privacy
SEALED_GUARANTEE: dict[str, Any] = {
    "kind": "sealed",
    "cipher": "AES-256-GCM",
    "padding": "padded payloads (Padme by default)",
    "differential_privacy": False,
    "store_holds": "sealed payloads and one constant placeholder vector per record",
    "store_learns": [
        "the record count",
        "each payload's padded size",
        "the record ids",
        "when the client fetches (every query, or once per cache rebuild)",
    ],
}
#: one line for humans (``privembed index`` prints it; the collection records it)
SEALED_GUARANTEE_TEXT = (
    "sealed (AES-256-GCM, padded): no vector in the store; it learns the record count and "
    "padded payload sizes, nothing else of the content and nothing of the queries (not "
    "differential privacy)"
)

_MAGIC = b"PESI"
_VERSION = 1
_U32 = struct.Struct("<I")
_TAG = 16
#: plaintext bytes per encrypted chunk of a cache file (AES-GCM calls stay far below 2**31)
_CHUNK = 16 << 20
_UNIT_ROUNDING = 2.0**-24  # float32 unit roundoff


def sealed_fetch_bytes(
    n: int,
    d: int,
    *,
    dtype: str = "float32",
    pad_to: int | str = "padme",
    text_bytes: int = 0,
    cached: bool = False,
) -> int:
    """Bytes one query of a sealed collection fetches: ``n * (payload + ID_BYTES)`` for a full
    fetch, 0 once the client holds the index (``cached``: in memory, or in the local cache).

    ``payload`` is :func:`privembed.keys.payload.payload_size` of a ``d``-dimensional vector
    (``dtype``, ``pad_to``) with a text of ``text_bytes`` UTF-8 bytes (0: none). A process
    that loads the cache still lists the ``n`` ids once to check it is current (about
    ``n * ID_BYTES``).

    Examples
    --------
    >>> sealed_fetch_bytes(10_000, 384), sealed_fetch_bytes(10_000, 384, dtype="float16")
    (16770000, 8770000)
    """
    n = check_int("n", n, ge=0)
    d = check_int("d", d, ge=1)
    text_bytes = check_int("text_bytes", text_bytes, ge=0)
    if cached:
        return 0
    text = "x" * text_bytes if text_bytes else None
    return n * (payload_size(d, dtype=dtype, text=text, pad_to=pad_to) + ID_BYTES)


def sealed_batch_size(n: int) -> int:
    """Queries a sealed search ranks together: as many as keep their scores against all ``n``
    records (and the scan's temporaries, 8 bytes a score) within
    :data:`~privembed.search.rerank.SEARCH_BATCH_BYTES`, at least one and at most
    :data:`~privembed.search.rerank.MAX_QUERY_BATCH`.

    Examples
    --------
    >>> sealed_batch_size(300), sealed_batch_size(1_000_000)
    (1024, 20)
    """
    n = check_int("n", n, ge=0)
    return max(1, min(MAX_QUERY_BATCH, SEARCH_BATCH_BYTES // (8 * max(1, n))))


def stamp(ids: Sequence[str], generation: str | None) -> str:
    """What a cache must match to be current: SHA-256 of the record count, every store id (in
    order) and the collection's write generation (changed by every sealed write).

    Examples
    --------
    >>> stamp(["a", "b"], "g1") == stamp(["a", "b"], "g1") != stamp(["a", "b"], "g2")
    True
    """
    h = hashlib.sha256()
    h.update(struct.pack("<Q", len(ids)))
    for rid in ids:
        raw = rid.encode("utf-8", "surrogatepass")
        h.update(_U32.pack(len(raw)) + raw)
    gen = (generation or "").encode("utf-8")
    h.update(_U32.pack(len(gen)) + gen)
    return h.hexdigest()


def cache_key(key: bytes, collection: str) -> bytes:
    """The key of a collection's local index cache: ``HMAC-SHA256(K, SEALED_INDEX || len(C) ||
    C)`` (independent of the payload keys, which come from an HKDF of ``K``)."""
    c = collection.encode("utf-8")
    return hmac.digest(bytes(key), labels.SEALED_INDEX + _U32.pack(len(c)) + c, "sha256")


def _join(items: Sequence[str | None]) -> tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[Any]]:
    """Optional strings as UTF-8 bytes, offsets (n + 1) and a mask of the present ones."""
    encoded = [b"" if t is None else t.encode("utf-8", "surrogatepass") for t in items]
    off = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=off[1:])
    mask = np.array([t is not None for t in items], dtype=bool)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), off, mask


def _split(raw: NDArray[Any], off: NDArray[Any], mask: NDArray[Any]) -> list[str | None]:
    data = np.asarray(raw, dtype=np.uint8).tobytes()
    bounds = np.asarray(off, dtype=np.int64).tolist()
    if len(bounds) != len(mask) + 1 or bounds[0] != 0 or bounds[-1] != len(data):
        raise ValueError("string offsets do not match their bytes")
    return [
        data[a:b].decode("utf-8", "surrogatepass") if m else None
        for a, b, m in zip(bounds[:-1], bounds[1:], np.asarray(mask).tolist(), strict=True)
    ]


@dataclass(frozen=True, eq=False)
class SealedIndex:
    """The exact index of a sealed collection, built inside the trust boundary from its
    decrypted payloads and kept in memory.

    Attributes
    ----------
    ids : list of str
        The store ids, in the order of the rows (sorted when fetched).
    vectors : ndarray of float32, shape (n, d)
        Each record's exact vector as its payload holds it.
    texts, metadata : list
        Each record's sealed text and metadata (``None``: none sealed).
    """

    ids: list[str]
    vectors: NDArray[np.float32]
    texts: list[str | None]
    metadata: list[dict[str, Any] | None]

    def __post_init__(self) -> None:
        n = len(self.ids)
        if self.vectors.ndim != 2 or self.vectors.shape[0] != n:
            raise DataError(f"vectors must be ({n}, d), got shape {self.vectors.shape}.")
        if len(self.texts) != n or len(self.metadata) != n:
            raise DataError("ids, texts and metadata differ in length.")
        V = self.vectors.astype(np.float64)
        norms = np.sqrt(np.einsum("ij,ij->i", V, V)) if n else np.zeros(0)
        if n and not (norms > 0).all():
            raise DataError(f"record {self.ids[int(np.argmin(norms))]!r} has a zero vector.")
        object.__setattr__(self, "_inv_norms", 1.0 / norms if n else norms)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        """The vectors' dimension (0 for an empty index)."""
        return int(self.vectors.shape[1])

    # ---- building ------------------------------------------------------------------------------
    @classmethod
    def fetch(
        cls,
        ids: Sequence[str],
        payloads: Callable[[list[str]], Sequence[bytes | None]],
        codec: PayloadCodec,
        collection: str,
        *,
        batch: int = FETCH_BATCH,
    ) -> SealedIndex:
        """Fetch every payload (``payloads(chunk)``: one store call per ``batch`` ids, in the
        order given), open each batch together and stack the vectors.

        Raises
        ------
        privembed.keys.payload.PayloadError
            A record without a payload (cause ``"missing"``), or one that does not open: wrong
            key, tampered, truncated, sealed for another record or collection.
        privembed.DataError
            Payloads of different dimensions.
        """
        batch = check_int("batch", batch, ge=1)
        id_list = [str(i) for i in ids]
        n = len(id_list)
        if n == 0:
            return cls([], np.zeros((0, 0), dtype=np.float32), [], [])
        V: NDArray[np.float32] | None = None
        texts: list[str | None] = []
        metas: list[dict[str, Any] | None] = []
        for s in range(0, n, batch):
            chunk = id_list[s : s + batch]
            blobs = list(payloads(chunk))
            missing = [rid for rid, b in zip(chunk, blobs, strict=True) if b is None]
            if missing:
                raise PayloadError(
                    f"record {missing[0]!r} has no payload in sealed collection {collection!r} "
                    f"({len(missing)} of {len(chunk)} records in a batch); the store lost or "
                    "dropped it.",
                    cause="missing",
                )
            opened = codec.open_batch(blobs, ids=chunk, collection=collection)  # type: ignore[arg-type]
            if V is None:
                V = np.empty((n, opened.vectors.shape[1]), dtype=np.float32)
            elif opened.vectors.shape[1] != V.shape[1]:
                raise DataError(
                    f"payloads of sealed collection {collection!r} hold vectors of dimensions "
                    f"{V.shape[1]} and {opened.vectors.shape[1]}."
                )
            V[s : s + len(chunk)] = opened.vectors
            for i in range(len(chunk)):
                p = opened.payload(i)
                texts.append(p.text)
                metas.append(p.metadata)
        assert V is not None
        return cls(id_list, V, texts, metas)

    # ---- searching -----------------------------------------------------------------------------
    def search(self, Q: Any, k: int) -> list[list[tuple[int, float]]]:
        """The ``k`` records of highest cosine for each query, best first: ``(row, cosine)``.

        Exact: a float32 scan keeps every record within twice the scan's rounding bound of
        the k-th best (:math:`4 (d + 3)\\,2^{-24}`; so none of the true top k is lost), and
        those are scored again in float64 (the vector normalised in float64, as the re-rank
        of :meth:`~privembed.integrations.collection.ProtectedCollection.query` does). Ties go
        to the earlier row. Queries are scanned in blocks whose scores stay within
        :data:`privembed.search.rerank.SEARCH_BATCH_BYTES`.
        """
        k = check_int("k", k, ge=1)
        Qa, _ = check_embeddings(Q, name="query", dim=self.dim or None)
        Qa = np.atleast_2d(Qa)
        n = len(self)
        if n == 0:
            return [[] for _ in range(Qa.shape[0])]
        k = min(k, n)
        Qn = Qa.astype(np.float64)
        Qn /= np.linalg.norm(Qn, axis=1, keepdims=True)
        Q32 = Qn.astype(np.float32)
        inv: NDArray[np.float64] = self._inv_norms  # type: ignore[attr-defined]
        inv32 = inv.astype(np.float32)
        tol = 4.0 * (self.dim + 3) * _UNIT_ROUNDING
        step = sealed_batch_size(n)
        out: list[list[tuple[int, float]]] = []
        for s in range(0, Q32.shape[0], step):
            S = (Q32[s : s + step] @ self.vectors.T) * inv32
            kth = np.partition(S, n - k, axis=1)[:, n - k]
            for r in range(S.shape[0]):
                cand = np.flatnonzero(S[r] >= kth[r] - tol)
                exact = (self.vectors[cand].astype(np.float64) @ Qn[s + r]) * inv[cand]
                order = np.lexsort((cand, -exact))[:k]
                out.append([(int(cand[i]), float(exact[i])) for i in order.tolist()])
        return out

    # ---- the local cache -----------------------------------------------------------------------
    def save(self, path: str | Path, *, key: bytes, collection: str, current: str) -> None:
        """Write the index to ``path``, encrypted under :func:`cache_key` and stamped
        ``current`` (:func:`stamp` of the store it was fetched from); atomically."""
        from ..data.io import atomic_output

        ids, ids_off, _ = _join(self.ids)
        texts, texts_off, texts_mask = _join(self.texts)
        metas = [None if m is None else json.dumps(m, sort_keys=True) for m in self.metadata]
        meta, meta_off, meta_mask = _join(metas)
        buf = io.BytesIO()
        np.savez(
            buf, ids=ids, ids_off=ids_off, vectors=self.vectors, texts=texts,
            texts_off=texts_off, texts_mask=texts_mask, meta=meta, meta_off=meta_off,
            meta_mask=meta_mask,
        )  # fmt: skip
        header = _header(collection, current, len(self), self.dim)
        aes = _aesgcm(cache_key(key, collection))
        prefix = os.urandom(8)
        plain = buf.getbuffer()
        chunks = max(1, -(-len(plain) // _CHUNK))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path) as tmp, tmp.open("wb") as fh:
            fh.write(header + prefix)
            for j in range(chunks):
                part = plain[j * _CHUNK : (j + 1) * _CHUNK]
                fh.write(aes.encrypt(prefix + _U32.pack(j), bytes(part),
                                     _chunk_ad(header, j, j == chunks - 1)))  # fmt: skip

    @classmethod
    def load(
        cls, path: str | Path, *, key: bytes, collection: str, current: str
    ) -> SealedIndex | None:
        """The cached index at ``path`` if it is current (its stamp is ``current``); ``None``
        when there is none or it is stale.

        Raises
        ------
        privembed.keys.payload.PayloadError
            The cache fails authentication (tampered, truncated, or sealed under another key
            or for another collection; cause ``"tampered"``): refused, nothing is used.
        """
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        refused = PayloadError(
            f"the sealed index cache {path} failed authentication (tampered, truncated or "
            "made under another key); refusing it -- delete it to rebuild from the store.",
            cause="tampered",
        )
        try:
            head, end = _read_header(data)
        except ValueError:
            raise refused from None
        if head.get("collection") != collection or head.get("stamp") != current:
            return None  # stale (or another collection's): rebuilt from the store
        header, prefix = data[:end], data[end : end + 8]
        aes = _aesgcm(cache_key(key, collection))
        body = memoryview(data)[end + 8 :]
        plain = bytearray()
        j, pos = 0, 0
        while True:
            size = min(_CHUNK + _TAG, len(body) - pos)
            last = pos + size >= len(body)
            if size < _TAG:
                raise refused
            try:
                plain += aes.decrypt(prefix + _U32.pack(j), bytes(body[pos : pos + size]),
                                     _chunk_ad(header, j, last))  # fmt: skip
            except Exception:  # InvalidTag
                raise refused from None
            pos += size
            j += 1
            if last:
                break
        try:
            with np.load(io.BytesIO(bytes(plain)), allow_pickle=False) as z:
                ids = _split(z["ids"], z["ids_off"], np.ones(z["ids_off"].size - 1, dtype=bool))
                texts = _split(z["texts"], z["texts_off"], z["texts_mask"])
                metas = _split(z["meta"], z["meta_off"], z["meta_mask"])
                V = np.array(z["vectors"], dtype=np.float32)
        except (ValueError, KeyError, OSError) as exc:  # authenticated: a writer bug
            raise PayloadError(
                f"the sealed index cache {path} is malformed ({exc}); delete it to rebuild.",
                cause="format",
            ) from None
        if len(ids) != head.get("n") or V.shape != (len(ids), head.get("dim")):
            raise refused
        return cls(
            [str(i) for i in ids],
            V,
            texts,
            [None if m is None else dict(json.loads(m)) for m in metas],
        )


def _header(collection: str, current: str, n: int, dim: int) -> bytes:
    body = json.dumps(
        {"collection": collection, "stamp": current, "n": n, "dim": dim},
        sort_keys=True,
        separators=(",", ":"),
    ).encode("utf-8")
    return _MAGIC + bytes([_VERSION]) + _U32.pack(len(body)) + body


def _read_header(data: bytes) -> tuple[dict[str, Any], int]:
    """The header's fields and where the nonce prefix starts."""
    if len(data) < 9 or data[:4] != _MAGIC or data[4] != _VERSION:
        raise ValueError("not a sealed index cache")
    (size,) = _U32.unpack_from(data, 5)
    end = 9 + size
    if len(data) < end + 8 + _TAG:
        raise ValueError("truncated")
    head = json.loads(data[9:end].decode("utf-8"))
    if not isinstance(head, dict):
        raise ValueError("bad header")
    return head, end


def _chunk_ad(header: bytes, index: int, last: bool) -> bytes:
    """A chunk's associated data: the whole header, its position, whether it is the last."""
    return header + _U32.pack(index) + (b"\x01" if last else b"\x00")


def _aesgcm(key: bytes) -> Any:
    aead = require(
        "cryptography.hazmat.primitives.ciphers.aead", "secure", purpose="the sealed index cache"
    )
    return aead.AESGCM(key)
