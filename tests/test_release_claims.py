"""Claims of docs/security.md about releases, ids, keys, files and the ledger, each checked
through the command line or the release path on the property it states (issue 31: these
claims were only partly checked, or checked through a private helper)."""

from __future__ import annotations

import base64
import functools
import json
import os
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import GaussianMechanism, LaplaceMechanism
from privembed.cli import app
from privembed.data.io import read_embeddings, sidecar_path, write_embeddings
from privembed.keys.keyed import content_ids, key_id, keygen, load_key
from privembed.keys.ledger import Ledger
from privembed.release import DuplicateIds, Release, protect

from ._reads import holder_reads

runner = CliRunner()
KEY = bytes(range(32))
SCRIPT = Path(sys.executable).with_name("privembed")


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def _said(r) -> str:
    return " ".join(r.stderr.split())


def _jsonl(path: Path, X: np.ndarray, ids=None) -> Path:
    lines = []
    for i, x in enumerate(X):
        row = {"embedding": [float(v) for v in x]}
        if ids is not None:
            row = {"id": ids[i], **row}
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def key_file(tmp_path) -> Path:
    p = tmp_path / "release.key"
    keygen(p)
    return p


# ---- keyed noise needs real ids -----------------------------------------------------------


def test_cli_vectors_without_ids_are_refused_then_bound_to_content(tmp_path, key_file):
    """Two files of vectors without ids: line 1 of each is another record. Refused without
    ids; with --ids-from-content each row is named by its content under the key, so the
    same vector in both files is one record (free when re-released) and the two different
    first lines are two records with independent noise."""
    rng = np.random.default_rng(3)
    shared = rng.standard_normal(8)
    a_rows = np.vstack([rng.standard_normal(8), shared])
    b_rows = np.vstack([rng.standard_normal(8), shared])
    a, b = _jsonl(tmp_path / "a.jsonl", a_rows), _jsonl(tmp_path / "b.jsonl", b_rows)
    led = tmp_path / "l.db"
    common = ["-m", "laplace", "--epsilon", "20", "--key-file", key_file, "--ledger", led]
    r = _cli("protect", a, "-o", tmp_path / "oa.parquet", *common)
    assert r.exit_code == 2 and "need record ids" in _said(r), r.output
    assert not (tmp_path / "oa.parquet").exists()
    for f in (a, b):
        r = _cli("protect", f, "-o", tmp_path / f"o{f.stem}.parquet", *common, "--ids-from-content")
        assert r.exit_code == 0, r.output
    ya, yb = (read_embeddings(tmp_path / f"o{s}.parquet").X for s in "ab")
    key = load_key(key_file)
    ca, cb = content_ids(key, X=a_rows), content_ids(key, X=b_rows)
    assert ca[0] != cb[0] and ca[1] == cb[1]
    with Ledger(led, readonly=True) as L:
        spent = {s.record_id: s for s in L.spent()}
    assert set(spent) == {"s:" + c for c in {*ca, *cb}}  # three records, named by content
    assert spent["s:" + ca[1]].releases == 2 and spent["s:" + ca[1]].free_releases == 1
    assert np.array_equal(ya[1], yb[1])  # the same content: the same record, same noise
    assert not np.any(ya[0] == yb[0])


