"""``privembed index|search|protect-stream``: happy paths and one-line errors for bad input."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from privembed.cli import app
from privembed.data.io import read_embeddings, write_embeddings
from privembed.integrations.stores import open_store

from .conftest import near_copies

runner = CliRunner()


def _ok(args, **kw):
    r = runner.invoke(app, [str(a) for a in args], **kw)
    assert r.exit_code == 0, r.output
    return r


def _assert_user_error(result, pattern):
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert "Traceback" not in result.output
    assert pattern in err, err


# ---- index / search ---------------------------------------------------------------------------
def test_index_search_roundtrip(tmp_path, emb_file, key_file):
    src, X = emb_file
    write_embeddings(tmp_path / "q.npz", near_copies(X[:3]), ids=["q0", "q1", "q2"])
    db = tmp_path / "db"
    r = _ok(
        [
            "index",
            src,
            "--store",
            "chroma",
            "--path",
            db,
            "-m",
            "gaussian",
            "--epsilon",
            "1e7",
            "--delta",
            "1e-5",
            "--key-file",
            key_file,
        ]
    )
    assert "indexed 200 of 200 vectors" in r.stderr
    r = _ok(
        [
            "search",
            "--store",
            "chroma",
            "--path",
            db,
            "--query-embeddings",
            tmp_path / "q.npz",
            "-k",
            "2",
            "--json",
        ]
    )
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert [q["query"] for q in out] == ["q0", "q1", "q2"]
    assert [q["hits"][0]["id"] for q in out] == ["r0", "r1", "r2"]
    assert all(len(q["hits"]) == 2 for q in out)
    # a second index run with the same key and mechanism is idempotent (same ids, same vectors)
    _ok(
        [
            "index",
            src,
            "--store",
            "chroma",
            "--path",
            db,
            "-m",
            "gaussian",
            "--epsilon",
            "1e7",
            "--delta",
            "1e-5",
            "--key-file",
            key_file,
        ]
    )
    with open_store("chroma", db, create=False) as s:
        assert s.count() == 200 and s.info["embedding_model"] == "toy"
    # the table output names the treatment
    r = _ok(["search", "--store", "chroma", "--path", db, "--query-embeddings", tmp_path / "q.npz"])
    assert "query treatment: gaussian: the plain query, cosine" in " ".join(r.stderr.split())
    assert "r0" in r.stdout


def read_parquet_columns(path):
    import pyarrow.parquet as pq

    return pq.read_schema(path).names


def test_index_protected_file_and_metadata_columns(tmp_path, key_file):
    X = np.random.default_rng(0).standard_normal((50, 16)).astype(np.float32)
    src = tmp_path / "e.parquet"
    write_embeddings(
        src,
        X,
        ids=list(range(50)),
        metadata={"embedding_model": "toy", "dim": 16},
        extra=pa.table({"lang": ["en"] * 50, "text": ["secret"] * 50}),
    )
    prot = tmp_path / "p.parquet"
    _ok(
        [
            "protect",
            src,
            "-o",
            prot,
            "-m",
            "projection",
            "--epsilon",
            "1e6",
            "--delta",
            "1e-5",
            "--k",
            "16",
            "--kind",
            "srht",
            "--key-file",
            key_file,
            "--keep-column",
            "lang",  # the text column is dropped: only what is named leaves unprotected
        ]
    )
    assert read_parquet_columns(prot) == ["id", "lang", "embedding"]
    # a protected file is indexed as it is, under the configuration it records
    r = _ok(
        ["index", prot, "--store", "faiss", "--path", tmp_path / "db", "--metadata-column", "lang"]
    )
    assert "the same public projection" in " ".join(r.stderr.split())
    with open_store("faiss", tmp_path / "db", create=False) as s:
        info = s.info
        hit = s.search(np.ones(16), k=1)[0][0]
    assert info["protection"]["mechanism"]["mechanism"] == "projection"
    # SRHT with k = d = 16 is an exact isometry: with tiny noise the neighbours are exact
    assert info["dim_in"] == 16 and info["dim"] == 16
    assert hit.metadata == {"lang": "en"}  # only the named column; the text stays home
    write_embeddings(tmp_path / "q.npy", X[:2])
    r = _ok(
        [
            "search",
            "--store",
            "faiss",
            "--path",
            tmp_path / "db",
            "--query-embeddings",
            tmp_path / "q.npy",
            "--json",
            "-k",
            "1",
        ]
    )
    assert [q["hits"][0]["id"] for q in map(json.loads, r.stdout.splitlines())] == ["0", "1"]


def _index_none(tmp_path, src):
    db = tmp_path / "db"
    _ok(["index", src, "--store", "faiss", "--path", db, "-m", "none"])
    return db


def test_search_json_is_json_lines_one_object_per_query(tmp_path, emb_file):
    """Issue 28: --json said "one line per query" and printed one indented array."""
    src, X = emb_file
    db = _index_none(tmp_path, src)
    write_embeddings(tmp_path / "q.npz", near_copies(X[:5]), ids=[f"q{i}" for i in range(5)])
    args = ["search", "--store", "faiss", "--path", db, "--query-embeddings", tmp_path / "q.npz"]
    r = _ok([*args, "-k", "2", "--json"])
    lines = r.stdout.splitlines()
    assert len(lines) == 5 and all(line.startswith("{") for line in lines)
    out = [json.loads(line) for line in lines]
    assert [q["query"] for q in out] == [f"q{i}" for i in range(5)]
    assert [q["hits"][0]["id"] for q in out] == [f"r{i}" for i in range(5)]
    # a -m none collection holds plain vectors: its cosines are exact, and say so
    assert {q["score_kind"] for q in out} == {"exact cosine (unprotected vectors)"}
    table = _ok(args)
    assert "exact cosine (unprotected vectors)" in " ".join(table.stdout.split())
    assert "cosine to the protected vector" not in table.stdout
    # any batch size gives the same lines
    assert _ok([*args, "-k", "2", "--json", "--batch-queries", "2"]).stdout == r.stdout
    _assert_user_error(
        runner.invoke(app, [str(a) for a in [*args, "--batch-queries", "0"]]),
        "--batch-queries must be >= 1, got --batch-queries=0",
    )


def test_search_draws_progress_per_batch_and_leaves_stdout_to_the_results(
    tmp_path, emb_file, monkeypatch
):
    """A query file gets a progress bar (on a terminal: stderr); results piped from stdout
    must not be drawn into the bar's console, so stdout is not redirected unless a terminal."""
    import contextlib

    from privembed._cli import common

    src, X = emb_file
    db = _index_none(tmp_path, src)
    write_embeddings(tmp_path / "q.npz", near_copies(X[:5]), ids=[f"q{i}" for i in range(5)])
    seen = []

    @contextlib.contextmanager
    def spy(description, *, unit="rows", redirect_stdout=True):
        seen.append((description, unit, redirect_stdout))
        yield (lambda n: seen.append(("total", n))), (lambda k: seen.append(("advance", k)))

    monkeypatch.setattr(common, "progress_callback", spy)
    r = _ok(["search", "--store", "faiss", "--path", db, "--query-embeddings",
             tmp_path / "q.npz", "--json", "--batch-queries", "2"])  # fmt: skip
    assert len(r.stdout.splitlines()) == 5
    assert seen == [("searching", "queries", False), ("total", 5), ("advance", 2),
                    ("advance", 2), ("advance", 1)]  # fmt: skip


