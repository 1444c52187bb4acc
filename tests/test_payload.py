"""Sealed payloads: round trips, and every way a payload can be wrong is refused with its cause."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError
from privembed.keys import payload as pl
from privembed.keys.payload import Payload, PayloadCodec, PayloadError, payload_size

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


@pytest.fixture()
def codec() -> PayloadCodec:
    return PayloadCodec(KEY)


@pytest.fixture()
def x() -> np.ndarray:
    v = np.random.default_rng(0).standard_normal(384).astype(np.float32)
    return v / np.linalg.norm(v)


def test_round_trip_float32_with_text_and_metadata(codec, x):
    meta = {"source": "notes.txt", "page": 3, "tags": ["a", "b"], "ü": None}
    blob = codec.seal(x, record_id="r1", collection="c", text="héllo wörld", metadata=meta)
    assert len(blob) == payload_size(384, text="héllo wörld", metadata=meta)
    got = codec.open(blob, record_id="r1", collection="c")
    assert isinstance(got, Payload)
    np.testing.assert_array_equal(got.vector, x)  # float32: bit-exact
    assert got.vector.dtype == np.float32
    assert got.text == "héllo wörld" and got.metadata == meta
    bare = codec.open(codec.seal(x, record_id=7, collection="c"), record_id=7, collection="c")
    assert bare.text is None and bare.metadata is None


def test_float16_payloads_are_half_the_size_and_close(x):
    c16 = PayloadCodec(KEY, dtype="float16")
    blob = c16.seal(x, record_id=1, collection="c")
    assert len(blob) == payload_size(384, dtype="float16") == 861
    got = PayloadCodec(KEY).open(blob, record_id=1, collection="c")  # any codec reads both
    # float16 has an 11-bit significand: relative rounding error <= 2^-11 per entry
    assert np.all(np.abs(got.vector - x) <= np.abs(x) * 2.0**-11 + 2.0**-24)
    with pytest.raises(DataError, match=r"non-finite values \(outside float16's range"):
        c16.seal(np.array([1e6, 0.0]), record_id=1, collection="c")


def test_encryption_is_randomised_not_deterministic(codec, x):
    a = codec.seal(x, record_id="r", collection="c")
    b = codec.seal(x, record_id="r", collection="c")
    assert a != b  # fresh nonce each time
    assert a[17:29] != b[17:29]
    assert a[29:] != b[29:]
    # the exact vector's bytes do not appear in the payload
    assert x.tobytes()[:16] not in a


def test_wrong_key_is_named(codec, x):
    blob = codec.seal(x, record_id="r", collection="c")
    with pytest.raises(PayloadError, match=r"sealed under another key .*wrong key file") as e:
        PayloadCodec(OTHER_KEY).open(blob, record_id="r", collection="c")
    assert e.value.cause == "wrong-key"
    with pytest.raises(PayloadError, match="another key"):
        pl.open(OTHER_KEY, blob, record_id="r", collection="c")
    assert pl.open(KEY, blob, record_id="r", collection="c").vector.shape == (384,)


def test_swapped_between_records_or_collections_is_refused(codec, x):
    a = codec.seal(x, record_id="a", collection="c")
    b = codec.seal(-x, record_id="b", collection="c")
    for blob, rid, coll in ((a, "b", "c"), (b, "a", "c"), (a, "a", "d"), (a, 5, "c")):
        with pytest.raises(PayloadError, match="does not belong to record") as e:
            codec.open(blob, record_id=rid, collection=coll)
        assert e.value.cause == "wrong-record"
    # ids are typed: the int 5 and the string "5" are different records
    five = codec.seal(x, record_id=5, collection="c")
    with pytest.raises(PayloadError, match="does not belong to record '5'"):
        codec.open(five, record_id="5", collection="c")


def test_swap_that_also_forges_the_binding_check_still_fails_authentication(codec, x):
    # a store that copies b's header check into a's payload: the tag covers the header
    a = bytearray(codec.seal(x, record_id="a", collection="c"))
    b = codec.seal(x, record_id="b", collection="c")
    a[9:13] = b[9:13]
    with pytest.raises(PayloadError, match="failed authentication") as e:
        codec.open(bytes(a), record_id="b", collection="c")
    assert e.value.cause == "tampered"


@pytest.mark.parametrize("where", ["flags", "length", "nonce", "ciphertext", "tag"])
def test_tampering_anywhere_is_refused_not_decrypted(codec, x, where):
    blob = bytearray(codec.seal(x, record_id="r", collection="c", text="secret"))
    pos = {"flags": 4, "length": 13, "nonce": 20, "ciphertext": 100, "tag": len(blob) - 1}[where]
    blob[pos] ^= 0x01
    with pytest.raises(PayloadError) as e:
        codec.open(bytes(blob), record_id="r", collection="c")
    # a changed length field reads as a truncated (or over-long) payload; all else fails the tag
    assert e.value.cause in ({"truncated", "tampered"} if where == "length" else {"tampered"})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("n", [0, 2, 20, 40, 1000])
def test_truncated_and_missing_payloads(codec, x, n):
    blob = codec.seal(x, record_id="r", collection="c")
    with pytest.raises(PayloadError) as e:
        codec.open(blob[:n], record_id="r", collection="c")
    assert e.value.cause == ("format" if n == 2 else "truncated")
    msg = str(e.value)
    assert "record 'r' in collection 'c'" in msg
    assert ("missing" in msg) if n == 0 else ("truncated" in msg or "not a privembed" in msg)
    with pytest.raises(PayloadError, match="longer than its header says"):
        codec.open(blob + b"\x00", record_id="r", collection="c")


def test_not_a_payload_or_other_version(codec, x):
    with pytest.raises(PayloadError, match="not a privembed payload"):
        codec.open(b"\x00" * 100, record_id="r", collection="c")
    blob = bytearray(codec.seal(x, record_id="r", collection="c"))
    blob[3] = 9
    with pytest.raises(
        PayloadError, match="format version 9; this privembed reads versions 1 and 2"
    ):
        codec.open(bytes(blob), record_id="r", collection="c")
    with pytest.raises(TypeError, match="must be bytes"):
        codec.open("text", record_id="r", collection="c")  # type: ignore[arg-type]


def test_bad_arguments(codec, x):
    with pytest.raises(TypeError, match="key must be bytes"):
        PayloadCodec("00" * 32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 16 bytes"):
        PayloadCodec(b"short")
    with pytest.raises(ValueError, match="dtype must be one of"):
        PayloadCodec(KEY, dtype="int8")
    with pytest.raises(DataError, match="1-D"):
        codec.seal(np.ones((2, 2)), record_id="r", collection="c")
    with pytest.raises(DataError, match="non-finite"):
        codec.seal(np.array([np.nan, 1.0]), record_id="r", collection="c")
    with pytest.raises(TypeError, match="JSON-serialisable"):
        codec.seal(x, record_id="r", collection="c", metadata={"a": object()})
    with pytest.raises(TypeError, match="collection must be a non-empty str"):
        codec.seal(x, record_id="r", collection="")
    with pytest.raises(TypeError, match="record id must be an int or a string"):
        codec.seal(x, record_id=1.5, collection="c")


def test_many_and_vectors_for_rerank(codec):
    X = np.random.default_rng(1).standard_normal((50, 16)).astype(np.float32)
    ids = [f"d{i}" for i in range(50)]
    blobs = codec.seal_many(X, ids=ids, collection="c", texts=[f"t{i}" for i in range(50)])
    np.testing.assert_array_equal(codec.vectors(blobs, ids=ids, collection="c"), X)
    assert [p.text for p in codec.open_many(blobs[:3], ids=ids[:3], collection="c")] == [
        "t0",
        "t1",
        "t2",
    ]
    with pytest.raises(DataError, match="ids has 2 entries but X has 50 rows"):
        codec.seal_many(X, ids=ids[:2], collection="c")
    with pytest.raises(PayloadError, match="does not belong"):
        codec.vectors(blobs[::-1], ids=ids, collection="c")


def test_key_file_and_independence_from_the_noise_key(tmp_path, x):
    from privembed.keys.keyed import keygen, load_key

    path = tmp_path / "k.key"
    keygen(path)
    codec = PayloadCodec.from_key_file(path)
    blob = codec.seal(x, record_id="r", collection="c")
    assert PayloadCodec(load_key(path)).open(blob, record_id="r", collection="c").vector.size == 384
    assert repr(codec).startswith("PayloadCodec(key_check=")
    # the payload data key is a derived key: the raw user key does not open the ciphertext
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    with pytest.raises(InvalidTag):
        AESGCM(load_key(path)).decrypt(blob[17:29], blob[29:], None)


def test_padding_hides_text_length(codec, x):
    padded = PayloadCodec(KEY, pad_to=256)
    a = padded.seal(x, record_id="r", collection="c", text="short")
    b = padded.seal(x, record_id="r", collection="c", text="a much longer text " * 5)
    assert len(a) == len(b) and (len(a) - 61) % 256 == 0
    assert codec.open(b, record_id="r", collection="c").text == "a much longer text " * 5
    assert len(codec.seal(x, record_id="r", collection="c", text="short")) < len(a)
    with pytest.raises(ValueError, match="pad_to must be >= 0"):
        PayloadCodec(KEY, pad_to=-1)


def test_ciphertexts_tell_a_probe_nothing_about_the_vectors(codec):
    """A store-side attacker with every ciphertext but no key: a linear probe on the payload
    bytes cannot tell which of two concepts a record's exact vector belongs to."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(8)
    n, d = 3000, 16
    z = rng.integers(0, 2, n)
    X = rng.standard_normal((n, d)).astype(np.float32)
    X[:, 0] += 4.0 * z  # the concept is trivially readable from the exact vectors
    blobs = codec.seal_many(X, ids=list(range(n)), collection="c")
    F = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(n, -1).astype(np.float64) / 255.0
    clf = LogisticRegression(max_iter=2000).fit(F[:2000], z[:2000])
    acc = clf.score(F[2000:], z[2000:])
    # chance 0.5 +- 4.4 binomial standard errors over 1000 held-out records (0.070)
    assert abs(acc - 0.5) < 0.07, acc
    assert (
        LogisticRegression(max_iter=2000).fit(X[:2000], z[:2000]).score(X[2000:], z[2000:]) > 0.95
    )


