# ruff: noqa: E402  (BLAS thread settings must precede the numpy import)
"""Time ``advise``'s mode search on real text and print a table for docs/benchmarks.md.

Run (one run; about a minute on 2 shared cores at the defaults, embedding included)::

    python benchmarks/bench_advise.py                    # 1,072 generated notes + Lee background
    python benchmarks/bench_advise.py --notes 300 --no-lee
    python benchmarks/bench_advise.py --plain-only       # also the former analysis (linkage only)

For each corpus it embeds the texts once with the offline all-MiniLM-L6-v2 model (timed
separately), then runs :func:`privembed.evaluation.modes.advise_modes` over the four modes and
three noise laws at the defaults (recall of the clean top 10 >= 0.9 within k' <= 100,
pseudo-queries) and prints the seconds, the probes per (mode, law), and each mode's smallest
epsilon and k'. ``--plain-only`` also times the former plain-vector analysis
(:func:`privembed.evaluation.advice.advise`, mean cosine >= 0.5, linkage attack only, 3 runs)
on the same vectors for the ratio. Seconds are wall-clock on whatever else the machine was
doing: compare the ratio within one run.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import platform
import time

import numpy as np

from privembed.data.datasets import synthetic_clinical_notes
from privembed.data.embedders import Embedder
from privembed.evaluation import Floor, Linkage
from privembed.evaluation.advice import advise
from privembed.evaluation.modes import advise_modes


def _corpora(notes: int, lee: bool) -> list[tuple[str, list[str]]]:
    out = [(f"generated notes ({notes})", [n.text for n in synthetic_clinical_notes(notes)])]
    if lee:
        from privembed.evaluation.loaders import lee_background

        docs = list(lee_background())
        out.append((f"Lee background ({len(docs)})", docs))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=1072)
    ap.add_argument("--no-lee", action="store_true")
    ap.add_argument("--plain-only", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} cores (shared), load {os.getloadavg()[0]:.2f}")  # fmt: skip
    emb = Embedder(None)
    for name, texts in _corpora(args.notes, not args.no_lee):
        t0 = time.perf_counter()
        X = np.asarray(emb.encode(texts))
        t_embed = time.perf_counter() - t0
        t0 = time.perf_counter()
        adv = advise_modes(X, mechanisms=("gaussian", "laplace", "purkayastha"), seed=args.seed)
        t_modes = time.perf_counter() - t0
        print(f"\n## {name}: n = {X.shape[0]}, d = {X.shape[1]}")
        print(f"embedding {t_embed:.1f} s; advise (4 modes x 3 laws) {t_modes:.1f} s")
        print("| mode | law | smallest epsilon | k' | recall (95% low) | reid@1 | probes |")
        print("|---|---|---|---|---|---|---|")
        for s in adv.settings:
            eps = "none" if s.epsilon is None else f"{s.epsilon:.4g}"
            reid = s.reid()
            print(f"| {s.mode} | {s.mechanism} | {eps} | {s.depth} | {s.utility:.3f} "
                  f"({s.utility_low:.3f}) | {'-' if reid is None else f'{reid:.3f}'} | "
                  f"{s.probes} |")  # fmt: skip
        print(adv.sentence())
        if args.plain_only:
            t0 = time.perf_counter()
            advise(X, target=Floor("mean_cosine", ">=", 0.5), attacks=[Linkage()], runs=3,
                   seed=args.seed)  # fmt: skip
            t_old = time.perf_counter() - t0
            print(f"former plain-only analysis (linkage only): {t_old:.1f} s "
                  f"({t_old / t_modes:.1f}x the mode search)")  # fmt: skip


if __name__ == "__main__":
    main()
