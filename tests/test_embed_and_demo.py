"""The offline embedder and the main job (loads the real all-MiniLM-L6-v2 model)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import DataError
from privembed.cli import app
from privembed.data.datasets import synthetic_clinical_notes
from privembed.data.io import read_embeddings

pytestmark = pytest.mark.slow
runner = CliRunner()


@pytest.fixture(scope="module")
def embedder():
    from privembed.data.embedders import Embedder

    return Embedder()


def test_embedder_offline_model(embedder):
    X = embedder.encode(
        [
            "the patient has diabetes",
            "the patient has diabetes mellitus",
            "stock markets fell sharply",
        ]
    )
    assert X.shape == (3, 384) and X.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=1e-5)
    # semantic sanity: the two medical sentences are closer to each other than to finance
    assert X[0] @ X[1] > X[0] @ X[2] + 0.3
    md = embedder.metadata()
    assert md == {
        "embedding_model": "all-MiniLM-L6-v2",
        "dim": 384,
        "normalized": True,
        "embedding_backend": md["embedding_backend"],
        "embedding_model_identity": embedder.identity,
    }
    assert md["embedding_backend"] in ("onnx", "torch")  # fp32 onnx keeps the model id
    with pytest.raises(DataError, match="empty or non-string"):
        embedder.encode(["ok", "  "])


def test_embed_and_protect_text_cli(tmp_path, embedder):
    corpus = tmp_path / "c.jsonl"
    notes = synthetic_clinical_notes(12, seed=3)
    corpus.write_text("".join(json.dumps({"id": n.id, "text": n.text}) + "\n" for n in notes))
    out = tmp_path / "e.parquet"
    r = runner.invoke(app, ["embed", str(corpus), "-o", str(out)])
    assert r.exit_code == 0, r.output
    t = read_embeddings(out)
    assert t.X.shape == (12, 384) and list(t.ids) == [n.id for n in notes]
    assert t.metadata["embedding_model"] == "all-MiniLM-L6-v2" and t.metadata["dim"] == 384
    # text input is embedded first, then protected
    p = tmp_path / "p.parquet"
    r = runner.invoke(
        app,
        ["protect", str(corpus), "-o", str(p), "-m", "laplace", "--epsilon", "200", "--seed", "0"],
    )
    assert r.exit_code == 0, r.output
    tp = read_embeddings(p)
    assert tp.metadata["protected"] and tp.metadata["embedding_model"] == "all-MiniLM-L6-v2"
    cos = np.einsum("ij,ij->i", tp.X, t.X)
    assert 0.2 < cos.mean() < 0.99


def test_demo_runs_and_reports(tmp_path):
    out = tmp_path / "demo.json"
    r = runner.invoke(app, ["demo", "--n", "40", "-o", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    rows = {row["configuration"]: row for row in res["rows"]}
    assert res["dim"] == 384 and len(rows) == 8
    strong = rows["gaussian(epsilon=5, delta=1e-05)"]
    weak = rows["laplace(epsilon=500)"]
    # more noise, less utility: the strong setting cannot match the weak one
    assert strong["mean_cosine"] < 0.1 < weak["mean_cosine"]
    assert weak["top1_retrieval"] > 0.9
    assert any("under-noises" in w for w in res["warnings"])


def test_demo_working_path_reproduces_its_advice_on_a_real_search():
    """The demo's second part makes advise's recommendation for its embeddings (the same call,
    the same defaults) and searches it for real: for 500 records the sealed mode (no vector in
    the store, every payload fetched, exact search), and past the sealed budget the best noise
    setting -- advise -> index with payloads (FAISS) -> search with re-rank, which meets the
    floor advise promised where plain search does not."""
    from privembed.demo import working_path
    from privembed.evaluation.modes import advise_modes

    rng = np.random.default_rng(0)
    C = rng.standard_normal((40, 48))
    X = C[rng.integers(0, 40, 500)] + 0.6 * rng.standard_normal((500, 48))
    p = working_path(X, seed=0, key=bytes(range(32)))  # a fixed key: a deterministic index
    assert p["advice"] == advise_modes(X, seed=0).sentence()  # one recommendation
    assert p["recommended"] == "sealed", p["advice"]
    assert p["recall_sealed_search"] == 1.0 and "no vector" in p["indexed"]
    assert all("defends" in t for t in p["threats"])
    # past the sealed budget: the best noise setting, indexed and searched
    assert p["recall_reranked_search"] >= 0.9 > p["recall_plain_search"], p
    assert p["k_prime"] <= 125 and p["reid_at_1"] > p["reid_blind"]
    assert any("candidate holder: does not defend" in t for t in p["noise_threats"])
