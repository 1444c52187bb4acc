"""Is the inversion attack evidence at the epsilon where private search is useful?

Two attackers who do **not** hold the texts, against all-MiniLM-L6-v2 vectors (d = 384),
clean and protected by multivariate Laplace at each ``--epsilons`` (renormalised, the default):

1. **Inversion** -- :class:`privembed.attacks.TransformerInversionAttack` pretrained on the
   public corpus (``benchmarks/bench_inversion.py --full``, loaded from the user cache), then
   adapted to each epsilon (``fit_adaptive(..., warm_start=True)``: fresh Laplace noise on every
   minibatch of ``--adapt-texts`` corpus sentences, and the correction mode retrained on its
   own hypotheses for protected vectors). Held-out targets come from *other* sources than the
   training corpus: sentences of the Lee corpus (news; entities from spaCy NER) and synthetic
   clinical notes (privembed's own templates; the name, age and diagnosis are known). Scores:
   corpus BLEU-4, per-text token F1, exact entity recovery, each against the blind pairing
   (the same reconstructions paired with other texts, :mod:`privembed.attacks.reconstruction`).
   A source where the attack does not beat blind on *clean* vectors (strength check) is marked
   "no evidence" at every epsilon.
2. **Attribute inference** -- :class:`privembed.attacks.AttributeProbe` (logistic regression
   and MLP), trained on corpus sentences (GCIDE + FOLDOC only, no template sentences) labelled
   by spaCy (PERSON; GPE/LOC = place) and by the faker-healthcare disease and symptom lists
   (condition: a diagnosis or a symptom), tested on held-out corpus sentences (the last 30%):
   non-adaptive (trained clean) and adaptive (trained on two fresh protected copies); MLP
   probes only at ``--mlp-epsilons`` (CPU). ROC AUC with a DeLong 95% interval; blind = 0.5.

Run (after ``inversion_corpus.py`` and ``bench_inversion.py --full``):
    nice -n 10 python docs/experiments/attack_inversion_evidence.py [--targets 200]

Outputs: ``attack_inversion_evidence.csv`` (inversion), ``attack_attribute.csv`` (probes),
``attack_inversion_evidence.md`` (both tables) and ``attack_inversion_evidence_examples.txt``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def lee_targets(n: int, seed: int, nlp) -> tuple[list[str], list[list[tuple[str, str]]]]:
    from privembed.evaluation.loaders import lee_background

    sents = [s for s in lee_background(sentences=True) if len(s.split()) <= 32]
    idx = np.sort(np.random.default_rng(seed).choice(len(sents), size=n, replace=False))
    texts = [sents[i] for i in idx]
    keep = {"PERSON": "PERSON", "GPE": "PLACE", "LOC": "PLACE", "ORG": "ORG", "NORP": "NORP"}
    ents = [
        [(keep[e.label_], e.text) for e in doc.ents if e.label_ in keep] for doc in nlp.pipe(texts)
    ]
    return texts, ents


def note_targets(n: int, seed: int) -> tuple[list[str], list[list[tuple[str, str]]]]:
    from privembed.data.datasets import synthetic_clinical_notes

    notes = synthetic_clinical_notes(n, seed=seed)
    ents = [
        [("PERSON", nt.name), ("AGE", str(nt.age)), ("DISEASE", nt.disease), ("PLACE", nt.city)]
        for nt in notes
    ]
    # only what the note prints (some templates have no city)
    ents = [
        [e for e in es if e[1].lower() in nt.text.lower()]
        for es, nt in zip(ents, notes, strict=True)
    ]
    return [nt.text for nt in notes], ents


def fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4f}"
    return str(v)


def read_csv(path: Path) -> list[dict]:
    def num(v: str):
        try:
            return float(v)
        except ValueError:
            return {"True": True, "False": False}.get(v, v)

    with path.open(newline="") as fh:
        return [{k: num(v) if v != "" else "" for k, v in r.items()} for r in csv.DictReader(fh)]


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    cols = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: fmt(r.get(k, "")) for k in cols})


def score_fields(rep) -> dict:
    """A :class:`ReconstructionReport`'s scores as CSV columns (this script and inversion_gpu.py)."""
    return {
        "bleu": rep.bleu,
        "bleu_blind": rep.bleu_blind,
        "token_f1": rep.token_f1,
        "token_f1_blind": rep.token_f1_blind,
        "f1_excess_lo": rep.token_f1_excess_interval[0],
        "f1_excess_hi": rep.token_f1_excess_interval[1],
        "entity_recovery": rep.entity_recovery,
        "entity_blind": rep.entity_recovery_blind,
        "entity_excess_lo": rep.entity_excess_interval[0],
        "entity_excess_hi": rep.entity_excess_interval[1],
        "n_texts": rep.n_texts,
        "n_entities": rep.n_entities,
    }


