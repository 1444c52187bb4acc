"""Does a JL projection before the noise help retrieval at equal (epsilon, delta)?

Real embeddings: all-MiniLM-L6-v2 (384-d, offline package) over the sentences of the gensim Lee
background corpus (300 news documents, split into ~2,500 distinct sentences). For each epsilon
and each mechanism -- Gaussian LDP in full dimension (``GaussianMechanism``) and
``PrivateProjection`` at k in {16, 32, 64, 128} with a Gaussian or an SRHT projection -- at the
same (epsilon, delta = 1e-5), under the record-level and the attribute-level relation, we measure

* ``top1_clean_cos`` / ``top1_clean_ip`` / ``top1_clean_corr``: top-1 self-retrieval of a plain
  query against the protected database (the query is projected without noise), ranking by the
  cosine to each raw release (``privembed.search.projection.projection_search``'s default, = FAISS
  ``IndexFlatIP`` over L2-normalised vectors), by the unbiased inner product, or by the cosine
  with bias-corrected norms (``metric="cosine_corrected"``);
* ``top1_noisy_cos``: top-1 retrieval of a second, independent release of the same text (both
  sides protected), cosine ranking;
* ``mean_cos``: mean cosine between each release and its noiseless counterpart (``x`` in full
  dimension, ``P x`` after projection) -- [K26]'s utility measure in the released space --
  beside ``expected_cos`` = 1/sqrt(1 + k sigma^2), [K26]'s closed form.

Theory is written next to every row: sigma, the sensitivity, ``||P||_2`` against
``1 + sqrt(d/k)``, the largest column norm, and the expected cosine ``E cos`` for that sigma.

Run (a few minutes on 2 cores, most of it embedding the corpus; the embeddings are cached under
``~/.cache/privembed`` for reruns, ``--no-cache`` re-embeds)::

    python docs/experiments/projection_experiment.py

Writes ``projection_results.csv``, ``projection_theory.csv`` and ``projection_experiment.png``
next to this file and prints the Markdown tables used in ``docs/projection.md``.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import os
import re
import time
from pathlib import Path

import numpy as np

from privembed.core import theory
from privembed.core.rng import spawn
from privembed.mechanisms import GaussianMechanism, PrivateProjection
from privembed.search.projection import projection_search

HERE = Path(__file__).resolve().parent
EPSILONS = [1, 5, 10, 20, 35, 50, 70, 100, 150, 200, 500, 1000, 2000, 5000, 10000]
KS = [16, 32, 64, 128]
KINDS = ["gaussian", "srht"]
DELTA = 1e-5
SEED = 20240601
USEFUL = (0.5, 0.9)


def load_sentences(min_words: int = 5) -> list[str]:
    """Distinct sentences (>= ``min_words`` words) of the gensim Lee background corpus."""
    from gensim.test.utils import datapath

    text = Path(datapath("lee_background.cor")).read_text(encoding="utf-8", errors="replace")
    seen: dict[str, None] = {}
    for line in text.splitlines():
        for s in re.split(r"(?<=[.!?])\s+", line.strip()):
            s = s.strip()
            if len(s.split()) >= min_words:
                seen.setdefault(s, None)
    return list(seen)


def embed(texts: list[str]) -> np.ndarray:
    import torch

    torch.set_num_threads(2)
    from privembed.data.embedders import Embedder

    return Embedder(batch_size=64).encode(texts).astype(np.float64)


def top1(S: np.ndarray, scale: np.ndarray | None = None) -> float:
    """Fraction of rows whose best column (after dividing column j by ``scale[j]``) is their own."""
    if scale is not None:
        S = S / scale[None, :].astype(S.dtype)
    return float(np.mean(np.argmax(S, axis=1) == np.arange(S.shape[0])))


def scores(Q: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Q @ Y.T in float32 (ample for an argmax, twice as fast as float64)."""
    return np.asarray(Q, dtype=np.float32) @ np.asarray(Y, dtype=np.float32).T


def mean_cos(A: np.ndarray, B: np.ndarray) -> float:
    num = np.sum(A * B, axis=1)
    return float(np.mean(num / (np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1))))