def test_payload_lengths_hide_text_lengths_by_default(x):
    """Finding 8: a payload's size revealed the exact text length (text bytes + 1,589). By
    default (Padmé) 400 texts of 400 different lengths give a handful of payload sizes, each at
    most 11.7% above the unpadded size; unpadded, every length shows."""
    default, unpadded = PayloadCodec(KEY), PayloadCodec(KEY, pad_to=0)
    texts = ["x" * n for n in range(1, 401)]
    sizes = [len(default.seal(x, record_id=i, collection="c", text=t)) for i, t in enumerate(texts)]
    raw = [len(unpadded.seal(x, record_id=i, collection="c", text=t)) for i, t in enumerate(texts)]
    assert len(set(raw)) == 400
    assert len(set(sizes)) <= 8, sorted(set(sizes))
    assert all(s >= r for s, r in zip(sizes, raw, strict=True))
    assert max((s - 61) / (r - 61) for s, r in zip(sizes, raw, strict=True)) <= 1.117
    assert sizes == [payload_size(384, text=t) for t in texts]
    assert (
        default.open(
            default.seal(x, record_id=1, collection="c", text="x" * 77), record_id=1, collection="c"
        ).text
        == "x" * 77
    )
    with pytest.raises(ValueError, match="pad_to must be 'padme' or an int"):
        PayloadCodec(KEY, pad_to="bucket")


