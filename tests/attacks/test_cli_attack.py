"""``privembed attack ...`` on small files: tables, JSON output, mechanism specs, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed.cli import app
from privembed.data.io import write_embeddings

from .conftest import bow_corpus

runner = CliRunner()


def _emb(tmp_path, X, name="e.npz", ids=None):
    p = tmp_path / name
    write_embeddings(
        p, np.asarray(X, dtype=np.float32), ids=ids, metadata={"embedding_model": "toy"}
    )
    return p


def _texts(tmp_path, texts, name="t.jsonl"):
    p = tmp_path / name
    p.write_text(
        "".join(json.dumps({"id": f"r{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    return p


def _ok(r):
    assert r.exit_code == 0, r.output
    return r


def test_linkage_on_files_aligns_by_id(tmp_path):
    X = np.random.default_rng(1).standard_normal((30, 16))
    ids = [f"r{i}" for i in range(30)]
    cand = _emb(tmp_path, X, "cand.npz", ids)
    perm = np.random.default_rng(2).permutation(30)[:12]
    prot = _emb(tmp_path, X[perm] + 0.01, "prot.npz", [ids[i] for i in perm])
    out = tmp_path / "l.json"
    _ok(
        runner.invoke(
            app,
            [
                "attack",
                "linkage",
                str(prot),
                "--candidates",
                str(cand),
                "--ks",
                "1,5",
                "-o",
                str(out),
            ],
        )
    )
    res = json.loads(out.read_text())
    assert res["top_k"] == {"1": 1.0, "5": 1.0} and res["n_candidates"] == 30
    assert res["chance"]["1"] == pytest.approx(1 / 30)


def test_linkage_and_averaging_on_a_mechanism_spec(tmp_path):
    X = np.random.default_rng(3).standard_normal((40, 32))
    src = _emb(tmp_path, X, ids=[f"r{i}" for i in range(40)])
    out = tmp_path / "l.json"
    r = _ok(
        runner.invoke(
            app,
            [
                "attack",
                "linkage",
                str(src),
                "-m",
                "laplace",
                "--epsilon",
                "200",
                "--seed",
                "1",
                "-o",
                str(out),
            ],
        )
    )
    assert "re-identified" in r.stdout
    res = json.loads(out.read_text())
    assert res["top_k"]["1"] == 1.0 and res["mechanism"]["config"]["mechanism"] == "laplace"
    out2 = tmp_path / "a.json"
    _ok(
        runner.invoke(
            app,
            [
                "attack",
                "averaging",
                str(src),
                "-m",
                "laplace",
                "--epsilon",
                "10",
                "--releases",
                "8",
                "--seed",
                "2",
                "-o",
                str(out2),
            ],
        )
    )
    res = json.loads(out2.read_text())["results"]
    assert res["fresh"]["gain"] > 0.1 and abs(res["keyed"]["gain"]) < 1e-12
    assert res["fresh"]["n_releases"] == [1, 2, 4, 8]


def test_averaging_on_release_files(tmp_path):
    X = np.random.default_rng(4).standard_normal((20, 16))
    rel = [
        _emb(tmp_path, X + np.random.default_rng(s).standard_normal(X.shape), f"r{s}.npy")
        for s in range(4)
    ]
    orig = _emb(tmp_path, X, "o.npy")
    out = tmp_path / "a.json"
    args = ["attack", "averaging", str(orig), "-o", str(out)]
    for p in rel:
        args += ["--release", str(p)]
    r = _ok(runner.invoke(app, args))
    assert "gain from averaging" in r.stdout
    res = json.loads(out.read_text())["results"]["files"]
    # 4 files with independent N(0, 1) noise: averaging them brings the rows closer each time
    assert res["n_releases"] == [1, 2, 4] and not res["keyed"]
    assert all(b > a for a, b in zip(res["mean_cosine"], res["mean_cosine"][1:], strict=False))
    assert res["gain"] == pytest.approx(res["mean_cosine"][-1] - res["mean_cosine"][0])
    assert res["gain"] > 0.1


def test_fingerprint_simulation_and_release_files(tmp_path):
    d = 24
    profiles = []
    for i, name in enumerate(("alpha", "beta", "gamma")):
        m = np.zeros(d)
        m[8 * i : 8 * (i + 1)] = 1.0
        p = tmp_path / f"{name}.npy"
        np.save(p, m)
        profiles += ["--profile", str(p)]
    X = np.random.default_rng(5).standard_normal((80, d))
    src = _emb(tmp_path, X)
    out = tmp_path / "f.json"
    sim = ["--groups", "6", "--group-size", "8", "--releases", "4", "--seed", "0", "--no-mlp"]
    _ok(
        runner.invoke(
            app,
            ["attack", "fingerprint", str(src), *profiles, *sim, "-o", str(out)],
        )
    )
    res = json.loads(out.read_text())
    assert res["results"]["template"]["accuracy"] == 1.0
    _ok(
        runner.invoke(
            app,
            [
                "attack",
                "fingerprint",
                str(src),
                *profiles,
                *sim,
                "--noise",
                "isotropic",
                "-o",
                str(out),
                "--overwrite",
            ],
        )
    )
    assert json.loads(out.read_text())["results"]["template"]["chance"] == pytest.approx(1 / 3)
    # files: 3 releases protected with the "beta" mask
    from privembed.mechanisms import MahalanobisMechanism

    mech = MahalanobisMechanism(epsilon=10.0, mask=np.load(tmp_path / "beta.npy"), mask_delta=1e-3)
    rels = []
    for s in range(3):
        rels += ["--release", str(_emb(tmp_path, mech.privatize(X, rng=s), f"rel{s}.npy"))]
    r = _ok(
        runner.invoke(
            app, ["attack", "fingerprint", *profiles, *rels, "-o", str(out), "--overwrite"]
        )
    )
    assert json.loads(out.read_text())["prediction"] == "beta" and "beta" in r.stdout


@pytest.mark.slow
def test_token_and_inversion_on_texts_and_a_mechanism(tmp_path):
    texts, X = bow_corpus(160, seed=6)
    tp = _texts(tmp_path, texts)
    ep = _emb(tmp_path, X)
    out = tmp_path / "t.json"
    common = [str(tp), "--embeddings", str(ep), "--seed", "0"]
    _ok(
        runner.invoke(
            app,
            [
                "attack",
                "token",
                *common,
                "-m",
                "laplace",
                "--epsilon",
                "500",
                "--epochs",
                "10",
                "--lr",
                "3e-3",
                "--min-count",
                "1",
                "-o",
                str(out),
            ],
        )
    )
    res = json.loads(out.read_text())
    assert res["results"][0]["target"] == "unprotected"
    assert res["results"][0]["auc_all"] > 0.8 and res["n_aux"] == 80
    # the default settings are the audit's (one layer of 256, recovered = top 10)
    assert res["results"][0]["rule"].startswith("top-10")
    assert res["results"][0]["attack_strength"] == "beats chance"  # unprotected: it must
    out2 = tmp_path / "i.json"
    _ok(
        runner.invoke(
            app,
            [
                "attack",
                "inversion",
                *common,
                "--epochs",
                "3",
                "--hidden",
                "32",
                "--no-baseline",
                "-o",
                str(out2),
            ],
        )
    )
    (inv,) = json.loads(out2.read_text())["results"]
    assert inv["n_texts"] == 80 and inv["n_sensitive"] == 240
    # even 3 epochs on unprotected vectors recover more words than the blind guess: 4.4 binomial
    # standard errors above its rate (measured 0.22 against 0.04)
    chance = inv["leakage_chance"]
    assert inv["leakage"] > chance + 4.4 * np.sqrt(chance * (1 - chance) / 240)


@pytest.mark.parametrize(
    "args,msg",
    [
        (["linkage", "--epsilon", "3"], "--epsilon need --mechanism"),
        (["linkage"], "give the protected file (INPUT) and --candidates"),
        (["token", "--embeddings", "x.npy"], "--embeddings needs the matching texts (INPUT)"),
        (["fingerprint", "e.npy", "--profile", "nope.npy"], "not found"),
        (["averaging", "-m", "laplace", "--epsilon", "1"], "give INPUT"),
        (["fingerprint", "--profile", "a.npy", "--noise", "loud"], "'loud' is not one of"),
        (["linkage", "a.npy", "--protected", "b.npy"], "give the input once"),
        (["linkage", "a.npy", "--k", "1"], "No such option: --k"),
    ],
)
def test_user_errors_are_one_line(args, msg):
    r = runner.invoke(app, ["attack", *args])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and msg in err, err


def test_deprecated_input_options_still_work_and_say_so(tmp_path):
    X = np.random.default_rng(1).standard_normal((20, 8))
    ids = [f"r{i}" for i in range(20)]
    cand = _emb(tmp_path, X, "cand.npz", ids)
    prot = _emb(tmp_path, X + 0.01, "prot.npz", ids)
    r = _ok(
        runner.invoke(
            app, ["attack", "linkage", "--protected", str(prot), "--candidates", str(cand)]
        )
    )
    assert "--protected is deprecated" in r.stderr and "re-identified" in r.stdout


def test_json_prints_the_results_instead_of_tables(tmp_path):
    X = np.random.default_rng(1).standard_normal((20, 8))
    ids = [f"r{i}" for i in range(20)]
    cand = _emb(tmp_path, X, "cand.npz", ids)
    prot = _emb(tmp_path, X + 0.01, "prot.npz", ids)
    out = tmp_path / "l.json"
    args = ["attack", "linkage", str(prot), "--candidates", str(cand), "--json", "-o", str(out)]
    r = _ok(runner.invoke(app, args))
    res = json.loads(r.stdout)  # nothing but the JSON on stdout
    assert res == json.loads(out.read_text()) and res["top_k"]["1"] == 1.0


def test_existing_output_is_kept_unless_overwrite(tmp_path):
    X = np.random.default_rng(1).standard_normal((20, 8))
    ids = [f"r{i}" for i in range(20)]
    cand = _emb(tmp_path, X, "cand.npz", ids)
    prot = _emb(tmp_path, X + 0.01, "prot.npz", ids)
    out = tmp_path / "l.json"
    out.write_text("keep me")
    args = ["attack", "linkage", str(prot), "--candidates", str(cand), "-o", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "pass --overwrite" in r.stderr
    assert out.read_text() == "keep me"
    _ok(runner.invoke(app, [*args, "--overwrite"]))
    assert json.loads(out.read_text())["attack"] == "linkage"


def test_linkage_on_texts_embeds_them(tmp_path):
    texts = [f"note {i} about topic {i % 7} and more words" for i in range(12)]
    tp = _texts(tmp_path, texts, "t.csv")
    tp.write_text("id,text\n" + "".join(f"r{i},{t}\n" for i, t in enumerate(texts)))
    r = _ok(
        runner.invoke(
            app, ["attack", "linkage", str(tp), "-m", "laplace", "--epsilon", "500", "--seed", "0"]
        )
    )
    assert "12 protected vectors vs 12 candidates" in " ".join(r.stdout.split())


def test_inversion_with_the_transformer_decoder(tmp_path):
    from privembed.attacks import TransformerInversionAttack

    texts, X = bow_corpus(160, seed=6)
    tp, ep = _texts(tmp_path, texts), _emb(tmp_path, X)
    tiny = TransformerInversionAttack(
        d_model=32, layers=1, heads=2, prefix=2, max_len=6, tokenizer="word", min_count=1,
        lr=3e-3, dropout=0.0, correction=0, epochs=8, batch_size=32,
    )  # fmt: skip
    tiny.fit(texts[:80], X[:80], rng=0).save(tmp_path / "pre")
    out = tmp_path / "tr.json"
    args = ["attack", "inversion", str(tp), "--embeddings", str(ep), "--seed", "0"]
    args += ["--decoder", "transformer", "--pretrained", str(tmp_path / "pre")]
    args += ["--epochs", "2", "--lr", "3e-3", "--rounds", "0", "--candidates", "1"]
    _ok(runner.invoke(app, [*args, "-m", "laplace", "--epsilon", "500", "-o", str(out),
                            "--device", "cpu"]))  # fmt: skip
    res = json.loads(out.read_text())
    clean, prot = res["results"]
    assert res["decoder"] == "transformer" and clean["target"] == "unprotected"
    assert clean["strength"]["verdict"] == "evidence" and clean["n_texts"] == 80
    assert clean["token_f1"] > clean["token_f1_blind"] + 0.2
    assert prot["evidence"] == "evidence" and "token_f1_excess_interval" in prot
    # options of the transformer decoder alone are refused for the GRU, before any work
    r = runner.invoke(app, ["attack", "inversion", str(tp), "--save", str(tmp_path / "s")])
    assert r.exit_code == 2 and "--save need --decoder transformer" in r.output
    r = runner.invoke(app, ["attack", "inversion", str(tp), "--device", "cuda"])
    assert r.exit_code == 2 and "--device need --decoder transformer" in r.output
    r = runner.invoke(app, ["attack", "inversion", str(tp), "--decoder", "transformer",
                            "--device", "gpu0"])  # fmt: skip
    assert r.exit_code == 2 and "device must be a torch device" in r.output
    r = runner.invoke(
        app, ["attack", "inversion", str(tp), "--decoder", "transformer", "--pretrained", "nope"]
    )
    assert r.exit_code == 2 and "--pretrained: no such folder: nope" in r.output


def test_attribute_command(tmp_path):
    gen = np.random.default_rng(2)
    words = ["flu", "gout", "acne"]
    texts, X = [], []
    W = gen.standard_normal((26, 32))
    for i in range(300):
        has = gen.random() < 0.4
        t = f"note {i % 7} about {'gout' if has else 'sleep'} and {words[i % 3]}"
        texts.append(t)
        v = W[[sum(map(ord, w)) % 26 for w in t.split()]].sum(axis=0) + 3.0 * has * W[0]
        X.append(v / np.linalg.norm(v))
    tp, ep = _texts(tmp_path, texts), _emb(tmp_path, np.array(X))
    (tmp_path / "terms.txt").write_text("gout\n")
    out = tmp_path / "a.json"
    base = ["attack", "attribute", str(tp), "--embeddings", str(ep), "--seed", "0"]
    _ok(runner.invoke(app, [*base, "--terms", str(tmp_path / "terms.txt"), "-m", "laplace",
                            "--epsilon", "500", "-o", str(out)]))  # fmt: skip
    res = json.loads(out.read_text())
    kinds = [(r["target"], r["training"]) for r in res["results"]]
    assert kinds == [("unprotected", "clean"), ("protected", "non-adaptive"),
                     ("protected", "adaptive")]  # fmt: skip
    assert res["results"][0]["beats_blind"] and res["results"][0]["auc"] > 0.9
    r = runner.invoke(app, base)
    assert r.exit_code == 2 and "--entity LABEL (spaCy) or --terms FILE" in r.output
    (tmp_path / "none.txt").write_text("zebra\n")
    r = runner.invoke(app, [*base, "--terms", str(tmp_path / "none.txt")])
    assert r.exit_code == 2 and "must hold both classes" in r.output