def test_index_json_carries_the_library_setting_note(tmp_path, emb_file, key_file):
    """index prints the setting note index_file computed (issue 25.4), with what the evidence
    says beside a vacuous guarantee (issue 37.4); none for -m none."""
    from privembed import GaussianMechanism
    from privembed.evaluation.evidence import with_evidence
    from privembed.release import setting_note

    src, X = emb_file
    r = _ok(["index", src, "--store", "faiss", "--path", tmp_path / "db", "-m", "gaussian",
             "--epsilon", "50", "--delta", "1e-5", "--key-file", key_file, "--json"])  # fmt: skip
    got = json.loads(r.stdout)["setting"]
    mech = GaussianMechanism(epsilon=50.0, delta=1e-5)
    note = setting_note(mech, X.shape[1])
    want = with_evidence(note, mech, keyed=True, ledger=False).to_dict()
    assert note.vacuous and got["evidence"] and got["evidence"] == want["evidence"]
    assert got == json.loads(json.dumps(want))
    r = _ok(["index", src, "--store", "faiss", "--path", tmp_path / "db2", "-m", "none", "--json"])
    assert json.loads(r.stdout)["setting"] is None


def test_estimated_cosines_are_labelled_and_stay_in_range(tmp_path, emb_file, key_file):
    """Issue 28: a Gaussian collection printed "estimated clean cosine 1.5164"."""
    src, X = emb_file
    db = tmp_path / "db"
    _ok(["index", src, "--store", "faiss", "--path", db, "-m", "gaussian", "--epsilon", "50",
         "--delta", "1e-5", "--key-file", key_file])  # fmt: skip
    write_embeddings(tmp_path / "q.npz", near_copies(X[:40]), ids=[f"q{i}" for i in range(40)])
    args = ["search", "--store", "faiss", "--path", db, "--query-embeddings", tmp_path / "q.npz"]
    out = [json.loads(line) for line in _ok([*args, "-k", "3", "--json"]).stdout.splitlines()]
    assert {q["score_kind"] for q in out} == {"estimated clean cosine"}
    hits = [h for q in out for h in q["hits"]]
    assert all(-1.0 <= h["interval"][0] <= h["cosine"] <= h["interval"][1] <= 1.0 for h in hits)
    assert max(h["cosine"] for h in hits) == 1.0  # clipped: unbiased estimates passed 1
    table = " ".join(_ok([*args, "-k", "3"]).stdout.split())
    assert "estimated clean cosine [95% interval]" in table
    scores = [float(x) for x in re.findall(r"-?\d\.\d{4}", table)]
    assert len(scores) == 120 and max(scores) <= 1.0, scores