def entity_fields(rep) -> dict:
    """Recovery of each entity type, with its blind level and count, as CSV columns."""
    out = {}
    for typ, es in rep.entities.items():
        out[f"{typ.lower()}_recovered"] = es.recovered
        out[f"{typ.lower()}_blind"] = es.blind
        out[f"{typ.lower()}_n"] = es.n
    return out


def inversion(args, embedder, mechs) -> tuple[list[dict], list[str]]:
    from gcide_embed import embed_cached
    from inversion_corpus import load_available

    from privembed.attacks import TransformerInversionAttack
    from privembed.attacks.transformer_inversion import strength_verdict
    from privembed.concepts.pairs import load_spacy
    from privembed.core.cache import cache_dir

    model_dir = cache_dir("inversion", "models", args.model)
    nlp = load_spacy()
    sources = {
        "lee": lee_targets(args.targets, args.seed, nlp),
        "clinical": note_targets(args.targets, args.seed + 1000),
    }
    tcache = cache_dir("inversion", "targets")
    X = {
        k: embed_cached(t, tcache, k, embedder).astype(np.float64) for k, (t, _) in sources.items()
    }
    texts, C = load_available(args.adapt_texts)
    embed = embedder.encode
    rows, examples = [], []
    verdict: dict[str, str] = {}
    for name, mech in mechs:
        t0 = time.time()
        atk = TransformerInversionAttack.load(
            model_dir, rounds=args.rounds, candidates=args.candidates, num_threads=args.threads
        )
        if mech is not None:
            atk.correction = args.adapt_correction
            atk.fit_adaptive(texts, C, mech, embed=embed, rng=args.seed, warm_start=True)
        t_fit = time.time() - t0
        for src, (tx, ents) in sources.items():
            Y = X[src] if mech is None else mech.privatize(X[src], rng=args.seed + 7)
            recs = atk.reconstruct(Y, embed=embed, rng=args.seed)
            from privembed.attacks.reconstruction import score_against_blind

            rep = score_against_blind(tx, recs, entities=ents, rng=args.seed)
            if mech is None:
                verdict[src] = strength_verdict(rep).verdict
            row = {
                "target": src,
                "mechanism": "none" if mech is None else "laplace",
                "epsilon": "" if mech is None else mech.epsilon,
                "evidence": verdict.get(src, "not checked"),
                **score_fields(rep),
                "fit_s": round(t_fit),
                "total_s": round(time.time() - t0),
                **entity_fields(rep),
            }
            rows.append(row)
            examples.append(f"== {src} {name}")
            examples += [f"  {t}\n  -> {r}" for t, r in list(zip(tx, recs, strict=True))[:4]]
            log(
                f"inversion {src:8s} {name:12s} F1 {rep.token_f1:.3f} (blind "
                f"{rep.token_f1_blind:.3f}) BLEU {rep.bleu:.4f} ({rep.bleu_blind:.4f}) entities "
                f"{rep.entity_recovery:.3f} ({rep.entity_recovery_blind:.3f}) {verdict.get(src)}"
            )
        write_csv(args.out / "attack_inversion_evidence.partial.csv", rows)
    return rows, examples


