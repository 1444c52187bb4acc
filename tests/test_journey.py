"""The journey of the README and docs/integrations.md, end to end on real text.

300 sentences of gensim's Lee corpus (offline) go through embed -> keygen -> protect (keyed,
with a ledger) -> index -> search -> evaluate -> serve, the commands a new user types, with the
real all-MiniLM-L6-v2 model. Known answers:

* a query that is one of the notes finds that note first among the protected vectors (Laplace
  epsilon = 200 on 384-d unit vectors: its own release keeps E[cos] ~ 0.46 of the clean vector,
  against a spread of ~0.05 for the others);
* a paraphrase query ("bushfire near Sydney"), re-ranked by exact cosine inside the trust
  boundary, finds the note the clean search finds first (note 75, "Greater Sydney is ringed by
  fires ..."), with its text and its exact cosine.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from privembed.cli import app

pytestmark = pytest.mark.slow
runner = CliRunner()
QUERY = "bushfire near Sydney"


def _run(command: str, *more: str) -> str:
    """Run ``privembed <command> <more...>`` (``command`` split on spaces; ``more`` as is)."""
    args = [*command.split(), *more]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, (args, r.output)
    return r.stdout


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from privembed.evaluation.loaders import lee_background

    d = tmp_path_factory.mktemp("journey")
    with (d / "notes.jsonl").open("w", encoding="utf-8") as fh:
        for i, text in enumerate(lee_background(sentences=True)[:300]):
            fh.write(json.dumps({"id": i, "text": text, "lang": "en"}) + "\n")
    return d


def test_embed_protect_index_search_evaluate_serve(folder, monkeypatch):
    monkeypatch.chdir(folder)
    notes = [json.loads(line) for line in Path("notes.jsonl").read_text().splitlines()]

    # embed: every other field is kept
    summary = json.loads(_run("embed notes.jsonl -o emb.parquet --json"))
    assert summary["rows"] == 300 and summary["dim"] == 384 and summary["columns"] == ["lang"]
    t = pq.read_table("emb.parquet")
    assert t.column_names == ["id", "lang", "embedding"]
    X = np.asarray(t.column("embedding").to_pylist(), dtype=np.float64)

    # protect, keyed, with a ledger; the charge is stated
    kid = json.loads(_run("keygen -o release.key --json"))["key_id"]
    out = json.loads(
        _run(
            "protect emb.parquet -o protected.parquet -m laplace --epsilon 200 --key-file "
            "release.key --ledger ledger.db --budget-epsilon 1000 --budget-delta 1e-5 --json "
            "--keep-field lang"
        )
    )
    assert out["rows"] == 300 and out["mechanism"]["mechanism"] == "laplace"
    assert out["notes"] == ["kept as they are (not protected): lang"]
    info = " ".join(_run("info protected.parquet").split())
    assert kid in info and "laplace(epsilon=200" in info
    assert "releases: 300" in " ".join(_run("ledger show ledger.db").split())

    # index the protected file as it is; a note as the query finds itself first
    _run("index protected.parquet --store faiss --path . --collection notes -q "
         "--metadata-field lang")  # fmt: skip
    target = notes[42]
    res = [
        json.loads(line)  # JSON Lines: one object per query
        for line in _run(
            "search --store faiss --path . --collection notes -k 3 --texts notes.jsonl --json",
            target["text"],
        ).splitlines()
    ]
    top = res[0]["hits"][0]
    assert str(top["id"]) == "42" and top["text"] == target["text"]
    assert "cosine" in top and "cosine" in res[0]["score_kind"]
    assert top["metadata"] == {"lang": "en"}

    # index the texts with sealed payloads; exact re-ranking finds the clean top hit
    from privembed.data.embedders import Embedder

    q = Embedder().encode(QUERY).astype(np.float64)
    clean_top = int(np.argmax(X @ q))
    assert clean_top == 75 and "Sydney" in notes[75]["text"]
    _run("index notes.jsonl --path db --collection private -m laplace --epsilon 200 -q "
         "--key-file release.key --payloads --store-text")  # fmt: skip
    res = [
        json.loads(line)  # JSON Lines: one object per query
        for line in _run(
            "search --path db --collection private -k 3 --key-file release.key --rerank 50 --json",
            QUERY,
        ).splitlines()
    ]
    top = res[0]["hits"][0]
    assert res[0]["score_kind"] == "exact cosine"
    assert str(top["id"]) == "75" and top["text"] == notes[75]["text"]
    assert top["cosine"] == pytest.approx(float(X[75] @ q), abs=1e-4)

    # evaluate: a report
    _run("evaluate emb.parquet -o report --mechanisms laplace --epsilon 200 --runs 1 "
         "--n-queries 100")  # fmt: skip
    assert (folder / "report" / "index.html").stat().st_size > 1000
    results = json.loads((folder / "report" / "results.json").read_text())
    assert {c["label"] for c in results["summary"]} == {"laplace(epsilon=200)"}
    # serve: one request to /v1/embeddings with the same key
    from privembed.server import create_app, hash_api_key, load_config, running_server

    api_key = "pe-journey-test-key"
    Path("serve.toml").write_text(
        '[server]\nkey_file = "release.key"\n\n'
        '[models.notes]\nmechanism = "laplace"\nparams = { epsilon = 200.0 }\n\n'
        f'[[api_keys]]\nname = "journey"\nsha256 = "{hash_api_key(api_key)}"\n'
    )
    with running_server(create_app(load_config("serve.toml"))) as server:
        request = urllib.request.Request(
            server.base_url + "/embeddings",
            data=json.dumps({"model": "notes", "input": [notes[75]["text"]]}).encode(),
            headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            body = json.loads(response.read())
    y = np.asarray(body["data"][0]["embedding"])
    assert y.shape == (384,) and body["model"] == "notes"
    cos = float(y @ X[75] / np.linalg.norm(y))
    assert 0.2 < cos < 0.95  # protected: near the clean vector, not equal to it