@pytest.mark.slow
def test_cli_texts_without_ids_take_keyed_content_ids_on_request(tmp_path, key_file):
    """The text form, through the command line and the offline model: two files whose first
    lines differ are two records; a line they share is one."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps({"text": "the patient has diabetes"}) + "\n"
                 + json.dumps({"text": "follow-up in two weeks"}) + "\n")  # fmt: skip
    b.write_text(json.dumps({"text": "the patient has cancer"}) + "\n"
                 + json.dumps({"text": "follow-up in two weeks"}) + "\n")  # fmt: skip
    for f in (a, b):
        r = _cli("protect", f, "-o", tmp_path / f"o{f.stem}.parquet", "-m", "laplace",
                 "--epsilon", "20", "--key-file", key_file, "--ids-from-content",
                 "--backend", "onnx-int8")  # fmt: skip
        assert r.exit_code == 0, r.output
    ia, ib = (list(read_embeddings(tmp_path / f"o{s}.parquet").ids) for s in "ab")
    assert ia[0] != ib[0] and ia[1] == ib[1]
    assert ia == content_ids(load_key(key_file), texts=["the patient has diabetes",
                                                        "follow-up in two weeks"])  # fmt: skip


# ---- ids are typed canonically, whatever the format -------------------------------------------


def _ledger_keys(led: Path) -> set[str]:
    with Ledger(led, readonly=True) as L:
        return {s.record_id for s in L.spent()}


def test_ids_are_typed_alike_in_jsonl_and_parquet_and_float_ids_are_refused(tmp_path, key_file):
    X = np.random.default_rng(5).standard_normal((2, 8))
    outs = {}
    for kind, ids in (("int", [1, 2]), ("str", ["1", "2"])):
        for suffix in ("jsonl", "parquet"):
            src = tmp_path / f"{kind}.{suffix}"
            if suffix == "jsonl":
                _jsonl(src, X, ids)
            else:
                write_embeddings(src, X, ids=ids)
            led = tmp_path / f"{kind}-{suffix}.db"
            out = tmp_path / f"o-{kind}-{suffix}.parquet"
            r = _cli("protect", src, "-o", out, "-m", "laplace", "--epsilon", "20",
                     "--key-file", key_file, "--ledger", led)  # fmt: skip
            assert r.exit_code == 0, r.output
            prefix = "i:" if kind == "int" else "s:"
            assert _ledger_keys(led) == {prefix + "1", prefix + "2"}, (kind, suffix)
            outs[kind, suffix] = read_embeddings(out).X
    # one record in either format gets one noise; 1 and "1" are two records
    assert np.array_equal(outs["int", "jsonl"], outs["int", "parquet"])
    assert np.array_equal(outs["str", "jsonl"], outs["str", "parquet"])
    assert not np.any(outs["int", "jsonl"] == outs["str", "jsonl"])
    # float ids are refused in both formats, before anything is written
    pq = tmp_path / "float.parquet"
    write_embeddings(pq, X, ids=[1.0, 2.0])
    for src in (_jsonl(tmp_path / "float.jsonl", X, [1.0, 2.0]), pq):
        out = tmp_path / f"o-float-{src.suffix[1:]}.parquet"
        r = _cli("protect", src, "-o", out, "-m", "laplace", "--epsilon", "20",
                 "--key-file", key_file)  # fmt: skip
        assert r.exit_code == 2 and "record id must be an int or a string" in _said(r), src
        assert not out.exists()


# ---- duplicate ids: refused across batches, in bounded memory --------------------------------


def test_duplicate_checks_across_batches_hold_bounded_memory(monkeypatch):
    """A keyed release without a ledger remembers every id it released to refuse a repeat in
    a later batch. Past its spill threshold (lowered here from 10^6 to 2,000) the ids move to a
    temporary SQLite file: the Python heap (tracemalloc) then stays flat while 60,000 more ids
    go by, and a repeat of the first batch's id is still refused by name."""
    import privembed.release.core as release_mod

    monkeypatch.setattr(
        release_mod, "ReleasedIds", functools.partial(release_mod.ReleasedIds, spill=2_000)
    )
    m = LaplaceMechanism(epsilon=20.0)
    X = np.random.default_rng(0).standard_normal((1000, 2))
    with Release(m, key=KEY) as rel:
        for b in range(5):  # past the threshold, warm
            rel.protect(X, [f"record-{b}-{i:06d}-padding-to-make-ids-long" for i in range(1000)])
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for b in range(5, 65):
                rel.protect(
                    X, [f"record-{b}-{i:06d}-padding-to-make-ids-long" for i in range(1000)]
                )
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        # 60,000 ids of 44 characters held in a set: > 5 MB; a bounded check: well under 1 MB
        assert grown < 1_000_000, grown
        with pytest.raises(DuplicateIds, match="repeated: 'record-0-000007-padding"):
            rel.protect(X[:2], ["fresh-id", "record-0-000007-padding-to-make-ids-long"])


# ---- files carry the key id, never the key -----------------------------------------------------


def test_no_output_holds_the_key_in_any_form(tmp_path, key_file):
    """Outputs of every kind (Parquet, JSONL, .npy and its sidecar, a vector store with sealed
    payloads, the ledger), read as their holder reads them (raw, zip members, UTF-16/32, every
    base64 and hex run decoded): the key's id is there, the key in no form."""
    key = load_key(key_file)
    X = np.random.default_rng(1).standard_normal((6, 8)).astype(np.float32)
    src = tmp_path / "in" / "e.parquet"
    src.parent.mkdir()
    write_embeddings(src, X, ids=[f"r{i}" for i in range(6)])
    npy = tmp_path / "in" / "x.npy"
    np.save(npy, X)
    out = tmp_path / "out"
    out.mkdir()
    led = out / "l.db"
    common = ["-m", "laplace", "--epsilon", "20", "--key-file", key_file, "--ledger", led]
    for dst in ("o.parquet", "o.jsonl"):
        r = _cli("protect", src, "-o", out / dst, *common)
        assert r.exit_code == 0, r.output
    r = _cli("protect", npy, "-o", out / "o.npy", *common, "--ids-from-content")
    assert r.exit_code == 0, r.output
    assert sidecar_path(out / "o.npy").exists()
    r = _cli("index", src, "--store", "faiss", "--path", out / "db", *common, "--payloads")
    assert r.exit_code == 0, r.output
    seen = holder_reads(out)
    assert key_id(key).encode() in seen  # what names the key is there
    forms = {
        "raw": key,
        "hex": key.hex().encode(),
        "HEX": key.hex().upper().encode(),
        "base64": base64.b64encode(key).rstrip(b"="),
        "base64url": base64.urlsafe_b64encode(key).rstrip(b"="),
    }
    found = [name for name, form in forms.items() if form in seen or form[:16] in seen]
    assert found == []


