"""A private subspace in a vector store: the basis stays with the key holder (sealed beside the
collection), queries are projected on the client, exact re-rank opens the full vectors, k'
from the subspace profile, and the DP-PCA basis charged in the ledger for every record."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed.cli import app
from privembed.data.io import write_embeddings
from privembed.integrations.collection import ProtectedCollection, Searcher, index_file
from privembed.integrations.stores import open_store
from privembed.keys.keyed import keygen
from privembed.keys.ledger import Ledger, record_key
from privembed.mechanisms.subspace import SubspaceBasis, SubspaceMechanism

from .conftest import KEY, cosines

runner = CliRunner()


def _corpus(n: int = 600, d: int = 24, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Clustered unit rows (a few strong directions, as sentence embeddings have) and queries
    near some of them."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((12, d)) * np.r_[np.full(6, 2.0), np.full(d - 6, 0.3)]
    X = centres[rng.integers(0, 12, n)] + 0.4 * rng.standard_normal((n, d))
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    Q = X[:40] + 0.05 * rng.standard_normal((40, d))
    return X, (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)


def _basis_bytes(m: SubspaceMechanism) -> list[bytes]:
    """Every way the basis or mean could sit in a file: each row and the mean, float64 and
    float32, and short runs of their values."""
    out = []
    for a in (*m.basis, m.mean):
        for dt in ("<f8", "<f4", ">f8", ">f4"):
            b = np.ascontiguousarray(a, dtype=dt).tobytes()
            out += [b, b[: 4 * np.dtype(dt).itemsize]]
    return out


def test_the_basis_never_reaches_the_store_and_search_reranks_exactly(tmp_path):
    X, Q = _corpus()
    public = SubspaceBasis.from_embeddings(_corpus(seed=5)[0])  # other data of the same kind
    mech = SubspaceMechanism(basis=public, epsilon=30.0, k=6)
    ids = [f"r{i}" for i in range(len(X))]
    with ProtectedCollection.open("faiss", tmp_path / "db", "col", mechanism=mech, key=KEY,
                                  payloads=True) as col:  # fmt: skip
        Y = col.add(ids, X)
        assert Y.shape == (len(X), 6)
        col.save_profile(X[100:200], X, rng=0, source="documents")  # the sealed k' profile
        stored = col.store.search(mech.public_transform(X[:1]), 1, with_vectors=True)[0][0]
        assert stored.vector.shape == (6,)  # the store holds k-dimensional vectors
    files = [p for p in (tmp_path / "db").rglob("*") if p.is_file()]
    blob = b"".join(p.read_bytes() for p in files)
    for needle in _basis_bytes(mech):
        assert needle not in blob
    text = blob.decode("latin-1")
    for v in (*mech.basis[:, :3].ravel(), *mech.mean[:3]):
        assert f"{v:.6f}"[:8] not in text  # no decimal rendering either (JSON metadata)
    assert (tmp_path / "db" / ".privembed-arrays-col.sealed").exists()

    # a later process: the key opens the sealed basis; queries are projected on the client
    with Searcher("faiss", tmp_path / "db", "col", key=KEY) as s:
        res = s.search_vectors(Q, k=5, rerank=len(X))  # fetch everything: exactly the clean top 5
        clean = np.argsort(-cosines(X, Q), axis=1)[:, :5]
        assert [[int(h.id[1:]) for h in r.hits] for r in res] == clean.tolist()
        assert res[0].score_kind == "exact cosine"
        near = s.search_vectors(Q[:10], k=1, recall=0.9)  # k' from the subspace profile
        assert np.mean([r.hits[0].id == f"r{i}" for i, r in enumerate(near)]) >= 0.8
        plan = s.collection.planner()
        assert plan.profile.dim == 6 and plan.profile.norms is not None


def test_a_subspace_collection_needs_its_key_and_its_sealed_basis(tmp_path):
    X, _ = _corpus(200)
    mech = SubspaceMechanism(basis=SubspaceBasis.from_embeddings(X), epsilon=30.0, k=4)
    with pytest.raises(ValueError, match=r"give the key \(--key-file\)"):
        ProtectedCollection.open("faiss", tmp_path / "nokey", "col", mechanism=mech)
    assert not (tmp_path / "nokey" / ".privembed-arrays-col.sealed").exists()
    with ProtectedCollection.open("faiss", tmp_path / "db", "col", mechanism=mech,
                                  key=KEY) as col:  # fmt: skip
        col.add([f"r{i}" for i in range(len(X))], X)
    with pytest.raises(ValueError, match="keeps its basis and mean with the key holder"):
        ProtectedCollection(open_store("faiss", tmp_path / "db", "col", create=False))
    from privembed.keys.payload import PayloadError

    with pytest.raises(PayloadError):  # another key cannot open it
        ProtectedCollection(open_store("faiss", tmp_path / "db", "col", create=False),
                            key=bytes(32))  # fmt: skip
    (tmp_path / "db" / ".privembed-arrays-col.sealed").unlink()
    with pytest.raises(PayloadError, match="sealed copy"):
        ProtectedCollection(open_store("faiss", tmp_path / "db", "col", create=False), key=KEY)


def test_cli_index_dp_pca_charges_every_record_once_and_search_works(tmp_path):
    key = tmp_path / "k.key"
    keygen(key)
    X, Q = _corpus(500)
    src, qf = tmp_path / "e.parquet", tmp_path / "q.npz"
    write_embeddings(src, X, ids=[f"r{i}" for i in range(len(X))])
    write_embeddings(qf, Q[:5])
    led = tmp_path / "l.db"
    args = ["index", str(src), "--store", "faiss", "--path", str(tmp_path / "db"), "-m",
            "subspace", "--epsilon", "20", "--basis", "dp-pca", "--basis-epsilon", "1",
            "--basis-delta", "1e-5", "-p", "k=4", "--key-file", str(key), "--payloads",
            "--ledger", str(led)]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    err = " ".join(r.stderr.split())
    assert "basis: basis by DP-PCA, central (1, 1e-05)-DP, charged once" in err
    assert "composed: (41, 1e-05)-LDP" in err  # 2 x 20 + 1 for a record released once
    with Ledger(led, readonly=True) as L:
        spent = {s.record_id: s for s in L.spent()}
        assert set(spent) == {record_key(f"r{i}") for i in range(len(X))}
        assert all(s.releases == 2 for s in spent.values())  # the basis and the release
        configs = [c["mechanism"]["mechanism"] for c in L.summary()["configurations"]]
        assert sorted(configs) == ["subspace", "subspace-basis"]
    r = runner.invoke(app, ["search", "--store", "faiss", "--path", str(tmp_path / "db"),
                            "--query-embeddings", str(qf), "--key-file", str(key),
                            "--rerank", "500", "-k", "1", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert '"r0"' in r.stdout and "exact cosine" in r.stdout

    # usage errors: one line, exit 2, nothing written
    for extra, msg in (
        (["--basis", "dp-pca"], "needs its privacy parameters"),
        ([], "-m subspace needs a basis"),
        (["--basis", str(tmp_path / "nope.npz")], "basis not found"),
    ):
        bad = [a for a in args if a not in ("dp-pca",)]
        bad = bad[: bad.index("--basis")] + bad[bad.index("-p") :]
        bad[bad.index(str(tmp_path / "db"))] = str(tmp_path / "db2")
        r = runner.invoke(app, [*bad, *extra])
        assert r.exit_code == 2, r.output
        assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "db2").exists()
    r = runner.invoke(app, ["index", str(src), "--store", "faiss", "--path",
                            str(tmp_path / "db3"), "-m", "laplace", "--epsilon", "20",
                            "--basis", "dp-pca"])  # fmt: skip
    assert r.exit_code == 2 and "apply to -m subspace" in r.stderr


def test_index_file_with_a_public_basis_file(tmp_path):
    X, Q = _corpus(300)
    pub = tmp_path / "public.npz"
    write_embeddings(pub, _corpus(400, seed=7)[0])
    from privembed.mechanisms.subspace import basis_from

    b = basis_from(str(pub))
    assert b.source == "public" and b.metadata["public_data"] == "public.npz"
    saved = b.save(tmp_path / "basis.npz")
    assert basis_from(str(saved)).digest == b.digest
    src = tmp_path / "e.parquet"
    write_embeddings(src, X, ids=[f"r{i}" for i in range(len(X))])
    mech = SubspaceMechanism(basis=b, epsilon=40.0, k=5)
    out = index_file(src, "faiss", tmp_path / "db", "col", mechanism=mech, key=KEY,
                     payloads=True, profile_queries=Q[:20])  # fmt: skip
    assert out["rows"] == 300 and "public data" in out["guarantee"]


def test_cli_protect_with_a_public_basis_and_with_dp_pca(tmp_path):
    from privembed.data.io import read_embeddings

    X, _ = _corpus(300)
    src, pub = tmp_path / "e.parquet", tmp_path / "public.npz"
    write_embeddings(src, X, ids=[f"r{i}" for i in range(len(X))])
    write_embeddings(pub, _corpus(400, seed=7)[0])
    r = runner.invoke(app, ["protect", str(src), "-o", str(tmp_path / "p.npz"), "-m",
                            "subspace", "--epsilon", "30", "--basis", str(pub), "--k", "5",
                            "--noise", "purkayastha", "--seed", "0"])  # fmt: skip
    assert r.exit_code == 0, r.output
    t = read_embeddings(tmp_path / "p.npz")
    assert t.X.shape == (300, 5) and t.metadata["mechanism"]["noise"] == "purkayastha"
    assert set(t.metadata["mechanism"]["basis"]) == {"sha256", "shape"}  # by digest only
    assert "public data" in t.metadata["subspace"]["basis"]
    led = tmp_path / "l.db"
    r = runner.invoke(app, ["protect", str(src), "-o", str(tmp_path / "q.npz"), "-m",
                            "subspace", "--epsilon", "30", "--basis", "dp-pca",
                            "--basis-epsilon", "0.5", "--basis-delta", "1e-6", "--k", "4",
                            "--ledger", str(led)])  # fmt: skip
    assert r.exit_code == 0, r.output
    with Ledger(led, readonly=True) as L:
        assert all(s.releases == 2 for s in L.spent()) and len(L.spent()) == 300