def attributes(args, mechs) -> list[dict]:
    import faker
    import faker_healthcare as fh
    from inversion_corpus import load_available

    from privembed.attacks import AttributeProbe, mentions
    from privembed.concepts.pairs import load_spacy
    from privembed.evaluation.loaders import pii_sentences

    texts, X = load_available(args.attr_texts)
    log(f"attribute data: {len(texts)} corpus sentences")
    templated = set(pii_sentences(args.pii, seed=0).texts)
    keep = np.array([t not in templated and len(t.split()) >= 4 for t in texts])
    texts = [t for t, k in zip(texts, keep, strict=True) if k]
    X = X[keep]
    log(f"attribute data: {len(texts)} sentences without the template ones; labelling")
    import hashlib

    from privembed.core.cache import cache_dir

    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    ner_file = cache_dir("inversion", "labels") / f"ner-{digest}.npz"
    if ner_file.exists():
        z = np.load(ner_file)
        person, place = z["person"], z["place"]
    else:
        nlp = load_spacy()
        ents = [{e.label_ for e in doc.ents} for doc in nlp.pipe(texts, batch_size=512)]
        person = np.array(["PERSON" in e for e in ents])
        place = np.array([bool(e & {"GPE", "LOC"}) for e in ents])
        np.savez(ner_file, person=person, place=place)
    hp = fh.HealthcareProvider(faker.Faker("en_US"))
    labels = {
        "person": person,
        "place": place,
        # diagnosis or symptom: faker-healthcare's disease and symptom names
        "condition": mentions(texts, [*hp.diseases, *hp.symptoms]),
    }
    n = len(texts)
    cut = int(0.7 * n)
    log(f"attribute data: {n} sentences; positives " +
        ", ".join(f"{k} {int(v.sum())}" for k, v in labels.items()))  # fmt: skip
    rows = []
    gen = np.random.default_rng(args.seed)
    for name, mech in mechs:
        Xt = X[cut:] if mech is None else mech.privatize(X[cut:], rng=gen)
        for attr, y in labels.items():
            kinds = [k for k in args.probes if k != "mlp" or mech is None or
                     mech.epsilon in args.mlp_epsilons]  # fmt: skip
            for kind in kinds:
                for mode in ("non-adaptive", "adaptive") if mech is not None else ("clean",):
                    t0 = time.time()
                    p = AttributeProbe(
                        kind=kind, max_iter=args.probe_iter if kind == "mlp" else 1000
                    )
                    if mode == "adaptive":
                        p.fit_adaptive(X[:cut], y[:cut], mech, n_copies=2, rng=gen)
                    else:
                        p.fit(X[:cut], y[:cut], rng=gen)
                    rep = p.score(Xt, y[cut:])
                    rows.append(
                        {
                            "attribute": attr,
                            "probe": kind,
                            "training": mode,
                            "mechanism": "none" if mech is None else "laplace",
                            "epsilon": "" if mech is None else mech.epsilon,
                            "auc": rep.auc,
                            "auc_lo": rep.interval[0],
                            "auc_hi": rep.interval[1],
                            "blind": 0.5,
                            "beats_blind": rep.beats_blind,
                            "n_pos": rep.n_positive,
                            "n_neg": rep.n_negative,
                            "fit_s": round(time.time() - t0, 1),
                        }
                    )
                    log(f"attribute {attr:9s} {kind:6s} {mode:12s} {name:12s} AUC {rep.auc:.3f} "
                        f"[{rep.interval[0]:.3f}, {rep.interval[1]:.3f}]")  # fmt: skip
        write_csv(args.out / "attack_attribute.partial.csv", rows)
    return rows


def _entity_cell(r: dict):
    def cell(t: str) -> str:
        k = f"{t}_recovered"
        return f"{fmt(r[k])} ({fmt(r[t + '_blind'])})" if r.get(k, "") != "" else "-"

    return cell