@pytest.mark.parametrize(
    "extra,pattern",
    [
        ([], "is not protected; pass --mechanism NAME"),
        (["-m", "laplace"], "epsilon"),
        (
            ["-m", "laplace", "--epsilon", "5", "--store", "milvus"],
            "is not one of 'chroma', 'qdrant', 'faiss'",
        ),
        (["-m", "laplace", "--epsilon", "5", "--collection", "a/b"], "collection must be 3-512"),
        (["-m", "laplace", "--epsilon", "5", "--metadata-column", "nope"], "no column(s) ['nope']"),
        (["-m", "laplace", "--epsilon", "5", "--seed", "1", "--key-file", "k"], "not both"),
        (
            ["-m", "laplace", "--epsilon", "5", "--budget-epsilon", "1"],
            "needs a ledger: give --ledger",
        ),
    ],
)
def test_index_bad_input(tmp_path, emb_file, extra, pattern):
    src, _ = emb_file
    r = runner.invoke(app, ["index", str(src), "--path", str(tmp_path / "db"), *extra])
    _assert_user_error(r, pattern)


def test_index_and_search_errors(tmp_path, emb_file, key_file):
    src, _ = emb_file
    db = str(tmp_path / "db")
    _assert_user_error(
        runner.invoke(app, ["index", str(tmp_path / "nope.parquet"), "--path", db, "-m", "none"]),
        "file not found",
    )
    write_embeddings(tmp_path / "noid.npy", np.ones((3, 4)))
    _assert_user_error(
        runner.invoke(
            app,
            [
                "index",
                str(tmp_path / "noid.npy"),
                "--path",
                db,
                "-m",
                "laplace",
                "--epsilon",
                "5",
                "--key-file",
                str(key_file),
            ],
        ),
        "has no record ids",
    )
    _ok(["index", src, "--path", db, "-m", "none"])
    _assert_user_error(
        runner.invoke(app, ["index", str(src), "--path", db, "-m", "laplace", "--epsilon", "5"]),
        "mixing them makes scores incomparable",
    )
    _assert_user_error(runner.invoke(app, ["search", "--path", db]), "not both or neither")
    _assert_user_error(
        runner.invoke(app, ["search", "q", "--path", str(tmp_path / "nodb")]), "store not found"
    )
    _assert_user_error(
        runner.invoke(app, ["search", "q", "--path", db, "--collection", "other"]),
        "has no chroma collection 'other' (collections: privembed)",
    )
    write_embeddings(tmp_path / "q5.npy", np.ones((1, 5)))
    _assert_user_error(
        runner.invoke(
            app, ["search", "--path", db, "--query-embeddings", str(tmp_path / "q5.npy")]
        ),
        "query has dimension 5",
    )


