"""The release path end to end: metadata that travels with every output, dtypes, text inputs
with content-derived ids, and seeded output that no batching or thread count changes."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import LaplaceMechanism
from privembed.cli import app
from privembed.data.io import read_embeddings, read_metadata, sidecar_path, write_embeddings
from privembed.keys.keyed import keygen
from privembed.mechanisms.base import get_num_threads, set_num_threads
from privembed.release import content_ids, protect_file

runner = CliRunner()


def test_npy_outputs_carry_their_metadata_and_refuse_reprotection(tmp_path):
    src = tmp_path / "x.npy"
    np.save(src, np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32))
    out = tmp_path / "p.npy"
    r = runner.invoke(app, ["protect", str(src), "-o", str(out), "-m", "laplace", "--epsilon", "9"])
    assert r.exit_code == 0, r.output
    assert sidecar_path(out).exists()
    meta = read_metadata(out)
    assert meta["protected"] and meta["mechanism"]["mechanism"] == "laplace"
    r = runner.invoke(
        app, ["protect", str(out), "-o", str(tmp_path / "q.npy"), "-m", "laplace", "--epsilon", "9"]
    )
    assert r.exit_code == 2 and "already protected" in " ".join(r.stderr.split())
    # a sidecar that belongs to another file (the .npy was replaced) is not this file's
    np.save(out, np.ones((3, 8), dtype=np.float32))
    assert read_metadata(out) == {}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_input_dtype_is_kept(tmp_path, dtype):
    src = tmp_path / "x.npz"
    write_embeddings(src, np.random.default_rng(0).standard_normal((4, 8)).astype(dtype))
    out = tmp_path / "y.npz"
    protect_file(src, out, LaplaceMechanism(epsilon=9.0), rng=1)
    assert read_embeddings(out).X.dtype == dtype


def test_the_setting_note_travels_in_the_summary_and_the_json(tmp_path):
    """The release computes what its setting does to vectors (expected mean cosine, warnings);
    the command prints that note, it does not compute it (issue 25.4)."""
    from privembed import GaussianMechanism
    from privembed.evaluation.advice import setting_note as advice_note
    from privembed.release import setting_note

    src = tmp_path / "x.npz"
    write_embeddings(src, np.random.default_rng(0).standard_normal((6, 384)))
    mech = GaussianMechanism(epsilon=10.0, delta=1e-5)
    summary = protect_file(src, tmp_path / "y.npz", mech, rng=1)
    assert summary.setting == setting_note(mech, 384) == advice_note(mech, 384)
    assert summary.setting.warn and summary.setting.expected_cosine < 0.1
    assert summary.to_dict()["setting"] == summary.setting.to_dict()
    r = CliRunner().invoke(
        app,
        ["protect", str(src), "-o", str(tmp_path / "z.npz"), "-m", "gaussian", "--epsilon", "10",
         "--delta", "1e-5", "--seed", "1", "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    import json

    got = json.loads(r.stdout)["setting"]
    assert got["expected_cosine"] == pytest.approx(summary.setting.expected_cosine)
    assert got["notes"] == list(summary.setting.notes)


class _FakeEmbedder:
    """Stands in for the model: a unit vector seeded by the text."""

    def metadata(self):
        return {"embedding_model": "fake-model", "dim": 8, "normalized": True}

    def encode(self, texts):
        import hashlib

        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(8)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32)


def test_texts_without_ids_take_content_ids_on_request(tmp_path):
    key = tmp_path / "k.key"
    keygen(key)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("the patient has diabetes\nshared line\n")
    b.write_text("the patient has cancer\nshared line\n")
    mech = LaplaceMechanism(epsilon=20.0)
    with pytest.raises(ValueError, match="line numbers are not ids"):
        protect_file(a, tmp_path / "oa.parquet", mech, key=key, embedder=_FakeEmbedder())
    for f in (a, b):
        protect_file(f, tmp_path / f"o{f.stem}.parquet", mech, key=key, ids_from_content=True,
                     embedder=_FakeEmbedder())  # fmt: skip
    A, B = read_embeddings(tmp_path / "oa.parquet"), read_embeddings(tmp_path / "ob.parquet")
    assert list(A.ids) == content_ids(key=key, texts=["the patient has diabetes", "shared line"])
    assert not np.array_equal(A.X[0], B.X[0])  # line 1 of two files: two records
    assert np.array_equal(A.X[1], B.X[1])  # the same text: the same record, the same vector


def test_seeded_output_is_the_same_for_cli_api_batches_and_threads(tmp_path):
    X = np.random.default_rng(3).standard_normal((5000, 16)).astype(np.float32)
    src = tmp_path / "x.parquet"
    write_embeddings(src, X, ids=list(range(len(X))))
    mech = LaplaceMechanism(epsilon=30.0)
    ref = mech.privatize(X, rng=12345)
    outs = []
    for rows in ("4096", "2048", "1000", "7"):
        out = tmp_path / f"o{rows}.parquet"
        r = runner.invoke(app, ["protect", str(src), "-o", str(out), "-m", "laplace",
                                "--epsilon", "30", "--seed", "12345", "--batch-rows", rows])  # fmt: skip
        assert r.exit_code == 0, r.output
        outs.append(read_embeddings(out).X)
    for Y in outs:
        np.testing.assert_array_equal(Y, ref)
    old = get_num_threads()
    try:
        for n in (1, 2, 3):
            set_num_threads(n)
            np.testing.assert_array_equal(mech.privatize(X, rng=12345), ref)
    finally:
        set_num_threads(old)
    # a slice of the array, told where it starts, gets the same rows
    np.testing.assert_array_equal(mech.privatize(X[1000:1500], rng=12345, row_offset=1000),
                                  ref[1000:1500])  # fmt: skip


@pytest.mark.parametrize("spill", [1_000_000, 3])
def test_repeated_ids_are_refused_across_batches_in_memory_and_after_spilling(spill):
    """The duplicate check of a keyed release without a ledger: a repeat within a batch or
    of an earlier batch refuses the whole batch (nothing of it is remembered), before and
    after the set spills to disk."""
    from privembed.release import DuplicateIds, ReleasedIds

    seen = ReleasedIds(spill=spill)
    seen.add(["a", "b"])
    with pytest.raises(DuplicateIds, match="repeated: c "):
        seen.add(["c", "c"])
    with pytest.raises(DuplicateIds, match="repeated: b "):
        seen.add(["d", "b"])
    seen.add(["c", "d"])  # the refused batches left nothing behind
    seen.add(["e"])
    with pytest.raises(DuplicateIds, match="repeated: a, e "):
        seen.add(["a", "f", "e"])
    assert (seen._mem is None) == (spill == 3)
    seen.close()


class _ProgressEmbedder(_FakeEmbedder):
    def encode(self, texts, *, on_progress=None):
        out = []
        for s in range(0, len(texts), 2):
            out.append(super().encode(texts[s : s + 2]))
            if on_progress is not None:
                on_progress(min(s + 2, len(texts)))
        return np.concatenate(out)


def test_other_columns_leave_only_when_named(tmp_path):
    """An embeddings file with a name column: protect drops it (and says so) unless it is
    named with keep_columns; a name that is not a column is refused before any output."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "e.parquet"
    X = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    extra = pa.table({"patient": [f"name {i}" for i in range(5)], "ward": list("abcde")})
    write_embeddings(src, X, ids=list(range(5)), extra=extra)
    mech = LaplaceMechanism(epsilon=9.0)
    s = protect_file(src, tmp_path / "o.parquet", mech, rng=1)
    assert pq.read_schema(tmp_path / "o.parquet").names == ["id", "embedding"]
    assert any("dropped columns patient, ward" in n for n in s.notes)
    protect_file(src, tmp_path / "k.parquet", mech, rng=1, keep_columns=["ward"])
    t = pq.read_table(tmp_path / "k.parquet")
    assert t.schema.names == ["id", "ward", "embedding"] and t["ward"].to_pylist() == list("abcde")
    with pytest.raises(ValueError, match="no column 'nmae' to keep"):
        protect_file(src, tmp_path / "x.parquet", mech, rng=1, keep_columns=["nmae"])
    with pytest.raises(ValueError, match="needs a Parquet output"):
        protect_file(src, tmp_path / "x.npz", mech, rng=1, keep_columns=["ward"])
    assert not (tmp_path / "x.parquet").exists() and not (tmp_path / "x.npz").exists()