# ---- every output block is checked finite ------------------------------------------------------


def test_a_non_finite_block_stops_the_release_before_anything_is_published(
    tmp_path, key_file, monkeypatch
):
    """The per-block finiteness check, reached: the fault is injected in the noise of the
    second batch (its draws overflow), after a first batch went to the temporary output. One
    error line, exit 2, no output, no temporary file, nothing committed, input untouched."""
    calls = {"n": 0}
    real = LaplaceMechanism._perturb

    def overflowing(self, X, source):
        Y = real(self, X, source)
        calls["n"] += 1
        if calls["n"] == 2:
            Y[0, 0] = np.inf
        return Y

    monkeypatch.setattr(LaplaceMechanism, "_perturb", overflowing)
    src = tmp_path / "e.parquet"
    write_embeddings(src, np.random.default_rng(2).standard_normal((6, 8)), ids=list(range(6)))
    before = src.read_bytes()
    out, led = tmp_path / "o.parquet", tmp_path / "l.db"
    r = _cli("protect", src, "-o", out, "-m", "laplace", "--epsilon", "20", "--key-file",
             key_file, "--ledger", led, "--batch-rows", "2", "--no-renormalize")  # fmt: skip
    err = r.stderr.strip()
    assert r.exit_code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, r.output
    assert "non-finite output" in _said(r) and calls["n"] == 2
    assert not out.exists() and src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.parquet", "release.key"]


# ---- a crash between commit and rename: charged, unpublished, listed by ledger show ----------


@pytest.mark.slow
def test_a_kill_between_commit_and_rename_is_listed_by_ledger_show(tmp_path, key_file):
    """SIGKILL sent by the process to itself at the named point after the ledger commit (no
    timing): no output, the release charged, and ``privembed ledger show`` lists it as charged
    but never published, with its destination."""
    if not SCRIPT.exists():
        pytest.skip(f"the console script is not installed next to {sys.executable}")
    src = tmp_path / "e.parquet"
    write_embeddings(src, np.random.default_rng(0).standard_normal((50, 8)), ids=list(range(50)))
    out, led = tmp_path / "o.parquet", tmp_path / "l.db"
    env = {**os.environ, "PRIVEMBED_FAULT_AT": "commit.after:SIGKILL"}
    r = subprocess.run(
        [str(SCRIPT), "protect", str(src), "-o", str(out), "-m", "laplace", "--epsilon", "5",
         "--key-file", str(key_file), "--ledger", str(led)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == -signal.SIGKILL, r.stderr[-500:]
    assert not out.exists()
    shown = _cli("ledger", "show", led)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.split())
    assert "1 release(s) were charged but never published" in text
    # the console wraps long lines (a long temporary path breaks anywhere): compare unwrapped
    assert "".join(f"50 record(s) -> {out.resolve()}".split()) in "".join(text.split())
    as_json = json.loads(_cli("ledger", "show", led, "--json").stdout)
    assert [u["destination"] for u in as_json["unpublished"]] == [str(out.resolve())]
    with Ledger(led, readonly=True) as L:
        assert len(L.spent()) == 50  # charged


# ---- ledger spent --id 1 finds the int and the string record ---------------------------------


def test_ledger_spent_finds_both_the_int_and_the_string_record(tmp_path):
    p = tmp_path / "l.db"
    with Ledger(p) as led:
        st = led.stage(LaplaceMechanism(epsilon=1.0))
        st.add(["i:1", "s:1", "s:x"])
        st.commit()
        st = led.stage(LaplaceMechanism(epsilon=2.0))
        st.add(["s:1"])  # the string record has spent more
        st.commit()
    r = _cli("ledger", "spent", p, "--id", "1", "--json")
    assert r.exit_code == 0, r.output
    rows = {row["ledger_key"]: row for row in json.loads(r.stdout)}
    assert set(rows) == {"i:1", "s:1"}
    assert rows["i:1"]["id"] == 1 and rows["s:1"]["id"] == "1"
    assert rows["s:1"]["epsilon"] == pytest.approx(2 * 1.0 + 2 * 2.0)
    assert rows["i:1"]["epsilon"] == pytest.approx(2 * 1.0)
    r = _cli("ledger", "spent", p, "--id", "x", "--json")
    assert [row["ledger_key"] for row in json.loads(r.stdout)] == ["s:x"]


# ---- the ledger never stores texts or vectors --------------------------------------------------


class _FakeEmbedder:
    """A unit vector seeded by the text (stands in for the model)."""

    def metadata(self):
        return {"embedding_model": "fake-model", "dim": 8, "normalized": True}

    def encode(self, texts):
        rows = []
        for t in texts:
            v = np.random.default_rng(sum(t.encode())).standard_normal(8)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32)