# ---- protect-stream ---------------------------------------------------------------------------
def _jsonl(n=25, d=6, seed=0, extra=True):
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        obj = {"id": f"r{i}", "embedding": rng.standard_normal(d).tolist()}
        if extra:
            obj["tag"] = i % 2
        lines.append(json.dumps(obj))
    return ("\n".join(lines) + "\n").encode()


MECH = ["-m", "gaussian", "--epsilon", "5", "--delta", "1e-5"]


def test_stream_jsonl_roundtrip_equals_protect(tmp_path, key_file):
    data = _jsonl()
    r = _ok(["protect-stream", *MECH, "--key-file", key_file, "--batch-rows", "4"], input=data)
    out = [json.loads(line) for line in r.stdout_bytes.decode().splitlines()]
    assert [sorted(o) for o in out] == [["embedding", "id"]] * 25  # other fields are dropped
    r = _ok(
        [
            "protect-stream",
            *MECH,
            "--key-file",
            key_file,
            "--batch-rows",
            "4",
            "--keep-field",
            "tag",
        ],
        input=data,
    )
    out = [json.loads(line) for line in r.stdout_bytes.decode().splitlines()]
    assert [o["id"] for o in out] == [f"r{i}" for i in range(25)]
    assert [o["tag"] for o in out] == [i % 2 for i in range(25)]  # kept on request
    # the same file through `privembed protect` (batch size does not matter with a key)
    (tmp_path / "in.jsonl").write_bytes(data)
    _ok(
        [
            "protect",
            tmp_path / "in.jsonl",
            "-o",
            tmp_path / "p.jsonl",
            *MECH,
            "--key-file",
            key_file,
        ]
    )
    ref = read_embeddings(tmp_path / "p.jsonl")
    np.testing.assert_array_equal(np.array([o["embedding"] for o in out]), ref.X)
    # files instead of pipes; jsonl -> npy
    _ok(
        [
            "protect-stream",
            *MECH,
            "--key-file",
            key_file,
            "-i",
            tmp_path / "in.jsonl",
            "-o",
            tmp_path / "o.npy",
            "--out-format",
            "npy",
        ]
    )
    np.testing.assert_array_equal(np.load(tmp_path / "o.npy"), ref.X)


def test_stream_npy_roundtrip_keeps_dtype_and_is_seedable():
    X = np.random.default_rng(1).standard_normal((30, 5)).astype(np.float32)
    buf = io.BytesIO()
    np.save(buf, X)
    args = [
        "protect-stream",
        "-m",
        "laplace",
        "--epsilon",
        "50",
        "--in-format",
        "npy",
        "--seed",
        "4",
    ]
    a = _ok([*args, "--batch-rows", "7"], input=buf.getvalue())
    b = _ok([*args, "--batch-rows", "7"], input=buf.getvalue())
    Y = np.load(io.BytesIO(a.stdout_bytes))
    assert Y.shape == X.shape and Y.dtype == np.float32
    np.testing.assert_array_equal(Y, np.load(io.BytesIO(b.stdout_bytes)))
    assert np.allclose(np.linalg.norm(Y, axis=1), 1.0, atol=1e-5)
    lines = _ok([*args, "--out-format", "jsonl"], input=buf.getvalue()).stdout_bytes.splitlines()
    assert json.loads(lines[29])["id"] == 29


@pytest.mark.parametrize(
    "stdin,extra,pattern",
    [
        (
            b'{"id": 1, "embedding": [1, 2]}\n{"id": 2, "embedding": [1]}\n',
            [],
            "stdin:2: embedding has 1 values, expected 2",
        ),
        (b'{"id": 1, "embedding": [1, 2]}\nnot json\n', [], "stdin:2: invalid JSON"),
        (b'{"id": 1}\n', [], "stdin:1: missing or empty 'embedding'"),
        (b'{"embedding": [1, 2]}\n', ["--key-file", "KEY"], "stdin:1: missing 'id'"),
        (b'{"id": 1, "embedding": [0, 0]}\n', [], "all-zero row(s) (first: row 0)"),
        (b"", [], "stdin contains no embeddings"),
        (b"\x93NUMPY garbage", ["--in-format", "npy"], "not a .npy stream"),
        (b"x", ["--in-format", "npy", "--key-file", "KEY"], "NPY input carries no record ids"),
        (b"x", ["--in-format", "csv"], "is not one of 'jsonl', 'npy'"),
    ],
)
def test_stream_bad_input(stdin, extra, pattern, key_file):
    extra = [str(key_file) if a == "KEY" else a for a in extra]
    r = runner.invoke(
        app, ["protect-stream", "-m", "laplace", "--epsilon", "5", *extra], input=stdin
    )
    _assert_user_error(r, pattern)


