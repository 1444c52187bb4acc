"""Reproduce the GloVe 6B 50d results of docs/text_sanitization.md ([A26] Table 2, Figs 2/8/9).

    python docs/experiments/text_analysis.py            # ~10 minutes on one core

Writes docs/experiments/text_analysis_results.md (all tables), CSVs next to it, and the figures
docs/figures/text_proportions.png and docs/figures/text_dot_cdf.png. Fixed seed; one thread
(the machine is shared), set with --threads.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIGURES = HERE.parent / "figures"

EPS_FIGURE = [0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 40, 60]
EPS_TABLE = [1, 5, 10, 20, 40]
C_GRID = [0.0025, 0.005, 0.01, 0.02, 0.04, 0.08]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--words", type=int, default=2000, help="random words per epsilon (figure)")
    ap.add_argument("--gap-words", type=int, default=5000, help="random words for Table 2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))

    import faiss
    import numpy as np

    from privembed.rng import spawn
    from privembed.text import NearestNeighbourIndex, Vocabulary, analysis

    faiss.omp_set_num_threads(args.threads)
    rng_gaps, rng_fig, rng_dot = spawn(args.seed, 3)
    t0 = time.perf_counter()
    voc = Vocabulary.glove()
    idx = NearestNeighbourIndex(voc.vectors)
    out: list[str] = [
        "# GloVe 6B 50d: text sanitisation analysis (generated)",
        "",
        f"`python docs/experiments/text_analysis.py --seed {args.seed} --words {args.words} "
        f"--gap-words {args.gap_words} --threads {args.threads}`",
        "",
        f"Python {platform.python_version()}, numpy {np.__version__}, faiss {faiss.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} cores visible, {args.threads} thread(s).",
        "",
    ]

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    log("neighbour gaps (Table 2)")
    gaps = analysis.neighbour_gaps(voc, n_words=args.gap_words, index=idx, rng=rng_gaps)
    summary = gaps.summary()
    summary.to_csv(HERE / "text_neighbour_gaps.csv")
    out += [f"## Neighbour gaps ({args.gap_words} random words)", "", summary.to_markdown(), ""]

    log("output proportions: nearest, rank (every c of the grid), exponential")
    props = analysis.output_proportions(
        voc, epsilons=EPS_FIGURE, c=C_GRID, n_words=args.words, index=idx, rng=rng_fig
    )
    props.to_csv(HERE / "text_proportions.csv")
    cal = analysis.RankCalibration.from_table(props)
    score = analysis.Table(
        columns=["c", "mean close-neighbour share"],
        rows=[{"c": k, "mean close-neighbour share": v} for k, v in cal.score.items()],
    )
    out += [
        "## Rank-fix calibration (mean over epsilons "
        + ", ".join(f"{e:g}" for e in EPS_FIGURE)
        + ")",
        "",
        score.to_markdown(),
        "",
        f"chosen c = {cal.c:g}",
        "",
    ]
    shown = analysis.Table(
        columns=props.columns,
        rows=[r for r in props.rows if r["mechanism"] != "rank" or r["c"] in (0.04, cal.c)],
    )
    FIGURES.mkdir(parents=True, exist_ok=True)
    analysis.plot_proportions(
        shown,
        FIGURES / "text_proportions.png",
        title=f"GloVe 6B 50d, {args.words} random words: original / 100 nearest neighbours / other",
    )
    out += [f"## Output proportions ({args.words} random words)", "", shown.to_markdown(3), ""]

    log("noisy dot product")
    dots = analysis.dot_product_summary(
        voc.dim, EPS_TABLE, gaps=gaps.means(), mc_size=200_000, rng=rng_dot
    )
    dots.to_csv(HERE / "text_dot_product.csv")
    analysis.plot_dot_cdf(voc.dim, [1, 5, 10, 40], FIGURES / "text_dot_cdf.png", rng=rng_dot)
    out += ["## Noisy dot product (n = 50)", "", dots.to_markdown(3), ""]

    (HERE / "text_analysis_results.md").write_text("\n".join(out), encoding="utf-8")
    log("done")


if __name__ == "__main__":
    main()
