"""Attacks on sealed payloads by the store operator, checked on the property itself.

The header's 4-byte binding check says *which* error a moved payload is; it is not what refuses
it. What refuses it is AES-GCM's associated data, which holds the typed record id and the
collection. A store operator who looks at the headers of enough payloads finds two records
whose binding checks collide (a birthday bound: about 2^16 records for 32 bits; the issue found
two among 160,000) and swaps them: the header checks then pass, and only the associated data
stands between the operator and a payload opened as the wrong record's.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from privembed.keys.payload import PayloadCodec, PayloadError

KEY = bytes(range(32))
#: the binding check's place in a version-2 header (magic 3, version 1, flags 1, key check 4)
BINDING = slice(9, 13)


def _colliding_records(codec: PayloadCodec, collection: str, limit: int = 2_000_000):
    """Seal records r0, r1, ... until two payloads carry the same binding check, as a store
    operator reading the headers would find them; return both (id, payload) pairs."""
    seen: dict[bytes, tuple[str, bytes]] = {}
    x = np.array([1.0], dtype=np.float32)
    for i in itertools.count():
        assert i < limit, "no two binding checks collided"
        rid = f"r{i}"
        blob = codec.seal(x * (i + 1), record_id=rid, collection=collection, text=f"note {i}")
        check = blob[BINDING]
        if check in seen:
            return seen[check], (rid, blob)
        seen[check] = (rid, blob)
    raise AssertionError("unreachable")


@pytest.mark.slow
def test_a_swap_between_records_whose_header_checks_collide_fails_authentication():
    codec = PayloadCodec(KEY, pad_to=0)
    (a_id, a_blob), (b_id, b_blob) = _colliding_records(codec, "notes")
    assert a_blob[BINDING] == b_blob[BINDING] and a_id != b_id
    # each opens as itself
    assert codec.open(a_blob, record_id=a_id, collection="notes").text == f"note {a_id[1:]}"
    assert codec.open(b_blob, record_id=b_id, collection="notes").text == f"note {b_id[1:]}"
    # swapped: every header check passes, so only the associated data can refuse them
    for blob, other in ((a_blob, b_id), (b_blob, a_id)):
        with pytest.raises(PayloadError, match="failed authentication") as info:
            codec.open(blob, record_id=other, collection="notes")
        assert info.value.cause == "tampered"


def test_typed_ids_are_two_records():
    """``5`` and ``"5"`` are two records: a payload of one never opens as the other."""
    codec = PayloadCodec(KEY)
    x = np.array([0.6, 0.8], dtype=np.float32)
    as_int = codec.seal(x, record_id=5, collection="c")
    with pytest.raises(PayloadError, match="does not belong to record '5'") as info:
        codec.open(as_int, record_id="5", collection="c")
    assert info.value.cause == "wrong-record"
    assert codec.open(as_int, record_id=5, collection="c").vector.tolist() == pytest.approx(
        [0.6, 0.8]
    )