def _windows(row: bytes, width: int = 12) -> list[bytes]:
    return [row[i : i + width] for i in range(0, len(row) - width + 1, 4)]


def test_the_ledger_holds_no_text_and_no_vector_in_any_form(tmp_path, key_file):
    """Vectors (clean and protected, float32 and float64, raw or hex) and texts, searched in
    the ledger and its WAL files as their holder reads them: none is there; the typed ids and
    output digests are."""
    from privembed.release import protect_file

    X = np.random.default_rng(4).standard_normal((5, 8)).astype(np.float32)
    src = tmp_path / "e.parquet"
    write_embeddings(src, X, ids=[f"n{i}" for i in range(5)])
    led = tmp_path / "ledger" / "l.db"
    led.parent.mkdir()
    r = _cli("protect", src, "-o", tmp_path / "o.parquet", "-m", "laplace", "--epsilon", "20",
             "--key-file", key_file, "--ledger", led)  # fmt: skip
    assert r.exit_code == 0, r.output
    Y = read_embeddings(tmp_path / "o.parquet").X
    texts = ["Jane Roe was admitted with acute pancreatitis", "John Doe has a rare disease"]
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n"
                             for i, t in enumerate(texts)))  # fmt: skip
    protect_file(notes, tmp_path / "t.parquet", LaplaceMechanism(epsilon=20.0), key=key_file,
                 ledger=led, embedder=_FakeEmbedder())  # fmt: skip
    T = _FakeEmbedder().encode(texts)
    seen = holder_reads(led.parent)
    assert b"s:n0" in seen and b"s:t1" in seen  # the ledger's own content is visible
    for t in texts:
        for word in t.split()[:3]:
            assert word.encode() not in seen, word
    for M in (X, Y, T):
        for row in M:
            for form in (row.astype("<f4").tobytes(), row.astype("<f8").tobytes()):
                hits = [w for w in _windows(form) if w in seen]
                assert hits == [], (row[:3], hits[:2])


# ---- the compiled kernels fall back to numpy when they drift --------------------------------


@pytest.mark.slow
def test_drifting_kernels_are_refused_and_a_keyed_release_falls_back_to_numpy(monkeypatch):
    """One ulp of drift in the compiled normal draws (a numba release that draws differently):
    the self-check refuses the kernels with one warning, and a keyed release then draws what
    the pure-numpy path draws, bit for bit -- keyed noise does not depend on numba."""
    pytest.importorskip("numba")
    from privembed.core import _jit, _jit_kernels

    mech = GaussianMechanism(epsilon=5.0, delta=1e-5)
    X = np.random.default_rng(0).standard_normal((300, 16))
    ids = [f"r{i}" for i in range(300)]
    monkeypatch.setenv("PRIVEMBED_JIT", "0")
    monkeypatch.setattr(_jit, "_loaded", None)
    reference = protect(X, mech, ids=ids, key=KEY)  # numpy's draws
    monkeypatch.setenv("PRIVEMBED_JIT", "1")
    monkeypatch.setattr(_jit, "_loaded", None)
    real = _jit_kernels.normal_rows

    def drifting(gen, km, cm, pm, key, ctrs, out):
        real(gen, km, cm, pm, key, ctrs, out)
        out[-1, -1] = np.nextafter(out[-1, -1], np.inf)

    monkeypatch.setattr(_jit_kernels, "normal_rows", drifting)
    with pytest.warns(RuntimeWarning, match="do not reproduce numpy"):
        with Release(mech, key=KEY) as rel:
            rel.expect_rows(10**6)  # loads (and checks) the kernels now
            Y = rel.protect(X, ids)
    assert _jit.kernels(0) is None  # refused, once for the process
    assert np.array_equal(Y, reference)