def test_a_payload_of_an_older_release_is_refused(codec, x):
    """Finding 10: an old payload of an edited record opened without error (rollback). A payload
    names the release it belongs to (the digest of the protected vector beside it), under the
    tag: the store can neither put an old payload back nor relabel it."""
    from privembed.keys.payload import release_digest

    y1, y2 = x + 0.01, x - 0.01  # two releases of the record (before and after an edit)
    from privembed.release.core import _row_digests

    assert release_digest(y1).hex() == _row_digests(y1[None, :])[0]  # what the ledger records
    r1, r2 = release_digest(y1), release_digest(y2)
    old = codec.seal(x, record_id="r", collection="c", release=r1)
    new = codec.seal(x * 0.5, record_id="r", collection="c", release=r2)
    assert codec.open(new, record_id="r", collection="c", release=r2).release == r2
    with pytest.raises(PayloadError, match="another release of the record") as info:
        codec.open(old, record_id="r", collection="c", release=r2)
    assert info.value.cause == "stale"
    relabelled = bytearray(old)
    relabelled[29:45] = r2  # the store rewrites the release field of the old payload
    with pytest.raises(PayloadError) as info:
        codec.open(bytes(relabelled), record_id="r", collection="c", release=r2)
    assert info.value.cause == "tampered"
    unversioned = codec.seal(x, record_id="r", collection="c")
    assert codec.open(unversioned, record_id="r", collection="c").release is None
    with pytest.raises(PayloadError) as info:
        codec.open(unversioned, record_id="r", collection="c", release=r2)
    assert info.value.cause == "stale"
    assert [p.release for p in codec.open_many([old, new], ids=["r", "r"], collection="c")] == [
        r1,
        r2,
    ]