def test_texts_fields_leave_only_when_named_and_progress_counts_texts(tmp_path):
    import json

    import pyarrow.parquet as pq

    src = tmp_path / "notes.jsonl"
    src.write_text(
        "".join(
            json.dumps({"id": i, "text": f"note {i}", "patient": f"P{i}"}) + "\n" for i in range(5)
        )
    )
    steps: list[int] = []
    s = protect_file(src, tmp_path / "o.parquet", LaplaceMechanism(epsilon=9.0), rng=1,
                     embedder=_ProgressEmbedder(), on_batch=steps.append)  # fmt: skip
    assert steps == [2, 2, 1]  # per embedding batch, not 0 then everything
    assert pq.read_schema(tmp_path / "o.parquet").names == ["id", "embedding"]
    assert any("dropped fields patient" in n for n in s.notes)
    protect_file(src, tmp_path / "k.jsonl", LaplaceMechanism(epsilon=9.0), rng=1,
                 embedder=_FakeEmbedder(), keep_columns=["patient"])  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "k.jsonl").read_text().splitlines()]
    assert [r["patient"] for r in rows] == [f"P{i}" for i in range(5)] and "text" not in rows[0]


def test_csv_texts_are_texts(tmp_path):
    src = tmp_path / "notes.csv"
    src.write_text("id,text\n1,first note\n2,second note\n")
    s = protect_file(src, tmp_path / "o.npz", LaplaceMechanism(epsilon=9.0), rng=1,
                     embedder=_FakeEmbedder())  # fmt: skip
    assert s.rows == 2 and list(read_embeddings(tmp_path / "o.npz").ids) == [1, 2]