def inversion_table(rows: list[dict]) -> list[str]:
    """The inversion rows as a Markdown table (this script and inversion_gpu.py). A row's
    epsilon is "" or "clean" for unprotected vectors; "beats blind" / "at blind" at an epsilon
    only once the clean row of its source passed the strength check."""
    out = [
        "| target | epsilon | BLEU (blind) | token F1 (blind) | F1 excess 95% | entities (blind) "
        "| names | ages | diagnoses | places | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ent = _entity_cell(r)
        ver = r["evidence"]
        if ver == "evidence" and r["epsilon"] not in ("", "clean"):
            ver = "beats blind" if r["f1_excess_lo"] > 0 else "at blind"
        elif ver != "evidence":
            ver = "no evidence"
        out.append(
            f"| {r['target']} | {r['epsilon'] or 'clean'} | {fmt(r['bleu'])} ({fmt(r['bleu_blind'])}) "
            f"| {fmt(r['token_f1'])} ({fmt(r['token_f1_blind'])}) | "
            f"[{fmt(r['f1_excess_lo'])}, {fmt(r['f1_excess_hi'])}] | "
            f"{fmt(r['entity_recovery'])} ({fmt(r['entity_blind'])}) | {ent('person')} | "
            f"{ent('age')} | {ent('disease')} | {ent('place')} | {ver} |"
        )
    return out


def markdown(inv: list[dict], attr: list[dict], args) -> str:
    out = [
        f"Laplace (renormalised), d = 384, all-MiniLM-L6-v2; {args.targets} held-out targets per "
        f"source; model `{args.model}`; adaptive fine-tuning on {args.adapt_texts} corpus "
        f"sentences per epsilon; {args.rounds} correction round(s), {args.candidates} "
        f"candidates; seed {args.seed}.",
        "",
        "**Inversion** (blind = the same reconstructions paired with other texts; "
        "excess = 95% bootstrap interval of token F1 minus blind):",
        "",
        *inversion_table(inv),
    ]
    out += [
        "",
        "**Attribute inference** (ROC AUC, DeLong 95% interval; blind 0.5):",
        "",
        "| attribute | probe | training | epsilon | AUC | 95% interval | beats blind |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in attr:
        out.append(
            f"| {r['attribute']} | {r['probe']} | {r['training']} | {r['epsilon'] or 'clean'} | "
            f"{fmt(r['auc'])} | [{fmt(r['auc_lo'])}, {fmt(r['auc_hi'])}] | "
            f"{'yes' if r['beats_blind'] else 'no'} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="gcide-base", help="cached pretrained model name")
    ap.add_argument("--epsilons", type=float, nargs="+", default=[50, 100, 150, 200, 500])
    ap.add_argument("--targets", type=int, default=200, help="held-out texts per source")
    ap.add_argument("--adapt-texts", type=int, default=6400)
    ap.add_argument("--adapt-correction", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--candidates", type=int, default=2)
    ap.add_argument(
        "--attr-texts", type=int, default=0, help="corpus sentences for probes (0: all)"
    )
    ap.add_argument("--pii", type=int, default=40_000, help="as inversion_corpus.py --pii")
    ap.add_argument("--probes", nargs="+", default=["linear", "mlp"])
    ap.add_argument("--probe-iter", type=int, default=100, help="MLP epochs at most")
    ap.add_argument(
        "--mlp-epsilons", type=float, nargs="*", default=[150.0], help="epsilons with MLP probes"
    )
    ap.add_argument(
        "--skip",
        choices=["inversion", "attributes", "both"],
        default=None,
        help="skip a part (its last CSV fills the table); both: rewrite the table only",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    import torch

    from privembed.data.embedders import Embedder
    from privembed.mechanisms import LaplaceMechanism

    torch.set_num_threads(args.threads)
    t0 = time.time()
    mechs = [("clean", None)] + [
        (f"laplace {e:g}", LaplaceMechanism(epsilon=e)) for e in args.epsilons
    ]
    inv: list[dict] = []
    examples: list[str] = []
    if args.skip not in ("inversion", "both"):
        inv, examples = inversion(args, Embedder(), mechs)
        write_csv(args.out / "attack_inversion_evidence.csv", inv)
        (args.out / "attack_inversion_evidence_examples.txt").write_text("\n".join(examples) + "\n")
    attr: list[dict] = []
    if args.skip not in ("attributes", "both"):
        attr = attributes(args, mechs)
        write_csv(args.out / "attack_attribute.csv", attr)
    # a part that was skipped keeps its last results in the table
    if not inv and (args.out / "attack_inversion_evidence.csv").exists():
        inv = read_csv(args.out / "attack_inversion_evidence.csv")
    if not attr and (args.out / "attack_attribute.csv").exists():
        attr = read_csv(args.out / "attack_attribute.csv")
    (args.out / "attack_inversion_evidence.md").write_text(markdown(inv, attr, args))
    log(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
