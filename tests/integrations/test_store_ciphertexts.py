"""What a store holder reads: payloads in the form each store keeps them.

The stores keep a sealed payload base64-encoded under a metadata key, inside their own files
(FAISS: a metadata file beside the index; Chroma and Qdrant: SQLite). A search of the files'
raw bytes for a record's text or vector finds nothing whether or not the payload is encrypted,
since base64 hides both. These tests read the files as the holder would: every base64 run in
them decoded (at each alignment), and every payload the store returns, parsed with the
(public) payload format.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from privembed import get_mechanism
from privembed.attacks.linkage import rate_interval
from privembed.integrations.collection import ProtectedCollection
from privembed.integrations.stores import open_store

from .._reads import holder_reads
from .conftest import KEY, clustered

STORES = ["faiss", "chroma", "qdrant"]
#: the payload format (privembed.keys.payload): 45-byte header, then ciphertext and a 16-byte tag;
#: the plaintext is u32 d, the vector, then u32 length and the text
HEADER, TAG = 45, 16


def _index(store: str, folder: Path, n: int = 40, d: int = 24):
    X = clustered(n, d, seed=11)
    texts = [f"Jane Roe {i} was admitted with acute pancreatitis" for i in range(n)]
    ids = [f"r{i}" for i in range(n)]
    mech = get_mechanism("laplace", epsilon=20.0)
    with ProtectedCollection.open(store, folder, "col", mechanism=mech, key=KEY,
                                  payloads=True) as col:  # fmt: skip
        Y = col.add(ids, X, texts=texts)
    return X, Y, ids, texts


def _payloads(store: str, folder: Path, Y: np.ndarray, ids: list[str]) -> dict[str, bytes]:
    s = open_store(store, folder, "col", create=False)
    try:
        hits = {h.id: h.payload for hs in s.search(Y, len(ids)) for h in hs}
    finally:
        s.close()
    assert set(hits) == set(ids) and all(hits.values())
    return hits  # type: ignore[return-value]


@pytest.mark.parametrize("store", STORES)
def test_no_text_or_vector_in_the_store_in_any_encoding(tmp_path, store):
    X, Y, ids, texts = _index(store, tmp_path / "db")
    seen = holder_reads(tmp_path / "db")
    # the check can see a payload: a known header field of every payload is there, decoded
    payloads = _payloads(store, tmp_path / "db", Y, ids)
    assert all(p[:HEADER] in seen for p in payloads.values())
    for t in texts:
        assert t.encode() not in seen and t.encode("utf-16-le") not in seen
    for x in X:  # any 12 consecutive bytes of a vector's float32 form
        row = x.astype("<f4").tobytes()
        pieces = [row[i : i + 12] for i in range(0, len(row) - 12, 8)]
        assert not [p for p in pieces if p in seen]


def test_payload_bodies_are_uniform_bytes(tmp_path):
    """The ciphertext of every payload the store returns: byte values uniform (chi-square over
    256 values, p > 1e-6) although the plaintexts (float32 vectors and ASCII texts) are not."""
    X, Y, ids, texts = _index("faiss", tmp_path / "db", n=120)
    bodies = b"".join(p[HEADER:-TAG] for p in _payloads("faiss", tmp_path / "db", Y, ids).values())
    counts = np.bincount(np.frombuffer(bodies, dtype=np.uint8), minlength=256)
    p = stats.chisquare(counts).pvalue
    assert p > 1e-6, p
    plain = b"".join(x.astype("<f4").tobytes() + t.encode() for x, t in zip(X, texts, strict=True))
    assert stats.chisquare(np.bincount(np.frombuffer(plain, np.uint8), minlength=256)).pvalue < 1e-6


def _parse_as_plaintext(payload: bytes, d: int) -> np.ndarray:
    """The attacker's reading: the body as the plaintext layout (u32 d, then d float32)."""
    body = payload[HEADER : HEADER + 4 + 4 * d]
    with np.errstate(invalid="ignore"):  # random bytes hold signalling NaNs
        v = np.frombuffer(body[4:], dtype="<f4").astype(np.float64)
    v[~np.isfinite(v)] = 0.0
    top = np.abs(v).max()
    return v / top if top > 0 else v


def _top1_links(guess: np.ndarray, X: np.ndarray) -> float:
    g = guess / np.maximum(np.linalg.norm(guess, axis=1, keepdims=True), 1e-300)
    c = X / np.linalg.norm(X, axis=1, keepdims=True)
    return float(np.mean(np.argmax(g @ c.T, axis=1) == np.arange(len(X))))


def test_an_attacker_who_parses_every_payload_links_no_record(tmp_path):
    """The store holder knows the payload format and has the candidates' exact vectors: reading
    each payload body as the plaintext layout links records at chance (1/n, within its 95%
    interval). The same reading of an unencrypted payload links every record (the control)."""
    n, d = 300, 24
    X, Y, ids, _ = _index("faiss", tmp_path / "db", n=n, d=d)
    payloads = _payloads("faiss", tmp_path / "db", Y, ids)
    guesses = np.stack([_parse_as_plaintext(payloads[i], d) for i in ids])
    rate = _top1_links(guesses, X)
    assert rate <= rate_interval(1, n)[1], rate
    control = np.stack(
        [
            _parse_as_plaintext(
                bytes(HEADER) + np.uint32(d).tobytes() + x.astype("<f4").tobytes(), d
            )
            for x in X
        ]
    )
    assert _top1_links(control, X) == 1.0