def test_concept_erasure_before_noise(tmp_path):
    """protect --erase: the concept's mean difference is gone from the released vectors (up
    to the noise), the file records which eraser, keyed noise is bound to the erased content,
    a zero row is still refused, and a file that is not an eraser says so."""
    from privembed.concepts import ConceptEraser, ConceptProfile, eraser_path, load_eraser

    rng = np.random.default_rng(0)
    z = rng.integers(0, 2, 600)
    X = rng.standard_normal((600, 16))
    X[:, 0] += 3.0 * z
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    er = ConceptEraser.fit(X, z, metadata={"concept": "toy"})
    prof = tmp_path / "toy.profile"
    ConceptProfile(mask=np.ones(16) * 0.5, eraser=er).save(prof)
    assert eraser_path(prof).is_file()
    src = tmp_path / "e.npz"
    write_embeddings(src, X.astype(np.float32), ids=list(range(600)))
    key = tmp_path / "k.key"
    keygen(key)
    mech = LaplaceMechanism(epsilon=2000.0)  # little noise: the erasure is what shows
    protect_file(src, tmp_path / "o.npz", mech, key=key, eraser=load_eraser(prof))
    out = read_embeddings(tmp_path / "o.npz")
    gap_before = X[z == 1].mean(0) - X[z == 0].mean(0)
    gap_after = out.X[z == 1].mean(0) - out.X[z == 0].mean(0)
    # (renormalising after the erasure and the noise leave a small gap; without: 0.58)
    assert abs(gap_before[0]) > 0.5 and np.abs(gap_after).max() < 0.15 * abs(gap_before[0])
    meta = read_metadata(tmp_path / "o.npz")["concept_erasure"]
    assert meta["concept"] == "toy" and meta["rank"] == 1 and len(meta["digest"]) == 16
    protect_file(src, tmp_path / "p.npz", mech, key=key)  # no erasure: other content, other noise
    assert not np.allclose(read_embeddings(tmp_path / "p.npz").X, out.X, atol=1e-3)
    bad = X.copy()
    bad[5] = 0.0
    write_embeddings(tmp_path / "z.npz", bad, ids=list(range(600)))
    with pytest.raises(ValueError, match="row 5"):
        protect_file(tmp_path / "z.npz", tmp_path / "q.npz", mech, key=key, eraser=er)
    with pytest.raises(ValueError, match="neither a concept eraser nor a profile"):
        load_eraser(src)
    assert load_eraser(eraser_path(prof)).dim == 16 and load_eraser(er) is er
    # the release takes the step itself: it does not read concept files (release/ is below
    # concepts/ in docs/architecture.md)
    with pytest.raises(TypeError, match="eraser must be a pre-noise step"):
        protect_file(src, tmp_path / "q.npz", mech, key=key, eraser=prof)
    assert not (tmp_path / "q.npz").exists()