def test_stream_truncated_npy_stops_with_an_error():
    buf = io.BytesIO()
    np.save(buf, np.ones((10, 4)))
    r = runner.invoke(
        app,
        [
            "protect-stream",
            "-m",
            "laplace",
            "--epsilon",
            "5",
            "--in-format",
            "npy",
            "--batch-rows",
            "4",
        ],
        input=buf.getvalue()[:-40],
    )
    _assert_user_error(r, "ended early")


def test_search_with_the_ledger_refuses_a_rolled_back_record(tmp_path, emb_file, key_file):
    """Issue 24, finding 10, through the command line: `index` a file with payloads under a
    ledger, re-index an edited record, restore the store's old copy: `search --rerank` with
    `--ledger` refuses the old payload in one line (exit 2); without it the old copy opens."""
    import shutil

    src, _ = emb_file
    db, snap, led = tmp_path / "db", tmp_path / "snap", tmp_path / "ledger.sqlite"
    common = ["--store", "faiss", "--path", db, "-m", "laplace", "--epsilon", "40",
              "--key-file", key_file, "--payloads", "--ledger", led]  # fmt: skip
    _ok(["index", src, *common])
    shutil.copytree(db, snap)
    table = read_embeddings(src)
    ids = list(table.ids) if table.ids is not None else list(range(table.n))
    edited = np.asarray(table.X[:1], dtype=np.float64) * -1.0
    write_embeddings(tmp_path / "edit.parquet", edited, ids=ids[:1])
    _ok(["index", tmp_path / "edit.parquet", *common])
    write_embeddings(tmp_path / "q.npz", np.asarray(table.X[:1]), ids=["q0"])
    search = ["search", "--store", "faiss", "--path", db, "--query-embeddings",
              tmp_path / "q.npz", "--key-file", key_file, "--rerank", "20", "-k", "3", "--json"]  # fmt: skip
    _ok([*search, "--ledger", led])  # the current copy opens
    shutil.rmtree(db)
    shutil.copytree(snap, db)
    _ok(search)  # without the ledger the rollback cannot be seen
    before = led.read_bytes()
    r = runner.invoke(app, [str(a) for a in [*search, "--ledger", led]])
    assert r.exit_code == 2, r.output
    assert "another release of the record" in r.output and len(r.output.strip().splitlines()) == 1
    assert led.read_bytes() == before  # read only


def test_search_prints_the_k_it_fetched_and_what_a_query_costs(tmp_path, emb_file, key_file):
    """Issue 38: search --recall did not say which k' it used; it prints k', the payloads opened
    and the bytes a query fetches (the advice's cost model), and a sealed search its full fetch."""
    from privembed.keys.payload import payload_size

    src, X = emb_file
    n, d = X.shape
    _ok(["index", src, "--store", "faiss", "--path", tmp_path / "db", "-m", "laplace",
         "--epsilon", "50", "--key-file", key_file, "--payloads"])  # fmt: skip
    write_embeddings(tmp_path / "q.npz", near_copies(X[:5]), ids=[f"q{i}" for i in range(5)])
    r = _ok(["search", "--store", "faiss", "--path", tmp_path / "db", "--query-embeddings",
             tmp_path / "q.npz", "--key-file", key_file, "--rerank", "20", "-k", "3"])  # fmt: skip
    want = 20 * (4 * d + 16 + payload_size(d)) + 4 * d
    assert "k' = 20 candidates per query" in r.output and "20 payloads opened" in r.output
    assert f"{want / 1e6:.2f} MB fetched per query" in r.output
    _ok(["index", src, "--store", "faiss", "--path", tmp_path / "sealed", "--sealed",
         "--key-file", key_file])  # fmt: skip
    r = _ok(["search", "--store", "faiss", "--path", tmp_path / "sealed", "--query-embeddings",
             tmp_path / "q.npz", "--key-file", key_file, "-k", "3"])  # fmt: skip
    assert f"every one of the {n:,} payloads fetched" in " ".join(r.output.split())