def run(X: np.ndarray) -> tuple[list[dict], list[dict]]:
    n, d = X.shape
    rows: list[dict] = []
    theory_rows: list[dict] = []
    configs: list[tuple[str, str, int, str]] = [
        ("full", "-", d, rel) for rel in ("record", "attribute")
    ]
    configs += [
        ("projection", kind, k, rel)
        for kind in KINDS
        for k in KS
        for rel in ("record", "attribute")
    ]
    gens = iter(spawn(SEED, 2 * len(configs) * len(EPSILONS)))
    checked_search = False
    for mech, kind, k, rel in configs:
        for eps in EPSILONS:
            g1, g2 = next(gens), next(gens)
            if mech == "full":
                m = GaussianMechanism(
                    epsilon=eps,
                    delta=DELTA,
                    sensitivity=2.0 if rel == "record" else 1.0,
                    renormalize=False,
                )
                clean = X
                sigma, sens, spec, maxcol = m.sigma, m.sensitivity, 1.0, 1.0
            else:
                m = PrivateProjection(
                    k=k, epsilon=eps, delta=DELTA, kind=kind, neighbouring=rel, input_dim=d
                )
                clean = m.project(X)
                sigma, sens = m.sigma, m.sensitivity(d)
                spec, maxcol = m.projection.spectral_norm(d), m.projection.max_column_norm(d)
            Y1 = m.privatize(X, rng=g1)
            Y2 = m.privatize(X, rng=g2)
            dim = Y1.shape[1]
            S = scores(clean, Y1)
            ny2 = np.sum(Y1**2, axis=1)
            cos_scale = np.sqrt(ny2)
            corr_scale = np.sqrt(np.maximum(ny2 - dim * sigma**2, 1e-12))
            if mech == "projection" and not checked_search:
                # the library's search ranks like top1_clean_cos
                _, idx = projection_search(m, X, Y1, 1)
                assert abs(float(np.mean(idx[:, 0] == np.arange(n))) - top1(S, cos_scale)) <= 2 / n
                checked_search = True
            rows.append(
                {
                    "mechanism": mech,
                    "kind": kind,
                    "k": k,
                    "relation": rel,
                    "epsilon": eps,
                    "delta": DELTA,
                    "sigma": sigma,
                    "sensitivity": sens,
                    "top1_clean_cos": top1(S, cos_scale),
                    "top1_clean_ip": top1(S),
                    "top1_clean_corr": top1(S, corr_scale),
                    "top1_noisy_cos": top1(scores(Y2, Y1), cos_scale),
                    "mean_cos": mean_cos(Y1, clean),
                    # [K26]'s closed form 1/sqrt(1 + k sigma^2) (|Px| ~ 1 by JL)
                    "expected_cos": theory.expected_cosine_gaussian_approx(sigma, k),
                }
            )
        theory_rows.append(
            {
                "mechanism": mech,
                "kind": kind,
                "k": k,
                "relation": rel,
                "spectral_norm": spec,
                "one_plus_sqrt_d_over_k": 1.0 + math.sqrt(d / k) if mech != "full" else 1.0,
                "max_column_norm": maxcol,
                "sensitivity": sens,
                "sigma_ratio_vs_full": sens / (2.0 if rel == "record" else 1.0),
            }
        )
    return rows, theory_rows


