"""`privembed evaluate` passes the Mahalanobis and token-attack options through to the sweep."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner


def test_mask_delta_and_attack_lr_reach_the_sweep(tmp_path):
    from privembed.cli import app
    from privembed.data.io import write_embeddings

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 8)).astype(np.float32)
    ids = [f"r{i}" for i in range(40)]
    write_embeddings(tmp_path / "emb.parquet", X, ids=ids)
    mask = np.array([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    np.save(tmp_path / "mask.npy", mask)
    words = ["alpha", "beta", "gamma", "delta"]
    with (tmp_path / "texts.jsonl").open("w") as fh:
        for i, rid in enumerate(ids):
            fh.write(json.dumps({"id": rid, "text": f"note {words[i % 4]} {i}"}) + "\n")
    out = tmp_path / "report"
    args = [
        "evaluate", str(tmp_path / "emb.parquet"), "-o", str(out),
        "--mechanisms", "mahalanobis", "--epsilon", "5", "--runs", "1",
        "--profile", str(tmp_path / "mask.npy"), "--mask-delta", "0.01,0.5",
        "--texts", str(tmp_path / "texts.jsonl"), "--attack-epochs", "1", "--attack-lr", "0.003",
        "--no-linkage", "--n-queries", "0",
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    data = json.loads((out / "results.json").read_text())
    deltas = sorted(c["params"]["mask_delta"] for c in data["configs"])
    assert deltas == [0.01, 0.5]
    # the guarantees differ: a larger mask_delta bounds the worst-direction (implied l2) epsilon
    by_delta = {c["params"]["mask_delta"]: c["guarantee"] for c in data["configs"]}
    l2 = {d: g["implied"][0]["epsilon"] for d, g in by_delta.items()}
    assert l2[0.5] < l2[0.01]
    # the token attacker's settings are part of the results file's identity (its header)
    header = json.loads((out / "runs.jsonl").read_text().splitlines()[0])
    attack = [json.loads(p) for p in header["privacy"] if "token_inference" in p]
    assert attack[0]["token_inference"] == {"hidden": [256], "epochs": 1, "lr": 0.003, "top_k": 10}