def test_cli_protect_erase(tmp_path):
    from typer.testing import CliRunner

    from privembed.cli import app
    from privembed.concepts import ConceptEraser

    rng = np.random.default_rng(1)
    z = rng.integers(0, 2, 200)
    X = rng.standard_normal((200, 8))
    X[:, 1] += 2.0 * z
    ConceptEraser.fit(X, z, metadata={"concept": "toy"}).save(tmp_path / "toy.eraser.npz")
    write_embeddings(tmp_path / "e.npz", X.astype(np.float32))
    r = CliRunner().invoke(app, ["protect", str(tmp_path / "e.npz"), "-o", str(tmp_path / "o.npz"),
                                 "-m", "laplace", "--epsilon", "50", "--erase",
                                 str(tmp_path / "toy.eraser.npz"), "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert read_metadata(tmp_path / "o.npz")["concept_erasure"]["concept"] == "toy"


def test_typed_keys_fast_paths_equal_record_key():
    from privembed.keys.ledger import record_key
    from privembed.release import Release

    rel = Release(LaplaceMechanism(epsilon=5.0), rng=0)
    for ids in (
        ["a", "é", "日本", ""],
        [1, -7, 10**30],
        ["x\udc80y", "b"],  # a lone surrogate: the slow path
        [np.int64(3), "3"],
    ):
        assert rel._typed_keys(ids, len(ids)) == [record_key(r) for r in ids]
    with pytest.raises(ValueError, match="row 1"):
        rel._typed_keys([1, True], 2)


def test_row_digests_and_commitments_equal_their_definitions():
    import hashlib

    from privembed.keys.keyed import tag_commitment, tag_commitments
    from privembed.release.core import _row_digests

    Y = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)[:, ::-1]  # a view
    assert _row_digests(Y) == [hashlib.sha256(r.tobytes()).hexdigest()[:32] for r in Y]
    assert _row_digests(Y[:0]) == []
    tags = [bytes([i]) * 32 for i in range(4)]
    assert (
        tag_commitments(tags)
        == [tag_commitment(t) for t in tags]
        == [hashlib.sha256(b"privembed/tag-commitment\x00" + t).hexdigest()[:32] for t in tags]
    )


@pytest.mark.parametrize("ledger", [False, True])
def test_a_batch_refused_for_its_rows_can_be_corrected_and_given_again(tmp_path, ledger):
    """Ids are taken only once a batch is drawn: a NaN row refuses the batch, and the corrected
    batch with the same ids is then accepted (not refused as a repeat of itself)."""
    from privembed import DataError
    from privembed.keys.ledger import Ledger
    from privembed.release import Release

    X = np.random.default_rng(0).standard_normal((5, 8))
    bad = X.copy()
    bad[3, 2] = np.nan
    ids = [f"r{i}" for i in range(5)]
    led = Ledger(tmp_path / "l.db") if ledger else None
    with Release(LaplaceMechanism(epsilon=5.0), key=bytes(32), ledger=led) as rel:
        with pytest.raises(DataError, match="row 3"):
            rel.protect(bad, ids)
        Y = rel.protect(X, ids)
        assert Y.shape == (5, 8) and np.isfinite(Y).all()
        from privembed.release import DuplicateIds

        with pytest.raises(DuplicateIds):
            rel.protect(X[:1], ids[:1])
        if ledger:
            rel.commit()
    if led is not None:
        led.close()


def test_a_release_accounts_its_guarantee_once(tmp_path, monkeypatch):
    """The charge printed and the charge the ledger stages are one cost_of of the guarantee
    (issue 25: it ran twice per release, once for the text and once for the ledger); without
    a ledger the text still has its own."""
    import privembed.keys.ledger_staged as ledger_mod
    import privembed.release.policy as policy_mod
    from privembed.keys.ledger import Ledger
    from privembed.release import protect

    calls: list[str] = []
    real = policy_mod.cost_of

    def counting(where):
        def f(g):
            calls.append(where)
            return real(g)

        return f

    monkeypatch.setattr(policy_mod, "cost_of", counting("text"))
    monkeypatch.setattr(ledger_mod, "cost_of", counting("ledger"))
    X = np.random.default_rng(0).standard_normal((3, 8))
    with Ledger(tmp_path / "l.db") as led:
        protect(X, LaplaceMechanism(epsilon=5.0), ids=["a", "b", "c"], ledger=led)
    assert calls == ["ledger"]
    calls.clear()
    protect(X, LaplaceMechanism(epsilon=5.0), rng=1)
    assert calls == ["text"]
