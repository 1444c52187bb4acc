"""Reproduce the GloVe 6B 50d results of docs/text_sanitization.md ([A26] Table 2, Figs 2/8/9).

    python docs/experiments/text_analysis.py                 # all steps, one thread
    python docs/experiments/text_analysis.py --steps dot     # one step only

Steps (each writes docs/experiments/text_<step>.md and .csv files; seeds are fixed per step):

* ``gaps``        -- [A26] Table 2 on 5,000 random words (about 20 s);
* ``proportions`` -- output shares of nearest / rank fix (every c of the grid) / exponential
  for 2,000 random words and 12 epsilons, the chosen c, and docs/figures/text_proportions.png
  (about 5 CPU-minutes; ``--replot`` redraws the figure and tables from the saved CSV);
* ``dot``         -- the noisy dot product at the measured gaps, and docs/figures/text_dot_cdf.png.
"""

from __future__ import annotations

import argparse
import csv
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
STEPS = ("gaps", "proportions", "dot")


def _read_table(path: Path):
    from privembed.text import Table

    with path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    cols = list(rows[0].keys())
    for r in rows:
        for k in ("epsilon", "c", "original", "neighbours", "other"):
            r[k] = float(r[k]) if r.get(k) not in (None, "") else None
        r["n_words"] = int(r["n_words"])
    return Table(columns=cols, rows=rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", default=",".join(STEPS), help="comma-separated: " + ", ".join(STEPS))
    ap.add_argument("--words", type=int, default=2000, help="random words per epsilon")
    ap.add_argument("--gap-words", type=int, default=5000, help="random words for Table 2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--replot", action="store_true", help="proportions: redraw from the CSV")
    args = ap.parse_args()
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = set(steps) - set(STEPS)
    if unknown:
        ap.error(f"unknown steps: {sorted(unknown)}")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))

    import faiss
    import numpy as np

    from privembed.core.rng import spawn
    from privembed.text import NearestNeighbourIndex, Table, Vocabulary, analysis

    faiss.omp_set_num_threads(args.threads)
    rng_gaps, rng_fig, rng_dot = spawn(args.seed, 3)
    t0 = time.perf_counter()
    voc = Vocabulary.glove()
    idx = NearestNeighbourIndex(voc.vectors)
    FIGURES.mkdir(parents=True, exist_ok=True)
    header = [
        f"`python docs/experiments/text_analysis.py --seed {args.seed} --words {args.words} "
        f"--gap-words {args.gap_words} --threads {args.threads}`",
        "",
        f"Python {platform.python_version()}, numpy {np.__version__}, faiss {faiss.__version__}.",
        "",
    ]

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    def write(step: str, title: str, body: list[str]) -> None:
        text = "\n".join([f"# {title} (generated)", "", *header, *body, ""])
        (HERE / f"text_{step}.md").write_text(text, encoding="utf-8")

    if "gaps" in steps or "dot" in steps:
        log("neighbour gaps (Table 2)")
        gaps = analysis.neighbour_gaps(voc, n_words=args.gap_words, index=idx, rng=rng_gaps)
        summary = gaps.summary()
        if "gaps" in steps:
            summary.to_csv(HERE / "text_gaps.csv")
            write("gaps", f"Neighbour gaps, {args.gap_words} random words", [summary.to_markdown()])

    if "proportions" in steps:
        if args.replot:
            props = _read_table(HERE / "text_proportions.csv")
        else:
            log("output proportions: nearest, rank (every c of the grid), exponential")
            props = analysis.output_proportions(
                voc, epsilons=EPS_FIGURE, c=C_GRID, n_words=args.words, index=idx, rng=rng_fig
            )
            props.to_csv(HERE / "text_proportions.csv")
        cal = analysis.RankCalibration.from_table(props)
        score = Table(
            columns=["c", "mean close-neighbour share"],
            rows=[{"c": k, "mean close-neighbour share": v} for k, v in cal.score.items()],
        )
        shown = Table(
            columns=props.columns,
            rows=[r for r in props.rows if r["mechanism"] != "rank" or r["c"] in (0.04, cal.c)],
        )
        analysis.plot_proportions(
            shown,
            FIGURES / "text_proportions.png",
            title=f"GloVe 6B 50d, {args.words} random words: original / 100 nearest "
            "neighbours / other",
        )
        write(
            "proportions",
            f"Output proportions, {args.words} random words",
            [
                "## Rank-fix calibration (mean over epsilons "
                + ", ".join(f"{e:g}" for e in EPS_FIGURE)
                + ")",
                "",
                score.to_markdown(),
                "",
                f"chosen c = {cal.c:g}",
                "",
                "## Shares (rank rows for c = 0.04 and the chosen c)",
                "",
                shown.to_markdown(3),
            ],
        )

    if "dot" in steps:
        log("noisy dot product")
        dots = analysis.dot_product_summary(
            voc.dim, EPS_TABLE, gaps=gaps.means(), mc_size=200_000, rng=rng_dot
        )
        dots.to_csv(HERE / "text_dot.csv")
        analysis.plot_dot_cdf([voc.dim, 300], FIGURES / "text_dot_cdf.png", rng=rng_dot)
        write("dot", f"Noisy dot product, n = {voc.dim}", [dots.to_markdown(3)])
    log("done")


if __name__ == "__main__":
    main()