def test_version_1_payloads_still_open(codec, x):
    """Stores written before releases were bound keep working (reported as unversioned)."""
    import struct

    from privembed.keys import payload as P

    aes, ck = codec._collection("c")
    ad = codec._ad_record("r", "c")
    binding = P.hmac.digest(ck, b"binding\x00" + ad, "sha256")[:4]
    plaintext = struct.pack("<I", x.size) + x.astype("<f4").tobytes()
    nonce = bytes(12)
    header = P._HEADER_V1.pack(b"PEP", 1, 0, codec._key_check, binding, len(plaintext), nonce)
    blob = header + aes.encrypt(nonce, plaintext, ad + header)
    got = codec.open(blob, record_id="r", collection="c")
    np.testing.assert_array_equal(got.vector, x.astype(np.float32))
    assert got.release is None


def test_index_pads_payloads_by_default_and_says_why_on_a_bad_pad(tmp_path):
    """Through the CLI and the store: texts of 60 lengths, sealed with them, give few payload
    sizes by default and about one size per length with --pad-to 0."""
    import json as _json

    from typer.testing import CliRunner

    from privembed.cli import app
    from privembed.integrations.stores import open_store

    key = tmp_path / "k.key"
    key.write_text(KEY.hex() + "\n")
    key.chmod(0o600)
    notes = tmp_path / "notes.jsonl"
    words = ["fever", "cough", "knee", "insulin", "asthma", "rash", "migraine", "ankle",
             "statin", "biopsy", "sepsis", "anemia"]  # fmt: skip
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=2 + i)) for i in range(60)]
    notes.write_text("".join(_json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    runner = CliRunner()
    sizes = {}
    for pad in ("padme", "0"):
        db = tmp_path / f"db-{pad}"
        r = runner.invoke(app, ["index", str(notes), "--store", "faiss", "--path", str(db), "-m",
                                "laplace", "--epsilon", "50", "--key-file", str(key),
                                "--payloads", "--store-text", "--pad-to", pad])  # fmt: skip
        assert r.exit_code == 0, r.output
        store = open_store("faiss", db, "privembed")
        try:
            (hits,) = store.search(np.ones((1, 384), dtype=np.float32), 60)
        finally:
            store.close()
        sizes[pad] = {len(h.payload) for h in hits}
    assert len(sizes["0"]) >= 50 and len(sizes["padme"]) <= 8, sizes
    r = runner.invoke(app, ["index", str(notes), "--store", "faiss", "--path", str(tmp_path / "x"),
                            "-m", "laplace", "--epsilon", "50", "--key-file", str(key),
                            "--payloads", "--pad-to", "-3"])  # fmt: skip
    assert r.exit_code == 2 and "--pad-to must be 'padme' or a number" in r.stderr


# ---- open_batch: the re-rank's fast path must accept and refuse exactly what open() does -------


def _bad_payloads(codec, x):
    """(name, payload, id, cause) for every way one payload of a batch can be wrong."""
    good = codec.seal(x, record_id="r", collection="c", text="t")
    flipped = bytearray(good)
    flipped[100] ^= 1
    forged = bytearray(codec.seal(x, record_id="a", collection="c"))
    forged[9:13] = codec.seal(x, record_id="r", collection="c")[9:13]  # binding copied from r
    version = bytearray(good)
    version[3] = 9
    return [
        ("another record's payload", codec.seal(x, record_id="a", collection="c"), "wrong-record"),
        ("forged binding", bytes(forged), "tampered"),
        ("another collection", codec.seal(x, record_id="r", collection="d"), "wrong-record"),
        (
            "another key",
            PayloadCodec(OTHER_KEY).seal(x, record_id="r", collection="c"),
            "wrong-key",
        ),
        ("tampered", bytes(flipped), "tampered"),
        ("truncated", good[:40], "truncated"),
        ("longer", good + b"\x00", "tampered"),
        ("empty", b"", "truncated"),
        ("not a payload", b"\x00" * 100, "format"),
        ("unknown version", bytes(version), "format"),
    ]


def test_open_batch_equals_open_on_every_payload(codec):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((40, 24)).astype(np.float32)
    ids: list = [f"d{i}" for i in range(39)] + [7]  # typed ids: the int 7 is "i:7"
    rel = [rng.bytes(16) for _ in range(40)]
    rel[5] = None
    blobs = codec.seal_many(
        X, ids=ids, collection="c", texts=[f"t{i}" if i % 3 else None for i in range(40)],
        metadatas=[{"i": i} if i % 2 else None for i in range(40)], releases=rel,
    )  # fmt: skip
    blobs[11] = bytearray(blobs[11])  # not bytes: takes the one-by-one path, as open() reads it
    got = codec.open_batch(blobs, ids=ids, collection="c")
    assert len(got) == 40 and got.vectors.dtype == np.float32
    np.testing.assert_array_equal(got.vectors, X)
    assert got.releases == rel
    for i in range(40):
        one, alone = got.payload(i), codec.open(blobs[i], record_id=ids[i], collection="c")
        np.testing.assert_array_equal(one.vector, alone.vector)
        assert (one.text, one.metadata, one.release) == (alone.text, alone.metadata, alone.release)
    # float16 payloads, alone and mixed with float32 ones in one batch
    c16 = PayloadCodec(KEY, dtype="float16")
    half = c16.seal_many(X, ids=ids, collection="c")

    def one_by_one(blobs):
        return np.stack(
            [
                codec.open(b, record_id=r, collection="c").vector
                for b, r in zip(blobs, ids, strict=True)
            ]
        )

    np.testing.assert_array_equal(
        c16.open_batch(half, ids=ids, collection="c").vectors, one_by_one(half)
    )
    mixed = [half[i] if i % 2 else blobs[i] for i in range(40)]
    np.testing.assert_array_equal(
        codec.open_batch(mixed, ids=ids, collection="c").vectors, one_by_one(mixed)
    )


@pytest.mark.parametrize("position", [0, 17, 39])
def test_open_batch_refuses_each_bad_payload_with_open_s_error(codec, x, position):
    ids = [f"d{i}" for i in range(40)]
    ids[position] = "r"
    X = np.tile(x, (40, 1))
    for name, bad, cause in _bad_payloads(codec, x):
        blobs = codec.seal_many(X, ids=ids, collection="c")
        blobs[position] = bad
        with pytest.raises(PayloadError) as alone:
            codec.open(bad, record_id="r", collection="c")
        with pytest.raises(PayloadError) as batch:
            codec.open_batch(blobs, ids=ids, collection="c")
        assert batch.value.cause == alone.value.cause == cause, name
        assert str(batch.value) == str(alone.value), name


def test_open_batch_refuses_a_store_that_reorders_payloads(codec):
    """Every payload is genuine, but the store returns them under each other's ids."""
    X = np.random.default_rng(4).standard_normal((30, 8)).astype(np.float32)
    ids = [f"d{i}" for i in range(30)]
    blobs = codec.seal_many(X, ids=ids, collection="c")
    blobs[3], blobs[4] = blobs[4], blobs[3]
    with pytest.raises(PayloadError, match="does not belong to record 'd3'") as e:
        codec.open_batch(blobs, ids=ids, collection="c")
    assert e.value.cause == "wrong-record"


def test_open_batch_bad_arguments(codec, x):
    blob = codec.seal(x, record_id="r", collection="c")
    with pytest.raises(DataError, match="payloads has 1 entries but ids has 2"):
        codec.open_batch([blob], ids=["r", "s"], collection="c")
    with pytest.raises(DataError, match="payloads must be non-empty"):
        codec.open_batch([], ids=[], collection="c")
    short = codec.seal(x[:10], record_id="s", collection="c")
    with pytest.raises(DataError, match=r"different dimensions \[10, 384\]"):
        codec.open_batch([blob, short], ids=["r", "s"], collection="c")
    with pytest.raises(TypeError, match="must be bytes"):
        codec.open_batch(["text"], ids=["r"], collection="c")  # type: ignore[list-item]