def first_useful(rows: list[dict], metric: str, level: float) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    for r in rows:
        key = (r["mechanism"], r["kind"], r["k"], r["relation"])
        if r[metric] >= level and key not in out:
            out[key] = r["epsilon"]
    keys = {(r["mechanism"], r["kind"], r["k"], r["relation"]) for r in rows}
    return {key: out.get(key, math.inf) for key in keys}


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def plot(rows: list[dict], path: Path, d: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [
        ("top1_clean_cos", "top-1, plain query vs protected DB"),
        ("top1_noisy_cos", "top-1, protected query vs protected DB"),
        ("mean_cos", "mean cos(release, noiseless)"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), sharex=True)
    colours = dict(zip(KS, ["tab:purple", "tab:blue", "tab:green", "tab:orange"], strict=True))
    for i, rel in enumerate(("record", "attribute")):
        for j, (metric, title) in enumerate(metrics):
            ax = axes[i, j]
            sel = [r for r in rows if r["relation"] == rel]
            full = [r for r in sel if r["mechanism"] == "full"]
            ax.plot(
                [r["epsilon"] for r in full],
                [r[metric] for r in full],
                "k-o",
                lw=2.2,
                ms=4,
                label=f"full d={d}",
            )
            for kind, style in (("gaussian", "-"), ("srht", ":")):
                for k in KS:
                    pts = [r for r in sel if r["kind"] == kind and r["k"] == k]
                    ax.plot(
                        [r["epsilon"] for r in pts],
                        [r[metric] for r in pts],
                        style,
                        color=colours[k],
                        marker="." if kind == "gaussian" else None,
                        label=f"{kind} k={k}",
                    )
            ax.set_xscale("log")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.set_title(f"{rel} level: {title}", fontsize=10)
            if i == 1:
                ax.set_xlabel("epsilon (delta = 1e-5)")
    axes[0, 0].legend(fontsize=7, ncol=2, loc="upper left")
    fig.suptitle(
        "all-MiniLM-L6-v2 on Lee-corpus sentences: full-dimension Gaussian LDP vs JL projection "
        "+ Gaussian noise at equal (epsilon, delta)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(rows: list[dict], theory_rows: list[dict], n: int, d: int) -> str:
    lines = [f"n = {n} sentences, d = {d}, delta = {DELTA:g}", ""]
    lines.append(
        "| relation | mechanism | ||P||_2 | 1+sqrt(d/k) | max col norm | sigma / sigma_full |"
    )
    lines.append("|---|---|---|---|---|---|")
    for t in theory_rows:
        name = "full" if t["mechanism"] == "full" else f"{t['kind']} k={t['k']}"
        lines.append(
            f"| {t['relation']} | {name} | {t['spectral_norm']:.3f} | "
            f"{t['one_plus_sqrt_d_over_k']:.3f} | {t['max_column_norm']:.3f} | "
            f"{t['sigma_ratio_vs_full']:.3f} |"
        )
    lines.append("")
    cols = [
        ("top1_clean_cos", (20, 50, 100)),
        ("top1_noisy_cos", (50, 100, 200)),
        ("mean_cos", (50, 100)),
    ]
    short = {"top1_clean_cos": "clean", "top1_noisy_cos": "noisy", "mean_cos": "mean cos"}
    head = "| relation | mechanism | clean >=0.5 | clean >=0.9 | noisy >=0.5 | noisy >=0.9 | "
    head += " | ".join(f"{short[m]} @{e}" for m, es in cols for e in es) + " |"
    lines.append(head)
    lines.append("|" + "---|" * (6 + sum(len(es) for _, es in cols)))
    firsts = {
        (m, lv): first_useful(rows, m, lv)
        for m in ("top1_clean_cos", "top1_noisy_cos")
        for lv in USEFUL
    }

    def f(x: float) -> str:
        return "never" if math.isinf(x) else f"{x:g}"

    for t in theory_rows:
        key = (t["mechanism"], t["kind"], t["k"], t["relation"])
        name = "full" if t["mechanism"] == "full" else f"{t['kind']} k={t['k']}"
        by_eps = {
            r["epsilon"]: r
            for r in rows
            if (r["mechanism"], r["kind"], r["k"], r["relation"]) == key
        }
        cells = [
            f(firsts[(m, lv)][key]) for m in ("top1_clean_cos", "top1_noisy_cos") for lv in USEFUL
        ]
        cells += [f"{by_eps[e][m]:.3f}" for m, es in cols for e in es]
        lines.append(f"| {t['relation']} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--limit", type=int, default=None, help="use only the first N sentences")
    ap.add_argument(
        "--no-cache",
        action="store_true",
        help="always re-embed (default: reuse embeddings cached under ~/.cache/privembed)",
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    texts = load_sentences()[: args.limit]
    key = hashlib.sha256(("all-MiniLM-L6-v2\n" + "\n".join(texts)).encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    cache = base / "privembed" / f"lee_sentences_minilm_{key}.npy"
    if cache.exists() and not args.no_cache:
        X = np.load(cache).astype(np.float64)
    else:
        X = embed(texts)
        if not args.no_cache:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.save(cache, X.astype(np.float32))
    t1 = time.perf_counter()
    rows, theory_rows = run(X)
    t2 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "projection_results.csv", rows)
    write_csv(args.out / "projection_theory.csv", theory_rows)
    plot(rows, args.out / "projection_experiment.png", X.shape[1])
    print(markdown(rows, theory_rows, *X.shape))
    print(f"\nembedding {t1 - t0:.1f} s, mechanisms {t2 - t1:.1f} s")


if __name__ == "__main__":
    main()
