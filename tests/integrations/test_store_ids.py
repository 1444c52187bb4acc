"""Typed record ids in every vector store (issue 39.4).

Record ids are typed (:func:`privembed.keys.keyed.typed_id`): ``7`` and ``"7"`` are two records
to the ledger, the keyed noise and the sealed payloads. Every store keys a record by
``str(id)``, the same for both: indexing ``7``, ``8`` and then ``"7"`` left two records, the
string silently replacing the integer's vector, metadata and payload while the ledger charged
three. A collection now keeps its numeric ids of one type and refuses the other, before anything
is written or charged; search returns the store id, which :meth:`VectorStore.record_id` types.
"""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError, get_mechanism
from privembed.integrations.collection import ProtectedCollection
from privembed.integrations.stores import open_store
from privembed.keys.ledger import Ledger

from .conftest import KEY

STORES = ["chroma", "qdrant", "faiss", "pgvector"]
X = (np.eye(4, dtype=np.float32) + 0.05)[:, :4]
BLOBS = [bytes([i]) * (40 + i) for i in range(4)]


@pytest.fixture(params=STORES)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pgvector":  # a fresh database of the session's PostgreSQL
        monkeypatch.setenv("PRIVEMBED_PG_DSN", request.getfixturevalue("pg_url"))
    return str(request.param)


def _state(s):
    """What a client sees of a store: count, each record's best hit, vector and payload."""
    hits = [h[0] for h in s.search(X[:3], k=1, with_vectors=True)]
    return (
        s.count(),
        [(h.id, round(h.score, 5), h.metadata, h.payload) for h in hits],
        [np.round(h.vector, 5).tolist() for h in hits],
        s.payloads(["7", "8"]),
    )


def test_a_str_id_that_prints_like_an_int_id_replaces_nothing(kind, tmp_path):
    """Indexing 7 and 8, then "7": the second upsert is refused (one line naming both ids)
    and the collection is what it was; searches return "7" typed back as the int 7."""
    with open_store(kind, tmp_path / "db", "ids") as s:
        s.upsert([7, 8], X[:2], [{"n": 7}, {"n": 8}], payloads=BLOBS[:2])
        before = _state(s)
        with pytest.raises(DataError) as err:
            s.upsert(["7"], X[2:3], [{"n": -7}], payloads=BLOBS[2:3])
        msg = str(err.value)
        assert "\n" not in msg and "'7'" in msg and "int id 7 " in msg, msg
        assert _state(s) == before and s.count() == 2
        hit = s.search(X[0], k=1)[0][0]
        assert (hit.id, hit.metadata, hit.payload) == ("7", {"n": 7}, BLOBS[0])
        assert s.record_id(hit.id) == 7 and type(s.record_id(hit.id)) is int
        assert s.numeric_ids == "int" and s.info["numeric_ids"] == "int"
        # an id that does not print as an integer goes with either type: a third record
        s.upsert(["07", "doc-7"], X[2:4])
        assert s.count() == 4 and s.record_id("07") == "07"
        assert s.payloads([7, "7", "07"]) == [BLOBS[0], BLOBS[0], None]
    with open_store(kind, tmp_path / "db", "ids", create=False) as s:  # the type is kept
        assert s.numeric_ids == "int"
        with pytest.raises(DataError, match="keeps its numeric record ids as ints"):
            s.upsert(["8"], X[2:3])
        v = np.array([[0.0, 1.0, 0.0, -1.0]], dtype=np.float32)
        s.upsert([8], v, [{"n": 88}])  # the int record itself is replaced as before
        hit = s.search(v, k=1)[0][0]
        assert s.count() == 4 and (hit.id, hit.metadata, hit.payload) == ("8", {"n": 88}, None)


def test_a_collection_of_str_ids_refuses_an_int_that_prints_like_one(kind, tmp_path):
    with open_store(kind, tmp_path / "db", "ids") as s:
        s.upsert(["7", "8"], X[:2], payloads=BLOBS[:2])
        with pytest.raises(
            DataError, match=r"the int id 7 would share the store id '7' with the str id '7'"
        ):
            s.upsert([7], X[2:3])
        assert s.count() == 2 and s.search(X[0], k=1)[0][0].payload == BLOBS[0]
        assert s.record_id("7") == "7" and s.numeric_ids == "str"
        assert s.payloads(["7", 7]) == [BLOBS[0], None]  # no int record 7 here


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        ([7, 8, "7"], r"record ids 7 \(int\) and '7' \(str\) would share the store id '7'"),
        ([np.int64(7), "8"], r"record ids 7 \(int\) and '8' \(str\) mix types"),
    ],
)
def test_one_upsert_that_mixes_int_and_numeric_str_ids_writes_nothing(kind, tmp_path, ids, match):
    with open_store(kind, tmp_path / "db", "ids") as s:
        with pytest.raises(DataError, match=match):
            s.upsert(ids, X[: len(ids)])
        assert s.count() == 0 and s.dim is None and s.numeric_ids is None


def test_faiss_store_file_is_byte_identical_after_a_refused_id(tmp_path):
    with open_store("faiss", tmp_path, "ids") as s:
        s.upsert([7, 8], X[:2], payloads=BLOBS[:2])
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with open_store("faiss", tmp_path, "ids") as s:
        with pytest.raises(DataError):
            s.upsert(["7"], X[2:3], payloads=BLOBS[2:3])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files


def test_a_collection_written_before_the_check_opens_and_adopts_a_type(kind, tmp_path):
    """A collection without ``numeric_ids`` in its info (written by an earlier privembed)
    opens and searches as before; its store ids stay strings until a numeric id is written,
    whose type it then keeps."""
    with open_store(kind, tmp_path / "db", "old") as s:
        s.upsert([7, 8], X[:2], payloads=BLOBS[:2])
        del s._info["numeric_ids"]  # as an earlier privembed wrote it
        s._write_info()
    with open_store(kind, tmp_path / "db", "old", create=False) as s:
        assert s.numeric_ids is None and "numeric_ids" not in s.info
        hit = s.search(X[1], k=1)[0][0]
        assert (hit.id, hit.payload, s.record_id(hit.id)) == ("8", BLOBS[1], "8")
        s.upsert([8], X[1:2], payloads=BLOBS[1:2])  # re-indexing: the type is recorded
        assert s.numeric_ids == "int" and s.count() == 2
        with pytest.raises(DataError, match="'7'"):
            s.upsert(["7"], X[2:3])


def test_a_protected_collection_charges_nothing_for_a_refused_id(tmp_path):
    """Through a keyed collection with payloads and a ledger: "7" is refused before the
    ledger records its release; re-ranking opens the int record's payload under "7"."""
    mech = get_mechanism("gaussian", epsilon=1e6, delta=1e-5)  # almost no noise
    led = Ledger(tmp_path / "ledger.db")
    with ProtectedCollection.open(
        "faiss", tmp_path / "db", "ids", mechanism=mech, key=KEY, payloads=True
    ) as col:
        col.ledger = led
        col.add([7, 8], X[:2], texts=["seven", "eight"], ledger=led)
        with pytest.raises(DataError, match="'7'"):
            col.add(["7"], X[2:3], texts=["str seven"], ledger=led)
        assert col.store.count() == 2
        hit = col.query(X[0], k=1, rerank=2)[0][0]
        assert (hit.id, hit.text, col.store.record_id(hit.id)) == ("7", "seven", 7)
        assert col._current_releases(["7"])  # the ledger's int record 7, looked up as such
    assert sorted(s.record_id for s in led.spent()) == ["i:7", "i:8"]
    led.close()
